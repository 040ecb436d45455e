package ingest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/logging"
	"github.com/turnpike-dev/turnpike/internal/mongodial"
	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/internal/tracing"
	"github.com/turnpike-dev/turnpike/internal/webui"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// A Server is the ingest process: the HTTP API of docs/api.md (Handler)
// on Kafka and MongoDB, the count of queued requests it keeps from the
// workers' completions, and, on Config.Addr, the ops endpoints /healthz,
// /readyz and /metrics. cmd/ingest is Main.
type Server struct {
	cfg  Config
	opts options
	reg  *prometheus.Registry
	api  atomic.Pointer[service] // set by Run once its dependencies are open
}

// An Option configures a Server beyond its Config.
type Option func(*options)

type options struct {
	logger   *slog.Logger
	registry *prometheus.Registry
	ready    func()
	listener net.Listener
}

// WithLogger sets the logger. Default: Config.LogLevel and LogFormat on
// stderr.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithRegistry registers the API's metrics on reg and serves reg at
// /metrics. Default: a registry of its own with the Go and process
// collectors.
func WithRegistry(reg *prometheus.Registry) Option { return func(o *options) { o.registry = reg } }

// WithReady sets a hook Run calls once, from Run's goroutine, when the
// API serves.
func WithReady(f func()) Option { return func(o *options) { o.ready = f } }

// WithListener serves on ln instead of listening on Config.Addr; Run
// closes it.
func WithListener(ln net.Listener) Option { return func(o *options) { o.listener = ln } }

// Defaults of the process settings whose zero value is not their default.
const (
	defaultAddr     = ":8080"
	defaultMongoDB  = "turnpike"
	devTokenTTL     = 7 * 24 * time.Hour // the tokens of POST /v1/dev/token
	defaultLogLevel = "info"
)

// DefaultConfig returns cmd/ingest's defaults, with no brokers, MongoDB
// URI or secret.
func DefaultConfig() Config {
	c := Config{Addr: defaultAddr, PublicStreamURL: webui.DefaultStreamURL, LogLevel: defaultLogLevel, LogFormat: "json", TraceSampleRatio: 1}
	return c.withDefaults()
}

// Validate reports every problem of c (after its defaults), joined.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("TURNPIKE_KAFKA_BROKERS is required"))
	}
	if c.MongoURI == "" {
		errs = append(errs, errors.New("TURNPIKE_MONGO_URI is required"))
	}
	if c.MongoPool < 0 {
		errs = append(errs, fmt.Errorf("TURNPIKE_MONGO_POOL %d: must not be negative", c.MongoPool))
	}
	if len(c.AuthSecret) < auth.MinSecretBytes {
		errs = append(errs, fmt.Errorf("TURNPIKE_AUTH_SECRET must be at least %d bytes", auth.MinSecretBytes))
	}
	errs = append(errs, logging.Check(c.LogLevel, c.LogFormat), c.validateAPI(), c.page().Validate())
	return errors.Join(errs...)
}

func (c Config) page() webui.Config {
	return webui.Config{StreamURL: c.PublicStreamURL, DevTokens: c.DevTokens}
}

func (c Config) topics() topic.Names { return topic.NewNames(c.TopicPrefix) }

