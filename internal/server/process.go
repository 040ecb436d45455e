package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"slices"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/turnpike-dev/turnpike/internal/tracing"
)

// Process is the wiring that ingest, the push gateway and the worker share
// (pkg/ingest, pkg/pushgw, pkg/worker): their listeners, logger, tracing,
// pprof and ops server. Run runs one.
type Process struct {
	// Name is the process's name ("ingest"): listen errors start with it,
	// and it names the tracing service.
	Name string
	// Listener is the API and ops listener; nil: Run listens on Addr, and
	// with an empty Addr serves no HTTP at all. Run closes it.
	Listener net.Listener
	Addr     string
	// PprofAddr, when set, serves net/http/pprof there (ServePprof).
	PprofAddr string
	// Tracing, when set, is opened (its ServiceName is Name) after the
	// listeners and before Open, and shut down after every other part
	// stopped.
	Tracing *tracing.Config
	Logger  *slog.Logger
	// Registry is served at /metrics.
	Registry prometheus.Gatherer
	// Ready, if set, is called once the process serves: after Parts.Run
	// started (and, with Parts.WaitReady, once that returned true).
	Ready func()
	// Open opens the process's dependencies, registering how each closes
	// with Opened.Defer, and returns its parts. Run calls it once every
	// listener is open, never before.
	Open func(ctx context.Context, o *Opened) (Parts, error)
}

// Opened is what Run hands Process.Open: the process's tracing and the
// cleanups of what Open opened.
type Opened struct {
	// Tracing is the process's tracing (nil without Process.Tracing).
	Tracing  *tracing.Tracing
	cleanups []func()
}

// Defer registers f to run when Run returns, after every part stopped;
// the cleanups run in the reverse order of their registration, as defers
// do, also when Open fails.
func (o *Opened) Defer(f func()) { o.cleanups = append(o.cleanups, f) }

// Parts are what a process runs once Open has opened its dependencies.
type Parts struct {
	// Routes registers the listener's routes beside the ops endpoints
	// (HandleOps; nil: the ops endpoints only).
	Routes func(mux *http.ServeMux)
	// Checks are /readyz's.
	Checks []Check
	// Run is the process's work; it returns once ctx ends.
	Run func(ctx context.Context) error
	// WaitReady, if set, returns true once the process serves (false when
	// ctx ended first): Run then logs that it listens and calls Ready.
	// Without it the process serves as soon as its parts started.
	WaitReady func(ctx context.Context) bool
}

// Run runs p until ctx ends, in this order: it listens (Listener or Addr,
// then PprofAddr), so that a taken address stops the process before
// anything of it starts; opens tracing; calls Open; then runs Parts.Run,
// the pprof server and the HTTP server of the routes and ops endpoints,
// each in a goroutine it waits for. The first of them to fail stops the
// others. When ctx ends the HTTP servers drain within ShutdownGrace, and
// Run returns once every goroutine it started has returned and the
// cleanups have run (Open's, in reverse order, then tracing's shutdown,
// then the listeners'): nil after a clean stop.
func Run(ctx context.Context, p Process) error {
	log := p.Logger
	ln := p.Listener
	if ln == nil && p.Addr != "" {
		var err error
		if ln, err = net.Listen("tcp", p.Addr); err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
	}
	if ln != nil {
		defer ln.Close()
	}
	pprofLn, err := ListenPprof(p.PprofAddr)
	if err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	if pprofLn != nil {
		defer pprofLn.Close()
	}
	o := &Opened{}
	if p.Tracing != nil {
		tc := *p.Tracing
		tc.ServiceName = p.Name
		tr, err := tracing.New(ctx, tc)
		if err != nil {
			return err
		}
		defer tr.Shutdown(context.WithoutCancel(ctx))
		o.Tracing = tr
	}
	defer func() {
		for _, f := range slices.Backward(o.cleanups) {
			f()
		}
	}()
	parts, err := p.Open(ctx, o)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ServePprof(gctx, pprofLn, log) })
	g.Go(func() error { return parts.Run(gctx) })
	if ln != nil {
		mux := http.NewServeMux()
		if parts.Routes != nil {
			parts.Routes(mux)
		}
		HandleOps(mux, p.Registry, parts.Checks...)
		g.Go(func() error { return Serve(gctx, ln, mux, ShutdownGrace) })
	}
	serving := func() {
		if ln != nil {
			log.Info(p.Name+" listening", slog.String("addr", ln.Addr().String()))
		}
		if p.Ready != nil {
			p.Ready()
		}
	}
	if parts.WaitReady == nil {
		serving()
	} else {
		g.Go(func() error {
			if parts.WaitReady(gctx) {
				serving()
			}
			return nil
		})
	}
	return g.Wait()
}

// NewRegistry returns a registry with the Go and process collectors: a
// process's /metrics unless its caller gives it one.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Main runs run until SIGINT or SIGTERM and returns the process's exit
// code: 0 after a clean stop ("<name> stopped" at info), 1 when run
// failed (its error logged).
func Main(name string, log *slog.Logger, run func(ctx context.Context) error) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		log.Error(name+" stopped", "error", err)
		return 1
	}
	log.Info(name + " stopped")
	return 0
}
