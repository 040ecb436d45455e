package streamurl

import (
	"context"
	"net/http"
	"net/http/httptest"
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

func TestDiscoverFollowsTheIngestAPI(t *testing.T) {
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
		got, err := Discover(ctx, http.DefaultClient, tt.ingest)
		if err != nil || got != tt.want {
			t.Errorf("%s Discover(%s) = %q, %v; want %q", tt.name, tt.ingest, got, err, tt.want)
		}
	}
	if _, err := Discover(ctx, http.DefaultClient, "localhost:8080"); err == nil {
		t.Error("an ingest URL without a scheme was accepted")
	}
}