// bind registers c's settings on set, each with its flag, environment
// variable and default: the one place cmd/ingest's settings are named.
// cmdLine adds the listen address, the demo page's stream URL and the
// shared settings ingest ignores (see Config).
func (c *Config) bind(set *flagenv.Set, cmdLine bool) {
	set.List(&c.Brokers, "kafka-brokers", "TURNPIKE_KAFKA_BROKERS", nil, "Kafka bootstrap brokers")
	set.String(&c.MongoURI, "mongo-uri", "TURNPIKE_MONGO_URI", "", "MongoDB connection string")
	set.String(&c.MongoDB, "mongo-db", "TURNPIKE_MONGO_DB", defaultMongoDB, "MongoDB database")
	set.Int(&c.MongoPool, "mongo-pool", "TURNPIKE_MONGO_POOL", 0, "most connections (commands in flight) of the MongoDB client; 0: the driver's default, 100")
	set.String(&c.AuthSecret, "auth-secret", "TURNPIKE_AUTH_SECRET", "", "HS256 secret of bearer tokens (at least 32 bytes)")
	set.String(&c.TopicPrefix, "topic-prefix", "TURNPIKE_TOPIC_PREFIX", topic.DefaultPrefix, "prefix of the Kafka topic names")
	set.String(&c.LogLevel, "log-level", "TURNPIKE_LOG_LEVEL", defaultLogLevel, "log level: debug, info, warn, error")
	set.String(&c.LogFormat, "log-format", "TURNPIKE_LOG_FORMAT", "json", "log format: json or text")
	set.Int(&c.Partitions, "topic-partitions", "TURNPIKE_PARTITIONS", topic.DefaultPartitions, "partitions of topics created at start")
	set.String(&c.OTLPEndpoint, "otlp-endpoint", "TURNPIKE_OTLP_ENDPOINT", "", "OTLP/HTTP endpoint of trace spans, e.g. http://otel-collector:4318 (off when empty)")
	set.Float(&c.TraceSampleRatio, "trace-sample-ratio", "TURNPIKE_TRACE_SAMPLE_RATIO", 1, "share of new traces sampled, 0..1")
	set.String(&c.PprofAddr, "pprof-addr", "TURNPIKE_PPROF_ADDR", "", "serve net/http/pprof on this address (off when empty; keep it private)")
	if cmdLine {
		flagenv.Ignore(set, "model", "echo-delay", "openai-base-url", "openai-api-key", "openai-model")
		set.String(&c.Addr, "addr", "TURNPIKE_INGEST_ADDR", defaultAddr, "listen address of the HTTP API")
		set.String(&c.Memory, "memory", "TURNPIKE_MEMORY", "", "serve DELETE /v1/memories: text (MongoDB), terms (FerretDB) or empty: off")
		set.String(&c.PublicStreamURL, "public-stream-url", "TURNPIKE_PUBLIC_STREAM_URL", webui.DefaultStreamURL,
			"push gateway WebSocket URL for the demo page at /; {host} is the page's host name")
	}
	set.Int(&c.MaxContentBytes, "max-content-bytes", "TURNPIKE_MAX_CONTENT_BYTES", events.DefaultMaxContentBytes, "largest user message in bytes")
	c.bindLimits(set)
}

// LoadConfig reads the configuration from command-line arguments (as
// cmd/ingest: -kafka-brokers, -rate-per-second, …; -h lists them on
// stderr) and from TURNPIKE_* environment variables looked up with
// lookupEnv (os.LookupEnv when nil). Flags win over the environment; what
// neither sets keeps DefaultConfig's value. A -h or -help returns
// flag.ErrHelp.
func LoadConfig(args []string, lookupEnv func(string) (string, bool)) (Config, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	c := DefaultConfig()
	set := flagenv.New(flag.NewFlagSet("ingest", flag.ContinueOnError), lookupEnv)
	c.bind(set, true)
	if err := set.Parse(args); err != nil {
		return Config{}, err
	}
	return c, nil
}

// RegisterFlags registers c's settings on fs, as cmd/ingest's flags with
// TURNPIKE_* environment variables looked up with lookupEnv (os.LookupEnv
// when nil) as their defaults; c receives the values when fs is parsed.
// It is how a program that runs ingest beside other parts (pkg/devstack)
// puts its settings on its own command line. Addr and PublicStreamURL are
// left out (the program's own), and so are the settings ingest ignores. A
// flag fs already has (a setting shared with another part: the brokers,
// MongoDB, the secret, the content limit…) is not registered twice: c's
// field starts with that flag's value and receives whatever it is set to.
// It reports such a flag of another type, and an environment variable it
// cannot parse.
func (c *Config) RegisterFlags(fs *flag.FlagSet, lookupEnv func(string) (string, bool)) error {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	set := flagenv.New(fs, lookupEnv)
	c.bind(set, false)
	return set.Err()
}

// New validates cfg and returns a Server. It opens nothing: Run does.
func New(cfg Config, opts ...Option) (*Server, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	if o.logger == nil {
		o.logger = logging.New(os.Stderr, cfg.LogLevel, cfg.LogFormat)
	}
	reg := o.registry
	if reg == nil {
		reg = server.NewRegistry()
	}
	return &Server{cfg: cfg, opts: o, reg: reg}, nil
}

// Handler serves the API of docs/api.md ("Ingest HTTP API"), the demo
// page at / and a 404 in the JSON error shape for any other path. Before
// Run has opened Kafka and MongoDB (and after it returned) every path is
// answered 503 unavailable. Safe for concurrent use.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api := s.api.Load()
		if api == nil {
			server.WriteError(w, http.StatusServiceUnavailable, server.CodeUnavailable, "ingest is not running", time.Second)
			return
		}
		api.Handler().ServeHTTP(w, r)
	})
}

// Run runs ingest until ctx ends: it listens on Config.Addr (or
// WithListener's listener) and Config.PprofAddr first, so that a taken
// address stops it before it starts anything, then opens MongoDB, tracing
// and the Kafka producers, creates the requests and control topics if
// they are missing (a message POSTed before any worker has started is
// queued), and serves Handler and the ops endpoints. When ctx ends the
// HTTP server drains within server.ShutdownGrace and Run returns once
// everything it started has stopped: nil after a clean stop. Run once.
func (s *Server) Run(ctx context.Context) error {
	c := s.cfg
	return server.Run(ctx, server.Process{
		Name: "ingest", Listener: s.opts.listener, Addr: c.Addr, PprofAddr: c.PprofAddr,
		Tracing: &tracing.Config{Endpoint: c.OTLPEndpoint, SampleRatio: c.TraceSampleRatio},
		Logger:  s.opts.logger, Registry: s.reg, Ready: s.opts.ready, Open: s.open,
	})
}

