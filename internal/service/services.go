package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/ingest"
	"github.com/turnpike-dev/turnpike/internal/pushgw"
	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/internal/webui"
	"github.com/turnpike-dev/turnpike/pkg/auth"
)

// Env carries what a service needs from its process: a logger, a metrics
// registry, and a hook called once the service serves.
type Env struct {
	Logger   *slog.Logger
	Registry *prometheus.Registry
	// Ready, if set, is called once the service is ready to serve.
	Ready func()
}

// withDefaults fills a nil Logger (discard) and Registry (a fresh one).
func (e Env) withDefaults() Env {
	if e.Logger == nil {
		e.Logger = slog.New(slog.DiscardHandler)
	}
	if e.Registry == nil {
		e.Registry = prometheus.NewRegistry()
	}
	return e
}

func (e Env) ready() {
	if e.Ready != nil {
		e.Ready()
	}
}

// IngestConfig configures cmd/ingest.
type IngestConfig struct {
	Shared
	Addr string // TURNPIKE_INGEST_ADDR, default ":8080"
	// PublicStreamURL is the push gateway's WebSocket URL as browsers reach
	// it, for the demo page; "{host}" stands for the page's host name.
	// TURNPIKE_PUBLIC_STREAM_URL, default webui.DefaultStreamURL.
	PublicStreamURL string
	Ingest          ingest.Config
}

// devTokenTTL is the lifetime of the tokens of POST /v1/dev/token.
const devTokenTTL = 7 * 24 * time.Hour

// Bind registers the ingest flags.
func (c *IngestConfig) Bind(set *flagenv.Set) {
	c.Shared.Bind(set)
	set.String(&c.Addr, "addr", "TURNPIKE_INGEST_ADDR", ":8080", "listen address of the HTTP API")
	set.Int(&c.Ingest.MaxContentBytes, "max-content-bytes", "TURNPIKE_MAX_CONTENT_BYTES", 32768, "largest user message in bytes")
	c.Ingest.BindFlags(set)
	set.String(&c.PublicStreamURL, "public-stream-url", "TURNPIKE_PUBLIC_STREAM_URL", webui.DefaultStreamURL,
		"push gateway WebSocket URL for the demo page at /; {host} is the page's host name")
}

// Validate reports every problem.
func (c IngestConfig) Validate() error {
	return errors.Join(c.Shared.validate(true, true, true), c.Ingest.Validate(), c.page().Validate())
}

func (c IngestConfig) page() webui.Config {
	return webui.Config{StreamURL: c.PublicStreamURL, DevTokens: c.Ingest.DevTokens}
}

// RunIngest serves the ingest API on ln (or c.Addr when ln is nil) until ctx ends.
func RunIngest(ctx context.Context, c IngestConfig, env Env, ln net.Listener) error {
	env = env.withDefaults()
	if err := c.Validate(); err != nil {
		return err
	}
	verifier, err := auth.NewVerifier(c.AuthSecret, nil)
	if err != nil {
		return err
	}
	store, pingMongo, closeStore, err := c.OpenStore(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	tr, err := c.NewTracing(ctx, "ingest")
	if err != nil {
		return err
	}
	defer tr.Shutdown(context.WithoutCancel(ctx))
	producer, err := ingest.NewKafkaProducer(c.Brokers, c.Topics().Requests)
	if err != nil {
		return err
	}
	producer.WithTracing(tr)
	defer producer.Close() // after the server stopped: flushes nothing in flight
	page, err := webui.New(c.page())
	if err != nil {
		return err
	}
	control, err := ingest.NewKafkaProducer(c.Brokers, c.Topics().Control)
	if err != nil {
		return err
	}
	defer control.Close()
	deps := ingest.Deps{
		Verifier: verifier, Producer: producer, History: store, Page: page, Registerer: env.Registry, Logger: env.Logger,
		Cancels: store, Control: control, Positions: ingest.NewKafkaPositions(c.Brokers, c.Topics().Requests),
		Completions: ingest.NewKafkaCompletions(c.Brokers, c.Topics().Control, env.Logger),
		Tracing:     tr,
	}
	if c.Ingest.DevTokens {
		deps.MintToken = func(user string) (string, error) {
			return auth.Mint(c.AuthSecret, auth.DefaultTenant, user, devTokenTTL, time.Now())
		}
	}
	svc, err := ingest.New(c.Ingest, deps)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	// The API (and the demo page at /) answers every path the ops endpoints
	// don't, so an unknown route gets the JSON error shape too.
	mux.Handle("/", svc.Handler())
	server.HandleOps(mux, env.Registry, kafkaCheck(c.Brokers), server.Check{Name: "mongo", Fn: pingMongo})
	if ln == nil {
		if ln, err = net.Listen("tcp", c.Addr); err != nil {
			return fmt.Errorf("ingest: %w", err)
		}
	}
	pprofLn, err := server.ListenPprof(c.PprofAddr)
	if err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	if pprofLn != nil {
		defer pprofLn.Close()
	}
	// The requests topic must exist for the first POST, whether or not a
	// worker has started yet; the control topic for the completions reader.
	if err := topic.Ensure(ctx, c.Brokers, c.partitions(), c.Topics().Requests, c.Topics().Control); err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return server.ServePprof(gctx, pprofLn, env.Logger) })
	g.Go(func() error { return svc.Run(gctx) })
	g.Go(func() error { return server.Serve(gctx, ln, mux, server.ShutdownGrace) })
	env.Logger.Info("ingest listening", slog.String("addr", ln.Addr().String()))
	env.ready()
	return g.Wait()
}

