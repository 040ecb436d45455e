package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
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

func TestStreamOfFollowsTheIngestAPI(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	onHost := pageServer(t, "ws://{host}:9123/v1/stream")
	elsewhere := pageServer(t, "wss://push.example.com/v1/stream")
	noPage := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(noPage.Close)
	tests := []struct {
		name, ingest, want string
	}{
		{"The page's gateway on its own host is found on the ingest URL's host.", onHost.URL, "ws://127.0.0.1:9123/v1/stream"},
		{"The page's gateway on another host is used as it is.", elsewhere.URL, "wss://push.example.com/v1/stream"},
		{"Without a page the gateway is on the ingest host's port 8081.", noPage.URL, "ws://127.0.0.1:8081/v1/stream"},
	}
	for _, tt := range tests {
		got, err := streamOf(ctx, http.DefaultClient, tt.ingest)
		if err != nil || got != tt.want {
			t.Errorf("%s streamOf(%s) = %q, %v; want %q", tt.name, tt.ingest, got, err, tt.want)
		}
	}
	if _, err := streamOf(ctx, http.DefaultClient, "localhost:8080"); err == nil {
		t.Error("an ingest URL without a scheme was accepted")
	}
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
