package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/turnpike-dev/turnpike/internal/auth"
	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/ingest"
	"github.com/turnpike-dev/turnpike/internal/pushgw"
	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/internal/webui"
	"github.com/turnpike-dev/turnpike/internal/worker"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// shutdownGrace bounds the HTTP servers' graceful shutdown.
const shutdownGrace = 10 * time.Second

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
	// The requests topic must exist for the first POST, whether or not a
	// worker has started yet; the control topic for the completions reader.
	if err := topic.Ensure(ctx, c.Brokers, c.partitions(), c.Topics().Requests, c.Topics().Control); err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ServePprof(gctx, c.PprofAddr, env.Logger) })
	g.Go(func() error { return svc.Run(gctx) })
	g.Go(func() error { return server.Serve(gctx, ln, mux, shutdownGrace) })
	env.Logger.Info("ingest listening", slog.String("addr", ln.Addr().String()))
	env.ready()
	return g.Wait()
}

// WorkerConfig configures cmd/worker.
type WorkerConfig struct {
	Shared
	Addr   string // TURNPIKE_WORKER_ADDR: health and metrics, default ":8082"
	Worker worker.Config
	// Custom, if set, is the agent, written in Go (pkg/worker), instead of
	// the agent configuration file's; not a flag.
	Custom *worker.Custom
}

// Bind registers the worker flags.
func (c *WorkerConfig) Bind(set *flagenv.Set) {
	c.Shared.Bind(set)
	set.String(&c.Addr, "addr", "TURNPIKE_WORKER_ADDR", ":8082", "listen address of /healthz, /readyz and /metrics")
	c.Worker.BindFlags(set)
}

// Validate reports every problem, those of the agent configuration file
// (TURNPIKE_AGENT_CONFIG) included.
func (c WorkerConfig) Validate() error {
	w := c.Worker
	w.Brokers = c.Brokers
	errs := []error{c.Shared.validate(true, true, false), w.Validate()}
	if c.Model == "openai" && c.OpenAI.Model == "" {
		errs = append(errs, errors.New("TURNPIKE_OPENAI_MODEL is required with TURNPIKE_MODEL=openai"))
	}
	if _, err := c.agentConfig(); err != nil {
		errs = append(errs, err)
	}
	if c.Custom != nil && c.Worker.AgentFile != "" {
		errs = append(errs, errors.New("TURNPIKE_AGENT_CONFIG is set, but the worker runs an agent written in Go"))
	}
	return errors.Join(errs...)
}

// agentConfig loads the agent configuration file, if one is set.
func (c WorkerConfig) agentConfig() (*worker.AgentConfig, error) {
	if c.Worker.AgentFile == "" {
		return nil, nil
	}
	return worker.LoadAgentConfig(c.Worker.AgentFile)
}

// RunWorker runs the worker until ctx ends; with a non-nil ln it also
// serves the ops endpoints there (or on c.Addr when ln is nil and c.Addr
// is set).
func RunWorker(ctx context.Context, c WorkerConfig, env Env, ln net.Listener) error {
	env = env.withDefaults()
	if err := c.Validate(); err != nil {
		return err
	}
	store, pingMongo, closeStore, err := c.OpenStore(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	return runWorker(ctx, c, env, ln, store, pingMongo)
}

func runWorker(ctx context.Context, c WorkerConfig, env Env, ln net.Listener, store history.Store, pingMongo func(context.Context) error) error {
	m, err := c.NewModel()
	if err != nil {
		return err
	}
	agent, err := c.agentConfig()
	if err != nil {
		return err
	}
	models, err := c.NewAgentModels(agent, os.Getenv)
	if err != nil {
		return err
	}
	wc := c.Worker
	wc.Brokers, wc.Topics = c.Brokers, c.Topics()
	if c.Partitions > 0 { // TURNPIKE_PARTITIONS, shared by every service
		wc.Partitions = c.Partitions
	}
	tr, err := c.NewTracing(ctx, "worker")
	if err != nil {
		return err
	}
	defer tr.Shutdown(context.WithoutCancel(ctx))
	w, err := worker.New(wc, worker.Deps{Store: store, Model: m, ModelName: c.ModelName(), Agent: agent, Models: models,
		Registerer: env.Registry, Logger: env.Logger, Tracing: tr, Custom: c.Custom,
		// Ready once the topics exist: ingest's produce needs them.
		Ready: env.ready})
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ServePprof(gctx, c.PprofAddr, env.Logger) })
	g.Go(func() error { return w.Run(gctx) })
	if ln == nil && c.Addr != "" {
		if ln, err = net.Listen("tcp", c.Addr); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}
	if ln != nil {
		mux := http.NewServeMux()
		server.HandleOps(mux, env.Registry, kafkaCheck(c.Brokers), server.Check{Name: "mongo", Fn: pingMongo})
		g.Go(func() error { return server.Serve(gctx, ln, mux, shutdownGrace) })
	}
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
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ServePprof(gctx, c.PprofAddr, env.Logger) })
	g.Go(func() error { return gw.Run(gctx) })
	g.Go(func() error { return server.Serve(gctx, ln, mux, shutdownGrace) })
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
