package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/mongodial"
	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/internal/tracing"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// A Worker runs an agent on Turnpike's pipeline: it consumes the requests
// topic in a consumer group, runs the agent for each request (strictly in
// order per conversation), streams its tokens to the stream topic and
// persists each turn in MongoDB, exactly once. Agent code runs at least
// once per request, not exactly once: a redelivery after a crash, a run
// aborted by a drain, or a retry after a transient error runs it again
// (with a new run id, the same request id).
type Worker struct {
	cfg  Config
	opts *options
}

// New validates cfg and the options and returns a Worker. With neither
// WithAgent nor WithAgentFactory it runs the agent cmd/worker runs: the
// agent file's (Config.AgentFile), else one agent on Config.Model. Zero
// durations and counts of cfg take their defaults (see Config).
func New(cfg Config, opts ...Option) (*Worker, error) {
	o := collect(opts)
	if err := o.checkAgent(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if err := cfg.validate(o.store == nil, o.goAgent()); err != nil {
		return nil, err
	}
	if o.store != nil && cfg.Memory != "" && o.memory == nil {
		// Config.Memory's service is opened on the worker's MongoDB,
		// which WithStore replaces: it would be silently off.
		return nil, errors.New("worker: Config.Memory (TURNPIKE_MEMORY) opens memory on the worker's MongoDB, which WithStore replaces: pass the service with WithMemory")
	}
	return &Worker{cfg: cfg, opts: o}, nil
}

// Run runs the worker process until ctx ends: it listens on Config.Addr
// (and Config.PprofAddr) first, so that a taken address stops it before
// it starts anything, then opens the store, tracing and the agent's
// models, serves /healthz, /readyz and /metrics, and consumes. When ctx
// ends it drains: in-flight runs may finish within Config.DrainTimeout,
// what is done is committed, the consumer group is left, and everything
// Run started has stopped when it returns. It returns nil after a clean
// stop. Run once.
func (w *Worker) Run(ctx context.Context) error {
	log := w.opts.logger
	if log == nil {
		log = w.cfg.newLogger(os.Stderr)
	}
	return w.run(ctx, log, w.registry())
}

// registry is the options' registry, else one with the Go and process
// collectors.
func (w *Worker) registry() *prometheus.Registry {
	if w.opts.registry != nil {
		return w.opts.registry
	}
	return server.NewRegistry()
}

func (w *Worker) run(ctx context.Context, log *slog.Logger, reg *prometheus.Registry) error {
	c, o := w.cfg, w.opts
	// The ready hook is the consumer's to call (once the topics exist:
	// ingest's produce needs them), not the process's.
	return server.Run(ctx, server.Process{
		Name: "worker", Listener: o.listener, Addr: c.Addr, PprofAddr: c.PprofAddr,
		Tracing: &tracing.Config{Endpoint: c.OTLPEndpoint, SampleRatio: c.TraceSampleRatio},
		Logger:  log, Registry: reg,
		Open: func(ctx context.Context, op *server.Opened) (server.Parts, error) {
			checks := []server.Check{{Name: "kafka", Fn: func(ctx context.Context) error { return topic.Ping(ctx, c.Brokers) }}}
			store, artifacts := o.store, o.artifacts
			if store == nil {
				conn, err := mongodial.Dial(c.MongoURI, c.MongoDB, c.MongoPool)
				if err != nil {
					return server.Parts{}, err
				}
				op.Defer(conn.Close)
				ms, err := history.NewMongoStore(ctx, conn.DB, history.MongoConfig{})
				if err != nil {
					return server.Parts{}, fmt.Errorf("open history store: %w", err)
				}
				store = ms
				if o.artifacts == nil {
					if artifacts, err = history.NewMongoArtifacts(ctx, conn.DB, history.ArtifactConfig{Logger: log}); err != nil {
						return server.Parts{}, fmt.Errorf("open artifacts: %w", err)
					}
				}
				checks = append(checks, server.Check{Name: "mongo", Fn: conn.Ping})
				if o.memory == nil && c.Memory != "" {
					search, _ := memorySearch(c.Memory) // Validate checked it
					mem, err := history.NewMongoMemory(ctx, conn.DB, history.MongoMemoryConfig{Search: search})
					if err != nil {
						return server.Parts{}, fmt.Errorf("open memory: %w", err)
					}
					o.memory = mem
				}
			}
			d, err := c.agentDeps(o)
			if err != nil {
				return server.Parts{}, err
			}
			d.Store, d.Artifacts, d.Registerer, d.Logger, d.Tracing, d.Ready = store, artifacts, reg, log, op.Tracing, o.ready
			cons, err := newConsumer(c, d)
			if err != nil {
				return server.Parts{}, err
			}
			return server.Parts{Checks: checks, Run: cons.Run}, nil
		},
	})
}

// agentDeps builds what the agent needs from c: Config.Model's model (the
// agent configuration's "default", a Go agent's default summarizer) and,
// without a Go agent in o, the agent configuration and its models.
func (c Config) agentDeps(o *options) (deps, error) {
	d := deps{Go: o}
	m, err := c.newModel()
	if err != nil {
		return deps{}, err
	}
	d.Model, d.ModelName = m, c.modelLabel()
	if o.goAgent() {
		return d, nil
	}
	if d.Agent, err = c.agentFile(); err != nil {
		return deps{}, err
	}
	if d.Models, err = c.newAgentModels(d.Agent, os.Getenv); err != nil {
		return deps{}, err
	}
	return d, nil
}

// validateStep reports the problems of the settings a Step uses (after
// their defaults are applied).
func (c Config) validateStep(goAgent bool) error {
	c.setDefaults()
	errs := c.runErrors()
	if _, err := c.newModel(); err != nil {
		errs = append(errs, err)
	}
	if goAgent && c.AgentFile != "" {
		errs = append(errs, errAgentFileWithGoAgent)
	}
	if _, err := c.agentFile(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// runErrors are the problems of the settings of a request's run, which a
// Step and the consumer share: the window, compaction, the run's timeout,
// the echo model's delay and the step journal.
func (c Config) runErrors() []error {
	var errs []error
	if c.WindowMessages < 0 {
		errs = append(errs, fmt.Errorf("worker: WindowMessages %d < 0", c.WindowMessages))
	}
	if c.CompactTokens < 0 {
		errs = append(errs, fmt.Errorf("worker: CompactTokens %d < 0", c.CompactTokens))
	}
	if c.CompactKeep < 0 {
		errs = append(errs, fmt.Errorf("worker: CompactKeep %d < 0", c.CompactKeep))
	}
	if c.RunTimeout < 0 {
		errs = append(errs, fmt.Errorf("worker: RunTimeout %v < 0", c.RunTimeout))
	}
	if c.EchoDelay < 0 {
		errs = append(errs, fmt.Errorf("worker: EchoDelay %v < 0", c.EchoDelay))
	}
	if c.JournalDivergence != DivergenceLive && c.JournalDivergence != DivergenceFail {
		errs = append(errs, fmt.Errorf("worker: JournalDivergence %q: want live or fail", c.JournalDivergence))
	}
	if c.JournalStepBytes < 1 {
		errs = append(errs, fmt.Errorf("worker: JournalStepBytes %d < 1", c.JournalStepBytes))
	}
	if c.JournalBytes < 1 || c.JournalBytes > history.MaxJournalBytes {
		errs = append(errs, fmt.Errorf("worker: JournalBytes %d not in 1..%d", c.JournalBytes, history.MaxJournalBytes))
	}
	if c.JournalTTL < 0 {
		errs = append(errs, fmt.Errorf("worker: JournalTTL %v < 0", c.JournalTTL))
	}
	return errs
}

// Main is the body of a worker binary: it reads the configuration from
// os.Args and the environment (as LoadConfig; a binary with an agent
// written in Go has no flags for the agent built without Go code), runs
// a Worker with opts until SIGINT or SIGTERM, and exits: 0 after a clean
// stop, 1 when the worker fails (bad settings included), 2 for bad flags
// or options (an agent file given to a binary with an agent written in
// Go included).
func Main(opts ...Option) {
	os.Exit(mainWith(os.Args[1:], os.LookupEnv, os.Stderr, opts))
}

func mainWith(args []string, lookupEnv func(string) (string, bool), stderr io.Writer, opts []Option) int {
	o := collect(opts)
	c := DefaultConfig()
	if code, ok := flagenv.ParseCommand("worker", args, lookupEnv, stderr, func(set *flagenv.Set) { c.register(set, o, false) }); !ok {
		return code
	}
	log := o.logger
	if log == nil {
		log = c.newLogger(stderr)
	}
	return server.Main("worker", log, func(ctx context.Context) error {
		w, err := New(c, opts...)
		if err != nil {
			return err
		}
		return w.run(ctx, log, w.registry())
	})
}
