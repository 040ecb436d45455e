package server_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/server"
)

// Run listens first: with the API or the pprof address taken it returns
// the listen error, named after the process, before anything of the
// process is opened or started (Open is never called, so none of its
// parts ran or is left running), and it closes the listener it was given.
func TestATakenAddressStopsTheProcessBeforeAnythingStarts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		set  func(p *server.Process, taken string, given net.Listener)
	}{
		{"A taken API address stops the process.", func(p *server.Process, taken string, _ net.Listener) { p.Addr = taken }},
		{"A taken pprof address stops the process, and the given listener is closed.", func(p *server.Process, taken string, given net.Listener) {
			p.Listener, p.PprofAddr = given, taken
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer taken.Close()
			given, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer given.Close()
			var opened, readied atomic.Int32
			p := server.Process{
				Name: "proc", Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(),
				Ready: func() { readied.Add(1) },
				Open: func(context.Context, *server.Opened) (server.Parts, error) {
					opened.Add(1)
					return server.Parts{Run: func(ctx context.Context) error { <-ctx.Done(); return nil }}, nil
				},
			}
			tt.set(&p, taken.Addr().String(), given)
			err = server.Run(ctx, p)
			if err == nil || !strings.HasPrefix(err.Error(), "proc: ") || !strings.Contains(err.Error(), "address already in use") {
				t.Fatalf("Run = %v, want the listen error named after the process", err)
			}
			if opened.Load() != 0 || readied.Load() != 0 {
				t.Errorf("Open ran %d times and the process was ready %d times before the listen error; want neither", opened.Load(), readied.Load())
			}
			if p.Listener != nil {
				if _, err := given.Accept(); !errors.Is(err, net.ErrClosed) {
					t.Errorf("the given listener still accepts after Run returned (%v)", err)
				}
			}
		})
	}
}

// Run serves the parts' routes beside the ops endpoints, calls Ready once
// the process serves, and on stop returns nil once the work has returned,
// and only then runs Open's cleanups, last registered first.
func TestRunServesThePartsAndCleansUpAfterTheyStopped(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- server.Run(runCtx, server.Process{
			Name: "proc", Listener: ln, Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(),
			Ready: func() { close(ready) },
			Open: func(_ context.Context, o *server.Opened) (server.Parts, error) {
				o.Defer(func() { note("first opened closed") })
				o.Defer(func() { note("last opened closed") })
				return server.Parts{
					Routes: func(mux *http.ServeMux) {
						mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hi")) })
					},
					Run: func(ctx context.Context) error { <-ctx.Done(); note("work stopped"); return nil },
				}, nil
			},
		})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run before ready: %v", err)
	}
	for path, want := range map[string]int{"/hello": http.StatusOK, "/healthz": http.StatusOK, "/metrics": http.StatusOK} {
		if resp, body := get(t, ctx, "http://"+ln.Addr().String()+path); resp.StatusCode != want {
			t.Errorf("GET %s: %d %s, want %d", path, resp.StatusCode, body, want)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run after a clean stop: %v", err)
	}
	if want := []string{"work stopped", "last opened closed", "first opened closed"}; !slices.Equal(order, want) {
		t.Errorf("stop order %q, want %q", order, want)
	}
}
