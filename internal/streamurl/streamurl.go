// Package streamurl finds the push gateway of an ingest API, for the
// clients (cmd/turnpike, cmd/loadgen) given only the ingest URL.
package streamurl

import (
	"context"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// streamMeta is the tag of the demo page that names the push gateway.
const streamMeta = `<meta name="turnpike-stream-url" content="`

// pageBytes bounds how much of the ingest API's page is read.
const pageBytes = 64 << 10

// Discover finds the push gateway of the ingest API at ingestURL: the
// WebSocket URL its demo page names (the devstack's gateway, or ingest's
// TURNPIKE_PUBLIC_STREAM_URL), with "{host}" standing for ingestURL's host;
// when the page cannot be read, the same host on port 8081.
func Discover(ctx context.Context, hc *http.Client, ingestURL string) (string, error) {
	u, err := url.Parse(ingestURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("ingest URL %q: want http:// or https:// and a host", ingestURL)
	}
	host := u.Hostname()
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if s, ok := pageStream(ctx, hc, u); ok {
		return strings.ReplaceAll(s, "{host}", host), nil
	}
	scheme := "ws"
	if u.Scheme == "https" {
		scheme = "wss"
	}
	return scheme + "://" + net.JoinHostPort(u.Hostname(), "8081") + "/v1/stream", nil
}

// pageStream reads the stream URL from the page ingest serves at "/".
func pageStream(ctx context.Context, hc *http.Client, ingest *url.URL) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ingest.JoinPath("/").String(), nil)
	if err != nil {
		return "", false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", false
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, pageBytes))
	if err != nil {
		return "", false
	}
	_, rest, ok := strings.Cut(string(b), streamMeta)
	if !ok {
		return "", false
	}
	v, _, ok := strings.Cut(rest, `"`)
	if !ok {
		return "", false
	}
	s := html.UnescapeString(v)
	if !strings.HasPrefix(s, "ws://") && !strings.HasPrefix(s, "wss://") {
		return "", false
	}
	return s, true
}
