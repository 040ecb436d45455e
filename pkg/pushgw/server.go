package pushgw

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
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/logging"
	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
)

// A Server is the push gateway process: the gateway's routes (Handler),
// its live readers of the stream topic, and, on Config.Addr, the ops
// endpoints /healthz, /readyz and /metrics. cmd/pushgw is Main.
type Server struct {
	cfg  Config
	opts options
	reg  *prometheus.Registry
	gw   *gateway
}

// An Option configures a Server beyond its Config.
type Option func(*options)

type options struct {
	logger   *slog.Logger
	registry *prometheus.Registry
	ready    func()
	listener net.Listener
	clock    Clock
}

// WithLogger sets the logger. Default: Config.LogLevel and LogFormat on
// stderr.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithRegistry registers the gateway's metrics on reg and serves reg at
// /metrics. Default: a registry of its own with the Go and process
// collectors.
func WithRegistry(reg *prometheus.Registry) Option { return func(o *options) { o.registry = reg } }

// WithReady sets a hook Run calls once, from its own goroutine, when the
// gateway serves (it has the stream topic's partitions: Ready).
func WithReady(f func()) Option { return func(o *options) { o.ready = f } }

// WithListener serves on ln instead of listening on Config.Addr; Run
// closes it.
func WithListener(ln net.Listener) Option { return func(o *options) { o.listener = ln } }

// Clock is the time the gateway holds tokens to. Now decides whether a
// token has expired when a client connects (its exp must be after Now)
// and AfterFunc ends a connection when its token expires: it calls f in
// its own goroutine once d has passed on the clock (at once for d <= 0),
// unless the stop it returned was called first. The system clock is
// time.Now and time.AfterFunc. A Clock must be safe for concurrent use.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// systemClock is the default Clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// WithClock sets the clock tokens expire on: a token is refused once its
// exp is not after c.Now(), and a connection (WebSocket or event stream)
// ends when its token's exp passes on c. Default: the system clock. A
// test steps a clock of its own past a token's exp to expire it without
// waiting. The rate limits, ping, heartbeat and write timeouts keep the
// system clock.
func WithClock(c Clock) Option { return func(o *options) { o.clock = c } }

// DefaultConfig returns cmd/pushgw's defaults, with no brokers or secret.
func DefaultConfig() Config {
	c := Config{Addr: defaultAddr, LogLevel: "info", LogFormat: "json"}.withDefaults()
	c.Topic = "" // derived from TopicPrefix when New applies the defaults
	return c
}

// defaultAddr is Config.Addr's default.
const defaultAddr = ":8081"

// Validate reports every problem of c (after its defaults), joined.
func (c Config) Validate() error {
	var errs []error
	if len(c.AuthSecret) < auth.MinSecretBytes {
		errs = append(errs, fmt.Errorf("TURNPIKE_AUTH_SECRET must be at least %d bytes", auth.MinSecretBytes))
	}
	errs = append(errs, logging.Check(c.LogLevel, c.LogFormat), c.validateGateway())
	return errors.Join(errs...)
}

// bind registers c's settings on set, each with its flag, environment
// variable and default: the one place cmd/pushgw's settings are named.
// cmdLine adds the ops address and the shared settings the gateway
// ignores (see Config).
func (c *Config) bind(set *flagenv.Set, cmdLine bool) {
	set.List(&c.Brokers, "kafka-brokers", "TURNPIKE_KAFKA_BROKERS", nil, "Kafka bootstrap brokers")
	set.String(&c.AuthSecret, "auth-secret", "TURNPIKE_AUTH_SECRET", "", "HS256 secret of bearer tokens (at least 32 bytes)")
	set.String(&c.TopicPrefix, "topic-prefix", "TURNPIKE_TOPIC_PREFIX", topic.DefaultPrefix, "prefix of the Kafka topic names")
	set.String(&c.LogLevel, "log-level", "TURNPIKE_LOG_LEVEL", "info", "log level: debug, info, warn, error")
	set.String(&c.LogFormat, "log-format", "TURNPIKE_LOG_FORMAT", "json", "log format: json or text")
	set.Int(&c.Partitions, "topic-partitions", "TURNPIKE_PARTITIONS", topic.DefaultPartitions, "partitions of topics created at start")
	set.Int(&c.StreamPartitions, "stream-partitions", "TURNPIKE_STREAM_PARTITIONS", 0, "partitions of the stream topic when created at start (0: -topic-partitions)")
	set.String(&c.PprofAddr, "pprof-addr", "TURNPIKE_PPROF_ADDR", "", "serve net/http/pprof on this address (off when empty; keep it private)")
	if cmdLine {
		flagenv.Ignore(set, "mongo-uri", "mongo-db", "mongo-pool", "model", "echo-delay", "openai-base-url", "openai-api-key", "openai-model",
			"otlp-endpoint", "trace-sample-ratio")
		set.String(&c.Addr, "addr", "TURNPIKE_PUSHGW_ADDR", defaultAddr,
			"listen address of the WebSocket endpoint /v1/stream and the Server-Sent Events endpoint /v1/conversations/{conversation}/events")
	}
	c.bindGateway(set)
}

