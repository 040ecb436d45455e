package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/webui"
)

// pageServer serves the demo page naming streamURL, as ingest does.
func pageServer(t *testing.T, streamURL string) *httptest.Server {
	t.Helper()
	page, err := webui.New(webui.Config{StreamURL: streamURL})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(page)
	t.Cleanup(srv.Close)
	return srv
}

func TestSendWithOnlyTheIngestURLDialsItsStreamAndSaysTurnpikeOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A "gateway" that accepts one connection and closes it: the dial fails
	// after reaching it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	reached := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err == nil {
			close(reached)
			c.Close()
		}
	}()
	_, gwPort, _ := net.SplitHostPort(ln.Addr().String())
	ingest := pageServer(t, "ws://{host}:"+gwPort+"/v1/stream")
	env := map[string]string{"TURNPIKE_INGEST_URL": ingest.URL, "TURNPIKE_TOKEN": "t"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var stdout, stderr bytes.Buffer
	code := Run(ctx, []string{"send", "-timeout", "20s", "c1", "hello"}, lookup, &stdout, &stderr)
	select {
	case <-reached:
	default:
		t.Fatalf("send never dialed the gateway the ingest API names; exit %d, stderr %q", code, stderr.String())
	}
	want := fmt.Sprintf("turnpike: dial ws://127.0.0.1:%s/v1/stream:", gwPort)
	if code != 1 || !strings.HasPrefix(stderr.String(), want) || strings.Count(stderr.String(), "turnpike:") != 1 {
		t.Fatalf("exit %d, stderr %q; want 1 and one line starting %q with one prefix", code, stderr.String(), want)
	}
}

func TestMessageDropsRepeatedPrefixes(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("turnpike: dial ws://x: %w", errors.New("turnpike: 401 unauthenticated: bad token"))
	if got, want := message(err), "dial ws://x: 401 unauthenticated: bad token"; got != want {
		t.Fatalf("message = %q, want %q", got, want)
	}
}
