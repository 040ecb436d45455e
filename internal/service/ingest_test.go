package service_test

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/service"
	"github.com/turnpike-dev/turnpike/internal/webui"
)

// cmd/ingest never mints dev tokens: no flag or environment variable turns
// POST /v1/dev/token on (only the devstack sets ingest.Config.DevTokens).
func TestIngestHasNoWayToTurnDevTokensOn(t *testing.T) {
	t.Parallel()
	env := map[string]string{"TURNPIKE_DEV_TOKENS": "true", "TURNPIKE_INGEST_DEV_TOKENS": "1"}
	var c service.IngestConfig
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	set := flagenv.New(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	c.Bind(set)
	if err := set.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if c.Ingest.DevTokens {
		t.Fatal("dev tokens are on in cmd/ingest's configuration")
	}
	fs.VisitAll(func(f *flag.Flag) {
		if strings.Contains(f.Name, "dev") || strings.Contains(strings.ToLower(f.Usage), "dev token") {
			t.Errorf("cmd/ingest has a flag -%s (%s)", f.Name, f.Usage)
		}
	})
	if c.PublicStreamURL != webui.DefaultStreamURL {
		t.Errorf("public stream url %q, want the default %q", c.PublicStreamURL, webui.DefaultStreamURL)
	}
}

func TestIngestConfigRefusesABadPublicStreamURL(t *testing.T) {
	t.Parallel()
	c := service.IngestConfig{PublicStreamURL: "http://localhost:8081/v1/stream"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ws:// or wss://") {
		t.Fatalf("Validate: %v, want the stream URL refused", err)
	}
}