// LoadConfig reads the configuration from command-line arguments (as
// cmd/pushgw: -kafka-brokers, -ring-bytes, …; -h lists them on stderr) and
// from TURNPIKE_* environment variables looked up with lookupEnv
// (os.LookupEnv when nil). Flags win over the environment; what neither
// sets keeps DefaultConfig's value. A -h or -help returns flag.ErrHelp.
func LoadConfig(args []string, lookupEnv func(string) (string, bool)) (Config, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	c := DefaultConfig()
	set := flagenv.New(flag.NewFlagSet("pushgw", flag.ContinueOnError), lookupEnv)
	c.bind(set, true)
	if err := set.Parse(args); err != nil {
		return Config{}, err
	}
	return c, nil
}

// RegisterFlags registers c's settings on fs, as cmd/pushgw's flags with
// TURNPIKE_* environment variables looked up with lookupEnv (os.LookupEnv
// when nil) as their defaults; c receives the values when fs is parsed.
// It is how a program that runs the gateway beside other parts
// (pkg/devstack) puts its settings on its own command line. Addr is left
// out (the program's own to serve), and so are the settings the gateway
// ignores. A flag fs already has (a setting shared with another part) is
// not registered twice: c's field starts with that flag's value and
// receives whatever it is set to. It reports such a flag of another type,
// and an environment variable it cannot parse.
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
		return nil, fmt.Errorf("pushgw: %w", err)
	}
	if o.logger == nil {
		o.logger = logging.New(os.Stderr, cfg.LogLevel, cfg.LogFormat)
	}
	reg := o.registry
	if reg == nil {
		reg = server.NewRegistry()
	}
	if o.clock == nil {
		o.clock = systemClock{}
	}
	v, err := auth.NewVerifier(cfg.AuthSecret, o.clock.Now)
	if err != nil {
		return nil, err
	}
	gw, err := newGateway(cfg, v, reg, o.logger)
	if err != nil {
		return nil, err
	}
	gw.clock = o.clock
	return &Server{cfg: cfg, opts: o, reg: reg, gw: gw}, nil
}

// Handler serves the gateway's routes: the WebSocket upgrade GET
// /v1/stream and the event streams GET (and OPTIONS)
// /v1/conversations/{conversation}/events (EventsPath); other methods on
// /v1/stream get 405, and other paths 404, in the JSON error shape. It serves clients while Run
// runs (503 before). Safe for concurrent use.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	s.routes(mux)
	return mux
}

// routes registers Handler's routes on mux, and 404 in the JSON error
// shape for every other path.
func (s *Server) routes(mux *http.ServeMux) {
	mux.Handle("GET /v1/stream", s.gw)
	mux.HandleFunc(EventsPath, s.gw.ServeEvents) // GET, and OPTIONS for CORS
	mux.Handle("/v1/stream", server.MethodNotAllowed("GET"))
	mux.HandleFunc("/", server.NotFound)
}

// Run runs the gateway until ctx ends: it listens on Config.Addr (or
// WithListener's listener) and Config.PprofAddr first, so that a taken
// address stops it before it starts anything, creates the stream topic if
// it is missing, starts the live readers, and serves Handler's routes and
// the ops endpoints (any other path: 404 in the JSON error shape). When
// ctx ends it closes every client with 1001 and returns once everything
// it started has stopped: nil after a clean stop. Run once.
func (s *Server) Run(ctx context.Context) error {
	c := s.cfg
	return server.Run(ctx, server.Process{
		Name: "pushgw", Listener: s.opts.listener, Addr: c.Addr, PprofAddr: c.PprofAddr,
		Logger: s.opts.logger, Registry: s.reg, Ready: s.opts.ready,
		Open: func(ctx context.Context, _ *server.Opened) (server.Parts, error) {
			// The gateway reads the stream topic; make sure it exists even
			// when no worker has started yet.
			if err := topic.Ensure(ctx, c.Brokers, topic.StreamPartitions(c.Partitions, c.StreamPartitions), c.Topic); err != nil {
				return server.Parts{}, fmt.Errorf("pushgw: %w", err)
			}
			return server.Parts{
				Routes: s.routes,
				Checks: []server.Check{{Name: "kafka", Fn: func(ctx context.Context) error { return topic.Ping(ctx, c.Brokers) }},
					{Name: "gateway", Fn: s.gw.Ready}},
				Run:       s.gw.Run,
				WaitReady: s.waitReady,
			}, nil
		},
	})
}

// waitReady returns true once the live readers have their start
// positions, false when ctx ends first.
func (s *Server) waitReady(ctx context.Context) bool {
	for ctx.Err() == nil {
		if s.gw.Ready(ctx) == nil {
			return true
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	return false
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Main is the body of a push gateway binary (cmd/pushgw): it reads the
// configuration from os.Args and the environment (as LoadConfig), runs a
// Server until SIGINT or SIGTERM, and exits: 0 after a clean stop, 1 when
// the gateway fails (bad settings included), 2 for bad flags.
func Main() { os.Exit(mainWith(os.Args[1:], os.LookupEnv, os.Stderr)) }

func mainWith(args []string, lookupEnv func(string) (string, bool), stderr io.Writer) int {
	c := DefaultConfig()
	if code, ok := flagenv.ParseCommand("pushgw", args, lookupEnv, stderr, func(set *flagenv.Set) { c.bind(set, true) }); !ok {
		return code
	}
	log := logging.New(stderr, c.LogLevel, c.LogFormat)
	return server.Main("pushgw", log, func(ctx context.Context) error {
		s, err := New(c, WithLogger(log))
		if err != nil {
			return err
		}
		return s.Run(ctx)
	})
}
