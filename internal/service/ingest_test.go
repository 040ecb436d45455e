package service_test

import (
	"context"
	"flag"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/service"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/webui"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/client"
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

// Ingest creates the requests topic itself: a message POSTed before any
// worker has started is queued (202), not refused with 503 for an unknown
// topic, so the services may start in any order.
func TestIngestQueuesAMessageBeforeAnyWorkerHasStarted(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	secret := strings.Repeat("s", 32)
	brokers := []string{testenv.EmbeddedKafka(t, embedded.KafkaConfig{}).Addr()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := service.IngestConfig{Shared: service.Shared{Brokers: brokers, MongoURI: testenv.MongoURI(t), MongoDB: testenv.Name(t, "ingest"),
		AuthSecret: secret, TopicPrefix: testenv.Name(t, "ingest") + ".", Model: "echo", Partitions: 2}}
	runCtx, stop := context.WithCancel(ctx)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- service.RunIngest(runCtx, c, service.Env{Ready: func() { close(ready) }}, ln) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("RunIngest: %v", err)
	}
	tok, err := auth.Mint(secret, auth.DefaultTenant, "ann", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cl := &client.Client{BaseURL: "http://" + ln.Addr().String(), Token: tok}
	if _, err := cl.Send(ctx, "c1", "hello", client.SendOptions{}); err != nil {
		t.Errorf("a message before any worker: %v", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("RunIngest: %v", err)
	}
}