// PushgwConfig configures cmd/pushgw.
type PushgwConfig struct {
	Shared
	Addr   string // TURNPIKE_PUSHGW_ADDR, default ":8081"
	Pushgw pushgw.Config
}

// Bind registers the push gateway flags.
func (c *PushgwConfig) Bind(set *flagenv.Set) {
	c.Shared.Bind(set)
	set.String(&c.Addr, "addr", "TURNPIKE_PUSHGW_ADDR", ":8081", "listen address of the WebSocket endpoint /v1/stream and the Server-Sent Events endpoint /v1/conversations/{conversation}/events")
	c.Pushgw.BindFlags(set)
}

// Validate reports every problem.
func (c PushgwConfig) Validate() error {
	p := c.Pushgw
	p.Brokers = c.Brokers
	return errors.Join(c.Shared.validate(true, false, true), p.Validate())
}

// RunPushgw serves the push gateway on ln (or c.Addr) until ctx ends.
func RunPushgw(ctx context.Context, c PushgwConfig, env Env, ln net.Listener) error {
	env = env.withDefaults()
	if err := c.Validate(); err != nil {
		return err
	}
	verifier, err := auth.NewVerifier(c.AuthSecret, nil)
	if err != nil {
		return err
	}
	pc := c.Pushgw
	pc.Brokers, pc.Topic = c.Brokers, c.Topics().Stream
	// The gateway reads the stream topic; make sure it exists even when no
	// worker has started yet.
	if err := topic.Ensure(ctx, c.Brokers, c.partitions(), pc.Topic); err != nil {
		return fmt.Errorf("pushgw: %w", err)
	}
	gw, err := pushgw.New(pc, verifier, env.Registry, env.Logger)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/stream", gw)
	mux.HandleFunc(pushgw.EventsPath, gw.ServeEvents) // GET, and OPTIONS for CORS
	mux.Handle("/v1/stream", server.MethodNotAllowed("GET"))
	mux.HandleFunc("/", server.NotFound)
	server.HandleOps(mux, env.Registry, kafkaCheck(c.Brokers), server.Check{Name: "gateway", Fn: gw.Ready})
	if ln == nil {
		if ln, err = net.Listen("tcp", c.Addr); err != nil {
			return fmt.Errorf("pushgw: %w", err)
		}
	}
	pprofLn, err := server.ListenPprof(c.PprofAddr)
	if err != nil {
		return fmt.Errorf("pushgw: %w", err)
	}
	if pprofLn != nil {
		defer pprofLn.Close()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return server.ServePprof(gctx, pprofLn, env.Logger) })
	g.Go(func() error { return gw.Run(gctx) })
	g.Go(func() error { return server.Serve(gctx, ln, mux, server.ShutdownGrace) })
	g.Go(func() error {
		// Ready once the live readers have their start positions.
		for gctx.Err() == nil {
			if gw.Ready(gctx) == nil {
				env.Logger.Info("pushgw listening", slog.String("addr", ln.Addr().String()))
				env.ready()
				return nil
			}
			sleepCtx(gctx, 20*time.Millisecond)
		}
		return nil
	})
	return g.Wait()
}

func kafkaCheck(brokers []string) server.Check {
	return server.Check{Name: "kafka", Fn: func(ctx context.Context) error { return topic.Ping(ctx, brokers) }}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
