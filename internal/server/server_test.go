package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/server"
)

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestWriteError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		status     int
		code       string
		retryAfter time.Duration
		wantRetry  string // "" means no Retry-After header
	}{
		{"invalid_argument is a 400 without Retry-After.", 400, server.CodeInvalidArgument, 0, ""},
		{"unauthenticated is a 401.", 401, server.CodeUnauthenticated, 0, ""},
		{"not_found is a 404.", 404, server.CodeNotFound, 0, ""},
		{"payload_too_large is a 413.", 413, server.CodePayloadTooLarge, 0, ""},
		{"rate_limited carries Retry-After in whole seconds.", 429, server.CodeRateLimited, 3 * time.Second, "3"},
		{"unavailable carries Retry-After.", 503, server.CodeUnavailable, time.Second, "1"},
		{"internal is a 500.", 500, server.CodeInternal, 0, ""},
		{"Retry-After under a second is at least 1.", 503, server.CodeUnavailable, 10 * time.Millisecond, "1"},
		{"Retry-After rounds to the nearest second.", 503, server.CodeUnavailable, 2600 * time.Millisecond, "3"},
		{"A negative retryAfter sets no Retry-After.", 503, server.CodeUnavailable, -time.Second, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := httptest.NewRecorder()
			server.WriteError(w, tt.status, tt.code, `bad "thing" <here>`, tt.retryAfter)
			res := w.Result()
			if res.StatusCode != tt.status {
				t.Errorf("status = %d, want %d", res.StatusCode, tt.status)
			}
			if ct := res.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			got, has := res.Header["Retry-After"]
			if tt.wantRetry == "" && has {
				t.Errorf("Retry-After = %q, want none", got)
			}
			if tt.wantRetry != "" && res.Header.Get("Retry-After") != tt.wantRetry {
				t.Errorf("Retry-After = %q, want %q", res.Header.Get("Retry-After"), tt.wantRetry)
			}
			body, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatal(err)
			}
			// Exactly the docs/api.md shape: one "error" object with code and message.
			var shape map[string]map[string]string
			dec := json.NewDecoder(strings.NewReader(string(body)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&shape); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			if len(shape) != 1 || len(shape["error"]) != 2 || shape["error"]["code"] != tt.code ||
				shape["error"]["message"] != `bad "thing" <here>` {
				t.Fatalf("body = %s, want {\"error\":{\"code\":%q,\"message\":…}}", body, tt.code)
			}
		})
	}
}

func TestWriteJSON(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	server.WriteJSON(w, http.StatusAccepted, map[string]string{"status": "queued"})
	res := w.Result()
	if res.StatusCode != http.StatusAccepted {
		t.Errorf("status = %d", res.StatusCode)
	}
	if res.Header.Get("Content-Type") != "application/json" || res.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("headers = %v", res.Header)
	}
	if body, err := io.ReadAll(res.Body); err != nil || strings.TrimSpace(string(body)) != `{"status":"queued"}` {
		t.Errorf("body = %s, %v", body, err)
	}
}

type readyBody struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

func opsServer(t *testing.T, checks ...server.Check) *httptest.Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "turnpike_test_things_total", Help: "Things."})
	reg.MustRegister(c)
	c.Add(3)
	mux := http.NewServeMux()
	server.HandleOps(mux, reg, checks...)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, ctx context.Context, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, body
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	ok := func(context.Context) error { return nil }
	tests := []struct {
		name       string
		checks     []server.Check
		wantStatus int
		wantChecks map[string]string
	}{
		{"Without checks the service is ready.", nil, 200, nil},
		{"Passing checks make the service ready.", []server.Check{{Name: "kafka", Fn: ok}, {Name: "mongodb", Fn: ok}}, 200,
			map[string]string{"kafka": "ok", "mongodb": "ok"}},
		{"One failing check makes it unavailable, with details per check.", []server.Check{
			{Name: "kafka", Fn: ok},
			{Name: "mongodb", Fn: func(context.Context) error { return errors.New("dial tcp 127.0.0.1:27017: connection refused") }},
		}, 503, map[string]string{"kafka": "ok", "mongodb": "dial tcp 127.0.0.1:27017: connection refused"}},
		{"Every failing check is reported.", []server.Check{
			{Name: "kafka", Fn: func(context.Context) error { return errors.New("no brokers") }},
			{Name: "mongodb", Fn: func(context.Context) error { return errors.New("timeout") }},
		}, 503, map[string]string{"kafka": "no brokers", "mongodb": "timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			srv := opsServer(t, tt.checks...)
			res, body := get(t, ctx, srv.URL+"/readyz")
			if res.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d (body %s)", res.StatusCode, tt.wantStatus, body)
			}
			var got readyBody
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			wantWord := map[int]string{200: "ok", 503: "unavailable"}[tt.wantStatus]
			if got.Status != wantWord {
				t.Errorf("status field = %q, want %q", got.Status, wantWord)
			}
			if len(got.Checks) != len(tt.wantChecks) {
				t.Errorf("checks = %v, want %v", got.Checks, tt.wantChecks)
			}
			for k, v := range tt.wantChecks {
				if got.Checks[k] != v {
					t.Errorf("checks[%s] = %q, want %q", k, got.Checks[k], v)
				}
			}
			if ra := res.Header.Get("Retry-After"); (tt.wantStatus == 503) != (ra != "") {
				t.Errorf("Retry-After = %q with status %d", ra, res.StatusCode)
			}
		})
	}
}

