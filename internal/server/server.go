package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Error codes of docs/api.md.
const (
	CodeInvalidArgument = "invalid_argument"
	CodeUnauthenticated = "unauthenticated"
	CodeNotFound        = "not_found"
	CodePayloadTooLarge = "payload_too_large"
	CodeRateLimited     = "rate_limited"
	CodeUnavailable     = "unavailable"
	CodeInternal        = "internal"
)

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// WriteError writes {"error":{"code":…,"message":…}} with status. A positive
// retryAfter sets Retry-After (whole seconds, at least 1).
func WriteError(w http.ResponseWriter, status int, code, message string, retryAfter time.Duration) {
	var b errorBody
	b.Error.Code, b.Error.Message = code, message
	if retryAfter > 0 {
		secs := int(retryAfter.Round(time.Second) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
	}
	WriteJSON(w, status, b)
}

// WriteJSON writes v as a JSON body with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Check reports whether a dependency is reachable.
type Check struct {
	Name string
	Fn   func(ctx context.Context) error
}

// CheckTimeout bounds each readiness check.
const CheckTimeout = 2 * time.Second

// ReadyCheckMetric is the gauge /metrics adds to g's series: per check
// (label check), 1 when it passed at the last /readyz, 0 when it failed.
// A check has no series until /readyz first runs it (in Kubernetes the
// kubelet's readiness probe does, every period).
const ReadyCheckMetric = "turnpike_ready_check_up"

// HandleOps registers /healthz (the process is alive), /readyz (every check
// passes, each within CheckTimeout; the checks run concurrently) and /metrics
// (Prometheus, from g, with ReadyCheckMetric) on mux. None of them needs
// auth.
func HandleOps(mux *http.ServeMux, g prometheus.Gatherer, checks ...Check) {
	up := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: ReadyCheckMetric, Help: "1 when the readiness check (label check: kafka, mongo) passed at the last /readyz, 0 when it failed.",
	}, []string{"check"})
	ready := prometheus.NewRegistry()
	ready.MustRegister(up)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		errs := make([]error, len(checks))
		var wg sync.WaitGroup
		for i, c := range checks {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(r.Context(), CheckTimeout)
				defer cancel()
				errs[i] = c.Fn(ctx)
			})
		}
		wg.Wait()
		status := make(map[string]string, len(checks))
		ok := true
		for i, c := range checks {
			if errs[i] != nil {
				status[c.Name] = errs[i].Error()
				up.WithLabelValues(c.Name).Set(0)
				ok = false
				continue
			}
			up.WithLabelValues(c.Name).Set(1)
			status[c.Name] = "ok"
		}
		if !ok {
			w.Header().Set("Retry-After", "1")
			WriteJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "checks": status})
			return
		}
		WriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "checks": status})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{g, ready}, promhttp.HandlerOpts{}))
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		mux.Handle(p, MethodNotAllowed("GET, HEAD"))
	}
}

// Serve serves h on ln until ctx ends, then shuts down gracefully within
// grace: it stops accepting, lets in-flight requests finish, and closes idle
// connections. Connections still active when grace runs out are closed
// forcibly and Serve returns an error. Hijacked connections (WebSockets) are
// the handler's to close. It returns nil after a clean shutdown.
//
// Every server is hardened the same way: the default Timeouts, answers of
// net/http itself (431, malformed requests, slow headers) in the JSON error
// shape, no redirect of non-canonical paths (404 instead), and an answer
// given before the body is read goes out at once, closing the connection.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration) error {
	return ServeTimeouts(ctx, ln, h, grace, Timeouts{})
}

// ServeTimeouts is Serve with timeouts other than the defaults.
func ServeTimeouts(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration, t Timeouts) error {
	t = t.withDefaults()
	srv := &http.Server{
		Handler:           guard(h),
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		IdleTimeout:       t.Idle,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(jsonErrorListener{ln}) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		// Grace ran out: cut the remaining connections rather than leave
		// their handlers running after Serve has returned.
		_ = srv.Close()
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("shutdown %s: %w", ln.Addr(), err)
	}
	return nil
}