// open opens what the API needs (the verifier, MongoDB, the producers,
// the demo page, the topics) and returns the API's parts.
func (s *Server) open(ctx context.Context, o *server.Opened) (server.Parts, error) {
	c, log := s.cfg, s.opts.logger
	verifier, err := auth.NewVerifier(c.AuthSecret, nil)
	if err != nil {
		return server.Parts{}, err
	}
	conn, err := mongodial.Dial(c.MongoURI, c.MongoDB, c.MongoPool)
	if err != nil {
		return server.Parts{}, err
	}
	o.Defer(conn.Close)
	store, err := history.NewMongoStore(ctx, conn.DB, history.MongoConfig{})
	if err != nil {
		return server.Parts{}, fmt.Errorf("open history store: %w", err)
	}
	artifacts, err := history.NewMongoArtifacts(ctx, conn.DB, history.ArtifactConfig{Logger: log})
	if err != nil {
		return server.Parts{}, fmt.Errorf("open artifacts: %w", err)
	}
	names := c.topics()
	producer, err := newKafkaProducer(c.Brokers, names.Requests)
	if err != nil {
		return server.Parts{}, err
	}
	producer.withTracing(o.Tracing)
	o.Defer(func() { producer.Close() }) // after the server stopped: flushes nothing in flight
	page, err := webui.New(c.page())
	if err != nil {
		return server.Parts{}, err
	}
	control, err := newKafkaProducer(c.Brokers, names.Control)
	if err != nil {
		return server.Parts{}, err
	}
	o.Defer(func() { control.Close() })
	d := serviceDeps{
		Verifier: verifier, Producer: producer, History: store, Artifacts: artifacts, Page: page, Registerer: s.reg, Logger: log,
		Cancels: store, Control: control, Positions: NewKafkaPositions(c.Brokers, names.Requests),
		Completions: newKafkaCompletions(c.Brokers, names.Control, log),
		Tracing:     o.Tracing,
	}
	if c.Memory != "" {
		search := history.MemorySearchText
		if c.Memory == "terms" {
			search = history.MemorySearchTerms
		}
		mem, err := history.NewMongoMemory(ctx, conn.DB, history.MongoMemoryConfig{Search: search})
		if err != nil {
			return server.Parts{}, fmt.Errorf("open memory: %w", err)
		}
		d.Memory = mem
	}
	if c.DevTokens {
		d.MintToken = func(user string) (string, error) {
			return auth.Mint(c.AuthSecret, auth.DefaultTenant, user, devTokenTTL, time.Now())
		}
	}
	api, err := newService(c, d)
	if err != nil {
		return server.Parts{}, err
	}
	// The requests topic must exist for the first POST, whether or not a
	// worker has started yet; the control topic for the completions reader.
	if err := topic.Ensure(ctx, c.Brokers, c.Partitions, names.Requests, names.Control); err != nil {
		return server.Parts{}, fmt.Errorf("ingest: %w", err)
	}
	s.api.Store(api)
	o.Defer(func() { s.api.Store(nil) })
	return server.Parts{
		// The API (and the demo page at /) answers every path the ops
		// endpoints don't, so an unknown route gets the JSON error shape too.
		Routes: func(mux *http.ServeMux) { mux.Handle("/", api.Handler()) },
		Checks: []server.Check{{Name: "kafka", Fn: func(ctx context.Context) error { return topic.Ping(ctx, c.Brokers) }},
			{Name: "mongo", Fn: conn.Ping}},
		Run: api.Run,
	}, nil
}

// Main is the body of an ingest binary (cmd/ingest): it reads the
// configuration from os.Args and the environment (as LoadConfig), runs a
// Server until SIGINT or SIGTERM, and exits: 0 after a clean stop, 1 when
// ingest fails (bad settings included), 2 for bad flags.
func Main() { os.Exit(mainWith(os.Args[1:], os.LookupEnv, os.Stderr)) }

func mainWith(args []string, lookupEnv func(string) (string, bool), stderr io.Writer) int {
	c := DefaultConfig()
	if code, ok := flagenv.ParseCommand("ingest", args, lookupEnv, stderr, func(set *flagenv.Set) { c.bind(set, true) }); !ok {
		return code
	}
	log := logging.New(stderr, c.LogLevel, c.LogFormat)
	return server.Main("ingest", log, func(ctx context.Context) error {
		s, err := New(c, WithLogger(log))
		if err != nil {
			return err
		}
		return s.Run(ctx)
	})
}