// Each check gets its own deadline and the checks run concurrently, so one
// slow dependency neither eats the others' time nor delays their verdict.
func TestReadyzRunsChecksConcurrentlyEachWithADeadline(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	var started atomic.Int32
	both := make(chan struct{})
	check := func(ctx context.Context) error {
		deadline, ok := ctx.Deadline()
		if !ok {
			return errors.New("no deadline")
		}
		if d := time.Until(deadline); d <= 0 || d > server.CheckTimeout {
			return errors.New("deadline outside (0, CheckTimeout]")
		}
		if started.Add(1) == 2 {
			close(both)
		}
		// Wait for the other check: this only succeeds if both run at once.
		select {
		case <-both:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	srv := opsServer(t, server.Check{Name: "a", Fn: check}, server.Check{Name: "b", Fn: check})
	res, body := get(t, ctx, srv.URL+"/readyz")
	if res.StatusCode != 200 {
		t.Fatalf("status = %d, body %s", res.StatusCode, body)
	}
}

func TestHealthzAndMetrics(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	failing := server.Check{Name: "kafka", Fn: func(context.Context) error { return errors.New("down") }}
	srv := opsServer(t, failing)
	res, body := get(t, ctx, srv.URL+"/healthz")
	if res.StatusCode != 200 || !strings.Contains(string(body), `"ok"`) {
		t.Errorf("/healthz with a failing dependency = %d %s, want 200: the process is alive", res.StatusCode, body)
	}
	res, body = get(t, ctx, srv.URL+"/metrics")
	if res.StatusCode != 200 || !strings.Contains(string(body), "turnpike_test_things_total 3") {
		t.Errorf("/metrics = %d, body lacks the registered counter:\n%s", res.StatusCode, body)
	}
}

// serving is one Serve call running in the background.
type serving struct {
	addr   string
	cancel context.CancelFunc
	done   chan struct{} // closed when Serve has returned err
	err    error
}

// startServe runs Serve on a fresh listener until the test ends.
func startServe(t *testing.T, h http.Handler, grace time.Duration) *serving {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	s := &serving{addr: "http://" + ln.Addr().String(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.err = server.Serve(ctx, ln, h, grace)
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// wait returns Serve's result, failing the test if ctx ends first.
func (s *serving) wait(ctx context.Context, t *testing.T) error {
	t.Helper()
	select {
	case <-s.done:
		return s.err
	case <-ctx.Done():
		t.Fatal("Serve did not return")
		return nil
	}
}

// waitListenerClosed dials until the listener refuses: Shutdown has begun.
func waitListenerClosed(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	host := strings.TrimPrefix(addr, "http://")
	for {
		c, err := net.DialTimeout("tcp", host, time.Second)
		if err != nil {
			return
		}
		c.Close()
		select {
		case <-ctx.Done():
			t.Fatal("the listener was never closed")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestServeReturnsNilAfterCancelAndLetsAnInFlightRequestFinish(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	entered, release, served := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var serveReturnedFirst, reqCtxCancelled atomic.Bool
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		select {
		case <-served:
			serveReturnedFirst.Store(true)
		default:
		}
		reqCtxCancelled.Store(r.Context().Err() != nil)
		io.WriteString(w, "finished")
	})
	s := startServe(t, h, 10*time.Second)
	go func() {
		<-s.done
		close(served)
	}()

	type result struct {
		body string
		err  error
	}
	resc := make(chan result, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.addr+"/slow", nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			resc <- result{err: err}
			return
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		resc <- result{string(b), err}
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the request never reached the handler")
	}
	s.cancel()
	waitListenerClosed(ctx, t, s.addr) // the shutdown has begun
	close(release)

	select {
	case r := <-resc:
		if r.err != nil || r.body != "finished" {
			t.Fatalf("in-flight request = %q, %v; want it to finish", r.body, r.err)
		}
	case <-ctx.Done():
		t.Fatal("the in-flight request never finished")
	}
	if err := s.wait(ctx, t); err != nil {
		t.Fatalf("Serve = %v, want nil after a clean shutdown", err)
	}
	if serveReturnedFirst.Load() {
		t.Error("Serve returned before the in-flight request finished")
	}
	if reqCtxCancelled.Load() {
		t.Error("the in-flight request's context was cancelled by the shutdown")
	}
}

func TestServeReturnsNilWhenIdle(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hi") })
	s := startServe(t, h, 10*time.Second)
	// Leave a kept-alive idle connection behind: shutdown must close it.
	res, body := get(t, ctx, s.addr+"/")
	if res.StatusCode != 200 || string(body) != "hi" {
		t.Fatalf("GET = %d %q", res.StatusCode, body)
	}
	s.cancel()
	if err := s.wait(ctx, t); err != nil {
		t.Fatalf("Serve = %v, want nil", err)
	}
}

func TestServeCutsRequestsStillRunningAfterGrace(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	})
	s := startServe(t, h, 50*time.Millisecond)
	t.Cleanup(func() { close(release) }) // runs before startServe's cleanup
	clientErr := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.addr+"/stuck", nil)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			_, err = io.ReadAll(res.Body)
			res.Body.Close()
		}
		clientErr <- err
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the request never reached the handler")
	}
	s.cancel()
	if err := s.wait(ctx, t); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Serve = %v, want an error wrapping context.DeadlineExceeded", err)
	}
	// The stuck connection was closed, so the client sees an error rather
	// than hanging until the handler gives up.
	select {
	case err := <-clientErr:
		if err == nil {
			t.Fatal("the stuck request completed, want its connection cut")
		}
	case <-ctx.Done():
		t.Fatal("the stuck request's connection was left open after Serve returned")
	}
}

