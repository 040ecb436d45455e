package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/server"
)

// hardenedServer serves, with timeouts t, a route that decides on its
// Authorization header before reading the body (as the API's do), a GET
// route and the ops endpoints. It returns the address.
func hardenedServer(t *testing.T, ctx context.Context, to server.Timeouts) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/conversations/{c}/messages", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer ok" {
			server.WriteError(w, http.StatusUnauthorized, server.CodeUnauthenticated, "bad token", 0)
			return
		}
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<10))
		if err != nil {
			server.WriteBodyError(w, err)
			return
		}
		server.WriteJSON(w, http.StatusOK, map[string]int{"bytes": len(b)})
	})
	mux.HandleFunc("GET /ok", func(w http.ResponseWriter, _ *http.Request) {
		server.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/", server.NotFound)
	server.HandleOps(mux, prometheus.NewRegistry())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	sctx, stop := context.WithCancel(ctx)
	go func() { done <- server.ServeTimeouts(sctx, ln, mux, time.Second, to) }()
	t.Cleanup(func() { stop(); <-done })
	return ln.Addr().String()
}

// rawExchange writes raw to a new connection, then returns the answer
// read until the server closes the connection (or 10 s pass: a generous
// bound, never met by a server that answers).
func rawExchange(t *testing.T, addr, raw string) (*http.Response, []byte) {
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
		t.Fatalf("read the answer to %.60q: %v", raw, err)
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read the body of the answer to %.60q: %v", raw, err)
	}
	return res, body
}

// checkErrorShape fails unless res is status with exactly the JSON error
// shape and code.
func checkErrorShape(t *testing.T, res *http.Response, body []byte, status int, code string) {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("status %d (%s), want %d", res.StatusCode, body, status)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json (body %q)", ct, body)
	}
	if loc := res.Header.Get("Location"); loc != "" {
		t.Errorf("Location %q: an API path must not redirect", loc)
	}
	var shape struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&shape); err != nil || shape.Error.Code != code || shape.Error.Message == "" {
		t.Fatalf("body %q (%v), want the error shape with code %q", body, err, code)
	}
}

