package service_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/internal/service"
	"github.com/turnpike-dev/turnpike/internal/testenv"
)

// addrLog is a slog handler that hands over the addr of the
// "pprof listening" record.
type addrLog struct{ addr chan string }

func (h addrLog) Enabled(context.Context, slog.Level) bool { return true }
func (h addrLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h addrLog) WithGroup(string) slog.Handler            { return h }
func (h addrLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "pprof listening" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "addr" {
				h.addr <- a.Value.String()
			}
			return true
		})
	}
	return nil
}

// pprofExchange writes raw to a new connection to addr and reads the
// answer (the server closes the connection after it, or 10 s pass: a
// generous bound, never met by a server that answers).
func pprofExchange(t *testing.T, addr, raw string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the answer to %.60q: %v", raw, err)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("the body of the answer to %.60q: %v", raw, err)
	}
	return res, string(b)
}

// README, "Observability", and docs/api.md, "Timeouts and early answers":
// TURNPIKE_PPROF_ADDR serves net/http/pprof, hardened as every other
// server is (server.Serve): net/http's own errors in the JSON shape, no
// redirect of a path that is not canonical, an answer before the body that
// closes the connection at once. (The timeouts come with server.Serve:
// internal/server's TestServeAppliesTheDocumentedTimeouts.)
func TestPprofServesTheProfilesUnderTheServersHardening(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	sctx, stop := context.WithCancel(ctx)
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- service.ServePprof(sctx, "127.0.0.1:0", slog.New(addrLog{addrs})) }()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("ServePprof returned before listening: %v", err)
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}

	for _, tt := range []struct {
		name, raw, want string
	}{
		{"The index lists the profiles.", "GET /debug/pprof/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "goroutine"},
		{"A named profile is served.", "GET /debug/pprof/goroutine?debug=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "goroutine profile:"},
		{"The command line is served.", "GET /debug/pprof/cmdline HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "service.test"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, body := pprofExchange(t, addr, tt.raw)
			if res.StatusCode != http.StatusOK || !strings.Contains(body, tt.want) {
				t.Fatalf("status %d, body %.200q; want 200 with %q", res.StatusCode, body, tt.want)
			}
		})
	}

	for _, tt := range []struct {
		name, raw string
		status    int
		code      string
	}{
		{"An HTTP version the server does not speak gets a JSON 505.", "GET /debug/pprof/ HTTP/3.0\r\nHost: x\r\n\r\n", 505, server.CodeVersionNotSupp},
		{"A malformed request line gets a JSON 400.", "GARBAGE\r\n\r\n", 400, server.CodeInvalidArgument},
		{"Headers over the limit get a JSON 431.", "GET /debug/pprof/ HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 1<<20+4096) + "\r\n\r\n", 431, server.CodeHeaderTooLarge},
		{"A dot-dot path is not redirected.", "GET /debug/pprof/../pprof/ HTTP/1.1\r\nHost: x\r\n\r\n", 404, server.CodeNotFound},
		{"A double slash is not redirected.", "GET //debug/pprof/ HTTP/1.1\r\nHost: x\r\n\r\n", 404, server.CodeNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, body := pprofExchange(t, addr, tt.raw)
			var shape struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if res.StatusCode != tt.status || res.Header.Get("Content-Type") != "application/json" ||
				json.Unmarshal([]byte(body), &shape) != nil || shape.Error.Code != tt.code || res.Header.Get("Location") != "" {
				t.Fatalf("status %d, Content-Type %q, Location %q, body %.200q; want %d with the JSON error shape of code %s",
					res.StatusCode, res.Header.Get("Content-Type"), res.Header.Get("Location"), body, tt.status, tt.code)
			}
		})
	}

	t.Run("An answer before an unread body closes the connection at once.", func(t *testing.T) {
		// The server waits for a body that never comes; only an early
		// answer with Connection: close gets here before the 10 s bound.
		res, _ := pprofExchange(t, addr, "POST /debug/nothing HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
		if res.StatusCode != http.StatusNotFound || !res.Close {
			t.Fatalf("status %d, close %v; want 404 closing the connection", res.StatusCode, res.Close)
		}
	})

	stop()
	if err := <-done; err != nil {
		t.Fatalf("ServePprof: %v", err)
	}
}

// Without an address, nothing is served and ServePprof returns when its
// context ends.
func TestPprofWithoutAnAddressServesNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- service.ServePprof(ctx, "", slog.New(addrLog{addrs})) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ServePprof: %v", err)
	}
	select {
	case a := <-addrs:
		t.Fatalf("listening on %s without an address", a)
	default:
	}
}