func TestServeReportsAListenerFailure(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- server.Serve(ctx, ln, http.NotFoundHandler(), time.Second) }()
	ln.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Serve = nil after its listener failed, want an error")
		}
	case <-ctx.Done():
		t.Fatal("Serve did not return after its listener failed")
	}
}

// /metrics carries each readiness check's result at the last /readyz
// (turnpike_ready_check_up{check}, docs/api.md "Health and metrics"): no
// series before a probe, then 1 for a passing check and 0 for a failing
// one, following the check when it changes.
func TestMetricsCarryEachReadinessChecksLastResult(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	var mongoDown atomic.Bool
	mongoDown.Store(true)
	srv := opsServer(t,
		server.Check{Name: "kafka", Fn: func(context.Context) error { return nil }},
		server.Check{Name: "mongo", Fn: func(context.Context) error {
			if mongoDown.Load() {
				return errors.New("down")
			}
			return nil
		}})
	if _, body := get(t, ctx, srv.URL+"/metrics"); strings.Contains(string(body), server.ReadyCheckMetric) {
		t.Errorf("/metrics before any /readyz has %s:\n%s", server.ReadyCheckMetric, body)
	}
	for _, want := range []struct {
		mongoDown bool
		lines     []string
	}{
		{true, []string{`turnpike_ready_check_up{check="kafka"} 1`, `turnpike_ready_check_up{check="mongo"} 0`}},
		{false, []string{`turnpike_ready_check_up{check="kafka"} 1`, `turnpike_ready_check_up{check="mongo"} 1`}},
	} {
		mongoDown.Store(want.mongoDown)
		get(t, ctx, srv.URL+"/readyz")
		_, body := get(t, ctx, srv.URL+"/metrics")
		for _, l := range want.lines {
			if !strings.Contains(string(body), l+"\n") {
				t.Errorf("mongo down %v: /metrics lacks %q:\n%s", want.mongoDown, l, body)
			}
		}
		if !strings.Contains(string(body), "turnpike_test_things_total 3") {
			t.Errorf("/metrics lacks the registry's own counter:\n%s", body)
		}
	}
}