// Slow headers, slow and unfinished bodies and malformed requests, each on
// its own connection, while normal requests keep being answered.
func TestSlowAndMalformedRequestsGetJSONErrorsBesideNormalTraffic(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	addr := hardenedServer(t, ctx, server.Timeouts{ReadHeader: 300 * time.Millisecond, Read: 600 * time.Millisecond})
	// The requests that are not slow go to a server whose limits are far
	// beyond the test's: their answers cannot depend on how fast a loaded
	// machine sends them (a megabyte of headers takes a while).
	patient := hardenedServer(t, ctx, server.Timeouts{ReadHeader: time.Hour, Read: time.Hour})

	normal := make(chan error, 1)
	stopNormal := make(chan struct{})
	go func() {
		client := &http.Client{Timeout: 5 * time.Second}
		for n := 0; ; n++ {
			select {
			case <-stopNormal:
				if n == 0 {
					normal <- fmt.Errorf("no normal request was made")
					return
				}
				normal <- nil
				return
			default:
			}
			res, err := client.Get("http://" + addr + "/ok")
			if err != nil {
				normal <- err
				return
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				normal <- fmt.Errorf("normal request: status %d", res.StatusCode)
				return
			}
		}
	}()

	post := "POST /v1/conversations/c1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n"
	tests := []struct {
		name   string
		raw    string
		status int
		code   string
	}{
		// Slow: answered at the short limits.
		{"Headers that stop midway get 408.", "GET /ok HTTP/1.1\r\nHost: x\r\n", 408, server.CodeRequestTimeout},
		{"A request line that stops midway gets 408.", "GET /ok HTT", 408, server.CodeRequestTimeout},
		{"A body shorter than its Content-Length gets 408.", post + "Content-Length: 100\r\n\r\n0123456789", 408, server.CodeRequestTimeout},
		{"An unfinished chunked body gets 408.", post + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", 408, server.CodeRequestTimeout},
		// Not slow: answered as soon as they are read.
		{"A malformed request line gets a JSON 400.", "GARBAGE\r\n\r\n", 400, server.CodeInvalidArgument},
		{"Headers over the limit get a JSON 431.", "GET /ok HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 1<<20+4096) + "\r\n\r\n", 431, server.CodeHeaderTooLarge},
		{"An unknown transfer encoding gets a JSON 501.", "POST /ok HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: rot13\r\n\r\n", 501, server.CodeNotImplemented},
		{"An HTTP version the server does not speak gets a JSON 505.", "GET /ok HTTP/3.0\r\nHost: x\r\n\r\n", 505, server.CodeVersionNotSupp},
		{"HTTP/2 without its preface gets a JSON 505.", "GET /ok HTTP/2.0\r\nHost: x\r\n\r\n", 505, server.CodeVersionNotSupp},
		{"A missing Host header gets a JSON 400.", "GET /ok HTTP/1.1\r\n\r\n", 400, server.CodeInvalidArgument},
		{"Dot-dot in a path is not redirected.", "POST /v1/conversations/../messages HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 404, server.CodeNotFound},
		{"A dot segment in a path is not redirected.", "GET /./ok HTTP/1.1\r\nHost: x\r\n\r\n", 404, server.CodeNotFound},
		{"A double slash in a path is not redirected.", "GET //ok HTTP/1.1\r\nHost: x\r\n\r\n", 404, server.CodeNotFound},
		{"A wrong method on an ops endpoint gets 405 method_not_allowed.", "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405, server.CodeMethodNotAllowed},
	}
	var wg sync.WaitGroup
	for _, tt := range tests {
		wg.Go(func() {
			t.Run(tt.name, func(t *testing.T) {
				to := patient
				if tt.status == http.StatusRequestTimeout {
					to = addr
				}
				res, body := rawExchange(t, to, tt.raw)
				checkErrorShape(t, res, body, tt.status, tt.code)
			})
		})
	}
	wg.Wait()
	close(stopNormal)
	if err := <-normal; err != nil {
		t.Fatal(err)
	}
}

// An answer decided before the body (here a 401) goes out at once, however
// slowly the body comes: it does not wait for net/http to discard it. The
// read timeout is far beyond the client's patience, so only that can pass.
func TestAnAnswerBeforeTheBodyDoesNotWaitForTheBody(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	addr := hardenedServer(t, ctx, server.Timeouts{Read: time.Hour, ReadHeader: time.Hour})
	for _, raw := range []string{
		"POST /v1/conversations/c1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer bad\r\nContent-Length: 100\r\n\r\n0123456789",
		"POST /v1/conversations/c1/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
		"PUT /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789",
	} {
		res, body := rawExchange(t, addr, raw)
		if res.StatusCode != http.StatusUnauthorized && res.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("%.40q: status %d %s", raw, res.StatusCode, body)
		}
		if !res.Close {
			t.Errorf("%.40q: the connection stays open with an unread body on it", raw)
		}
	}
	// A request whose body was read keeps its connection.
	res, body := rawExchange(t, addr, "POST /v1/conversations/c1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nhi")
	if res.StatusCode != http.StatusOK || res.Close {
		t.Fatalf("a complete POST: status %d (%s), close %v; want 200 on a kept connection", res.StatusCode, body, res.Close)
	}
}

// docs/api.md, "Timeouts and early answers": the limits default to 10 s
// for the request line and headers, 30 s for the whole request and 120 s
// for an idle connection. The handler reads them off the http.Server that
// serves it; zero Timeouts fields take the defaults, others are kept.
func TestServeAppliesTheDocumentedTimeouts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		to   server.Timeouts
		want server.Timeouts
	}{
		{"Serve applies the documented defaults: 10 s, 30 s and 120 s.", server.Timeouts{},
			server.Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Idle: 120 * time.Second}},
		{"ServeTimeouts keeps the limits it is given.", server.Timeouts{ReadHeader: time.Second, Read: 2 * time.Second, Idle: 3 * time.Second},
			server.Timeouts{ReadHeader: time.Second, Read: 2 * time.Second, Idle: 3 * time.Second}},
		{"ServeTimeouts takes a default for each zero field.", server.Timeouts{Read: 2 * time.Second},
			server.Timeouts{ReadHeader: 10 * time.Second, Read: 2 * time.Second, Idle: 120 * time.Second}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			got := make(chan server.Timeouts, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				srv, _ := r.Context().Value(http.ServerContextKey).(*http.Server)
				if srv == nil {
					t.Error("no *http.Server in the request's context")
				} else {
					got <- server.Timeouts{ReadHeader: srv.ReadHeaderTimeout, Read: srv.ReadTimeout, Idle: srv.IdleTimeout}
				}
				server.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
			})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			sctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				if tt.to == (server.Timeouts{}) {
					done <- server.Serve(sctx, ln, h, time.Second)
					return
				}
				done <- server.ServeTimeouts(sctx, ln, h, time.Second, tt.to)
			}()
			defer func() { stop(); <-done }()
			res, body := rawExchange(t, ln.Addr().String(), "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d (%s)", res.StatusCode, body)
			}
			if g := <-got; g != tt.want {
				t.Errorf("the server's timeouts: %+v, want %+v", g, tt.want)
			}
		})
	}
}
