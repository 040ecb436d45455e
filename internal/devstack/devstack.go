package devstack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/internal/service"
	"github.com/turnpike-dev/turnpike/internal/webui"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/ingest"
	"github.com/turnpike-dev/turnpike/pkg/pushgw"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// ReadyLine is logged once every part serves.
const ReadyLine = "turnpike devstack ready"

// Defaults of Config's addresses, directory and dev user: every listener on
// loopback.
const (
	DefaultKafkaAddr  = "127.0.0.1:9092"
	DefaultMongoAddr  = "127.0.0.1:27017"
	DefaultDataDir    = "./data"
	DefaultIngestAddr = "127.0.0.1:8080"
	DefaultPushgwAddr = "127.0.0.1:8081"
	DefaultDevUser    = "dev"
)

// Config configures the devstack.
type Config struct {
	service.Shared
	// KafkaAddr is the embedded broker's address. Default 127.0.0.1:9092.
	KafkaAddr string
	// MongoAddr is the embedded store's address. Default 127.0.0.1:27017.
	MongoAddr string
	// DataDir keeps the embedded broker's and store's files. Default ./data.
	DataDir string
	// IngestAddr and PushgwAddr are the HTTP listen addresses. Defaults
	// 127.0.0.1:8080 and 127.0.0.1:8081: loopback only (see Exposure).
	IngestAddr, PushgwAddr string
	// DevTokensRemote serves POST /v1/dev/token to clients beyond
	// loopback too: whoever reaches the ingest port can then mint tokens.
	// Default false.
	DevTokensRemote bool
	// DevUser is the user of the printed dev token. Default "dev".
	DevUser string
	// PublicStreamURL is the push gateway's WebSocket URL for the demo
	// page; "{host}" stands for the page's host name. Default: the push
	// gateway's port, on the page's host name when the gateway listens on
	// every interface or on loopback, else on the gateway's address.
	PublicStreamURL string

	// Ingest and Pushgw configure ingest and the push gateway; the
	// devstack sets their brokers, MongoDB, topics, secret, logs and
	// tracing from Shared, their listeners, and the demo page's settings.
	Ingest ingest.Config
	Pushgw pushgw.Config
	// Worker configures the worker; the devstack sets its brokers,
	// MongoDB, topics, logs and tracing from Shared, and it serves no ops
	// endpoints or pprof of its own (the ingest port serves the
	// devstack's /metrics and /readyz).
	Worker worker.Config
	// WorkerOptions are the worker's agent and hooks (pkg/worker's
	// options); the devstack sets their logger, registry and ready hook.
	WorkerOptions []worker.Option
}

// modelFlags are the shared settings that are the worker's alone: its
// RegisterFlags binds them, and only for the agent built without Go code.
var modelFlags = []string{"model", "echo-delay", "openai-base-url", "openai-api-key", "openai-model"}

// Bind registers the devstack's flags: the shared ones, its own, and the
// services' own settings; the worker's (pkg/worker's RegisterFlags) share
// the flags of the settings every part reads.
func (c *Config) Bind(set *flagenv.Set) {
	c.Shared.BindWithout(set, "text", modelFlags...)
	set.String(&c.KafkaAddr, "kafka-addr", "TURNPIKE_KAFKA_ADDR", DefaultKafkaAddr, "address of the embedded Kafka-protocol broker")
	set.String(&c.MongoAddr, "mongo-addr", "TURNPIKE_MONGO_ADDR", DefaultMongoAddr, "address of the embedded MongoDB-compatible store")
	set.String(&c.DataDir, "data-dir", "TURNPIKE_DATA_DIR", DefaultDataDir, "directory of the embedded broker's and store's files")
	set.String(&c.IngestAddr, "ingest-addr", "TURNPIKE_INGEST_ADDR", DefaultIngestAddr, "listen address of the ingest API (loopback unless exposed deliberately)")
	set.String(&c.PushgwAddr, "pushgw-addr", "TURNPIKE_PUSHGW_ADDR", DefaultPushgwAddr, "listen address of the push gateway (loopback unless exposed deliberately)")
	set.Bool(&c.DevTokensRemote, "dev-tokens-remote", "TURNPIKE_DEV_TOKENS_REMOTE", false,
		"serve POST /v1/dev/token beyond loopback: anyone who reaches the ingest port can mint tokens")
	set.String(&c.DevUser, "dev-user", "TURNPIKE_DEV_USER", DefaultDevUser, "user of the printed dev token")
	set.String(&c.PublicStreamURL, "public-stream-url", "TURNPIKE_PUBLIC_STREAM_URL", "",
		"push gateway WebSocket URL for the demo page; {host} is the page's host name (default: the gateway's listener)")
	set.Fail(c.Worker.RegisterFlags(set.FlagSet(), set.Lookup(), c.WorkerOptions...))
	set.Fail(c.Ingest.RegisterFlags(set.FlagSet(), set.Lookup()))
	set.Fail(c.Pushgw.RegisterFlags(set.FlagSet(), set.Lookup()))
}

// Listeners lets tests hand in listeners on random ports; nil fields are
// opened from the Config's addresses.
type Listeners struct {
	Ingest, Pushgw net.Listener
}

// Stack reports where a running devstack serves, for tests and the
// ready message.
type Stack struct {
	Brokers    []string
	MongoURI   string
	IngestAddr string
	PushgwAddr string
	AuthSecret string
	// DevToken is a token of tenant "default" and Config.DevUser, valid
	// DevTokenTTL, signed with AuthSecret.
	DevToken string
	// SecretSource says where AuthSecret came from: SecretFromEnv,
	// SecretGenerated (now, into SecretFile) or SecretFromDataDir (kept in
	// SecretFile by an earlier start).
	SecretSource string
	// SecretFile is where the devstack keeps a secret it generated.
	SecretFile string
	// DevTokensRemote: POST /v1/dev/token serves peers beyond loopback.
	DevTokensRemote bool
}

// DevTokenTTL is how long the printed dev token is valid.
const DevTokenTTL = 7 * 24 * time.Hour

// IngestURL is the ingest API's base URL, with "localhost" for a wildcard host.
func (s Stack) IngestURL() string { return "http://" + displayAddr(s.IngestAddr) }

// StreamURL is the push gateway's WebSocket endpoint.
func (s Stack) StreamURL() string { return "ws://" + displayAddr(s.PushgwAddr) + "/v1/stream" }

// pageStreamURL is the push gateway's URL for the demo page. When the
// gateway listens on every interface, or on loopback, the page finds it on
// its own host name: that works from other machines in the first case, and
// keeps the WebSocket's Origin on the gateway's host name (which the
// gateway accepts) whether the page was opened as localhost or 127.0.0.1.
func pageStreamURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "ws://" + addr + "/v1/stream"
	}
	if ip := net.ParseIP(host); host == "" || host == "localhost" || (ip != nil && (ip.IsUnspecified() || ip.IsLoopback())) {
		host = webui.HostPlaceholder
	}
	return "ws://" + net.JoinHostPort(host, port) + "/v1/stream"
}

// pageOrigins are the origins of the demo page served on addr: its
// loopback names when it listens on loopback or every interface, else its
// address.
func pageOrigins(addr string) []string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	if ip := net.ParseIP(host); host == "" || host == "localhost" || (ip != nil && (ip.IsUnspecified() || ip.IsLoopback())) {
		return []string{"http://localhost:" + port, "http://127.0.0.1:" + port, "http://[::1]:" + port}
	}
	return []string{"http://" + net.JoinHostPort(host, port)}
}

// loopbackOnly reports whether addr listens on loopback only.
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// Exposure is the banner's line on who can reach the devstack, and how to
// expose it deliberately.
func (s Stack) Exposure() string {
	if loopbackOnly(s.IngestAddr) && loopbackOnly(s.PushgwAddr) {
		return "listening on loopback only. To expose it deliberately: TURNPIKE_INGEST_ADDR=0.0.0.0:8080 " +
			"TURNPIKE_PUSHGW_ADDR=0.0.0.0:8081 TURNPIKE_PUSHGW_ALLOWED_ORIGINS=http://<host>:8080, and " +
			"TURNPIKE_DEV_TOKENS_REMOTE=true if the demo page should mint tokens for other machines (anyone who reaches it can)."
	}
	who := "loopback clients only (TURNPIKE_DEV_TOKENS_REMOTE=true: anyone who reaches it)"
	if s.DevTokensRemote {
		who = "ANYONE who reaches the ingest port"
	}
	return "WARNING: listening beyond loopback (ingest " + s.IngestAddr + ", stream " + s.PushgwAddr +
		"); dev tokens are minted for " + who + "; browser pages need their origin in TURNPIKE_PUSHGW_ALLOWED_ORIGINS."
}

func displayAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

// Run starts everything and runs until ctx ends. Once all parts serve it
// calls ready, if set, with where they are, then logs ReadyLine.
func Run(ctx context.Context, c Config, lns Listeners, log *slog.Logger, ready func(Stack)) error {
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.DevUser == "" {
		c.DevUser = DefaultDevUser
	}
	var st Stack
	// Every port first, so that all conflicts are reported at once.
	var ports []port
	if len(c.Brokers) == 0 {
		ports = append(ports, port{env: "TURNPIKE_KAFKA_ADDR", addr: c.KafkaAddr})
	}
	if c.MongoURI == "" {
		ports = append(ports, port{env: "TURNPIKE_MONGO_ADDR", addr: c.MongoAddr})
	}
	if lns.Ingest == nil {
		ports = append(ports, port{env: "TURNPIKE_INGEST_ADDR", addr: c.IngestAddr, keep: &lns.Ingest})
	}
	if lns.Pushgw == nil {
		ports = append(ports, port{env: "TURNPIKE_PUSHGW_ADDR", addr: c.PushgwAddr, keep: &lns.Pushgw})
	}
	var pprofLn net.Listener
	if c.PprofAddr != "" {
		ports = append(ports, port{env: "TURNPIKE_PPROF_ADDR", addr: c.PprofAddr, keep: &pprofLn})
	}
	if err := listenAll(ports); err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	defer lns.Ingest.Close()
	defer lns.Pushgw.Close()
	if pprofLn != nil {
		defer pprofLn.Close()
	}
	st.IngestAddr, st.PushgwAddr = lns.Ingest.Addr().String(), lns.Pushgw.Addr().String()

	if c.AuthSecret == "" {
		secret, created, err := loadOrCreateSecret(c.DataDir)
		if err != nil {
			return fmt.Errorf("devstack: %w", err)
		}
		c.AuthSecret, st.SecretSource = secret, SecretFromDataDir
		if created {
			st.SecretSource = SecretGenerated
		}
	} else {
		st.SecretSource = SecretFromEnv
	}
	tok, err := auth.Mint(c.AuthSecret, auth.DefaultTenant, c.DevUser, DevTokenTTL, time.Now())
	if err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	st.DevToken, st.SecretFile = tok, filepath.Join(c.DataDir, SecretFile)

	if len(c.Brokers) == 0 {
		k, err := embedded.StartKafka(embedded.KafkaConfig{Addr: c.KafkaAddr, DataDir: filepath.Join(c.DataDir, "kafka")})
		if err != nil {
			return fmt.Errorf("devstack: %w", err)
		}
		defer k.Close()
		c.Brokers = []string{k.Addr()}
		log.Info("embedded kafka", slog.String("addr", k.Addr()))
	}
	if c.MongoURI == "" {
		m, err := embedded.StartMongo(embedded.MongoConfig{
			Addr:    c.MongoAddr,
			DataDir: filepath.Join(c.DataDir, "mongo"),
			Logger:  slog.New(quiet{log.Handler(), slog.LevelError}).With(slog.String("component", "ferretdb")),
		})
		if err != nil {
			return fmt.Errorf("devstack: %w", err)
		}
		defer m.Close()
		c.MongoURI = m.URI()
		if c.MongoPool == 0 {
			c.MongoPool = service.DevstackMongoPool
		}
		log.Info("embedded mongo", slog.String("uri", m.URI()))
	}
	st.Brokers, st.MongoURI, st.AuthSecret, st.DevTokensRemote = c.Brokers, c.MongoURI, c.AuthSecret, c.DevTokensRemote

	// One registry for the three services: their metric names differ.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	const parts = 3
	readyc := make(chan struct{}, parts)
	readyHook := func() func() {
		var once sync.Once
		return func() { once.Do(func() { readyc <- struct{}{} }) }
	}
	partLog := func(name string) *slog.Logger { return log.With(slog.String("service", name)) }
	ic, pc := c.ingestConfig(), c.pushgwConfig()
	wc := c.workerConfig()
	ic.MaxContentBytes = wc.MaxContentBytes // one flag for both
	// The demo page signs in by picking a user: the devstack mints tokens.
	ic.DevTokens = true
	ic.PublicStreamURL = cmp.Or(c.PublicStreamURL, pageStreamURL(st.PushgwAddr))
	// Browser pages allowed: the demo page's own origins and the ones
	// configured for the gateway; the dev-token endpoint takes the same.
	pc.AllowedOrigins = append(pageOrigins(st.IngestAddr), pc.AllowedOrigins...)
	ic.DevTokenOrigins = pc.AllowedOrigins
	ic.DevTokensRemote = c.DevTokensRemote

	// The push gateway outlives ingest and worker so that the events of
	// draining runs still reach clients. A failure anywhere stops it all.
	frontCtx, stopFront := context.WithCancel(ctx)
	defer stopFront()
	pushCtx, stopPush := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPush()
	// The first failure is the cause; the other parts then stop with
	// context.Canceled, which says nothing more.
	var cause error
	var causeOnce sync.Once
	fail := func(err error) error {
		if err != nil {
			causeOnce.Do(func() { cause = err })
			stopFront()
			stopPush()
		}
		return err
	}
	var front, back errgroup.Group
	back.Go(func() error {
		gw, err := pushgw.New(pc, pushgw.WithLogger(partLog("pushgw")), pushgw.WithRegistry(reg), pushgw.WithReady(readyHook()), pushgw.WithListener(lns.Pushgw))
		if err == nil {
			err = gw.Run(pushCtx)
		}
		return fail(err)
	})
	front.Go(func() error {
		in, err := ingest.New(ic, ingest.WithLogger(partLog("ingest")), ingest.WithRegistry(reg), ingest.WithReady(readyHook()), ingest.WithListener(lns.Ingest))
		if err == nil {
			err = in.Run(frontCtx)
		}
		return fail(err)
	})
	front.Go(func() error {
		opts := append(slices.Clip(c.WorkerOptions), worker.WithLogger(partLog("worker")), worker.WithRegistry(reg), worker.WithReady(readyHook()))
		w, err := worker.New(wc, opts...)
		if err == nil {
			err = w.Run(frontCtx)
		}
		return fail(err)
	})
	front.Go(func() error { return fail(server.ServePprof(frontCtx, pprofLn, log)) })
	front.Go(func() error {
		for range parts {
			select {
			case <-readyc:
			case <-frontCtx.Done():
				return nil
			}
		}
		if ready != nil {
			ready(st)
		}
		log.Info(ReadyLine, slog.String("page", st.IngestURL()+"/"), slog.String("ingest", st.IngestURL()), slog.String("pushgw", st.StreamURL()),
			slog.String("kafka", c.Brokers[0]), slog.String("data_dir", c.DataDir))
		return nil
	})
	ferr := front.Wait()
	stopPush()
	berr := back.Wait()
	if cause != nil {
		return stopCause(cause, ferr, berr)
	}
	return errors.Join(ferr, berr)
}

// workerConfig is the worker's configuration: c.Worker with the settings
// every part shares taken from c.Shared (the embedded broker's and
// store's addresses included), and no ops or pprof server of its own.
func (c Config) workerConfig() worker.Config {
	w := c.Worker
	w.Brokers, w.MongoURI, w.MongoDB, w.MongoPool = c.Brokers, c.MongoURI, c.MongoDB, c.MongoPool
	w.TopicPrefix, w.LogLevel, w.LogFormat = c.TopicPrefix, c.LogLevel, c.LogFormat
	w.OTLPEndpoint, w.TraceSampleRatio = c.OTLPEndpoint, c.TraceSampleRatio
	if c.Partitions > 0 {
		w.Partitions = c.Partitions
	}
	w.Addr, w.PprofAddr = "", ""
	return w
}

// ingestConfig is ingest's configuration: c.Ingest with the settings
// every part shares taken from c.Shared, and no address or pprof of its
// own (the devstack hands it its listener).
func (c Config) ingestConfig() ingest.Config {
	i := c.Ingest
	i.Brokers, i.MongoURI, i.MongoDB, i.MongoPool, i.AuthSecret = c.Brokers, c.MongoURI, c.MongoDB, c.MongoPool, c.AuthSecret
	i.TopicPrefix, i.Partitions, i.LogLevel, i.LogFormat = c.TopicPrefix, c.Partitions, c.LogLevel, c.LogFormat
	i.OTLPEndpoint, i.TraceSampleRatio = c.OTLPEndpoint, c.TraceSampleRatio
	i.Addr, i.PprofAddr = "", ""
	return i
}

// pushgwConfig is the push gateway's configuration, as ingestConfig.
func (c Config) pushgwConfig() pushgw.Config {
	p := c.Pushgw
	p.Brokers, p.AuthSecret, p.TopicPrefix, p.Partitions = c.Brokers, c.AuthSecret, c.TopicPrefix, c.Partitions
	p.LogLevel, p.LogFormat = c.LogLevel, c.LogFormat
	p.Addr, p.PprofAddr = "", ""
	return p
}

// SharedOf is the shared settings of a worker configuration, for a
// devstack configured through its worker's (pkg/devstack, turnpiketest).
func SharedOf(w worker.Config) service.Shared {
	return service.Shared{Brokers: w.Brokers, MongoURI: w.MongoURI, MongoDB: w.MongoDB, MongoPool: w.MongoPool, TopicPrefix: w.TopicPrefix,
		Model: w.Model, EchoDelay: w.EchoDelay, OpenAI: service.OpenAIConfig{BaseURL: w.OpenAIBaseURL, APIKey: w.OpenAIAPIKey, Model: w.OpenAIModel},
		LogLevel: w.LogLevel, LogFormat: w.LogFormat, Partitions: w.Partitions, PprofAddr: w.PprofAddr, OTLPEndpoint: w.OTLPEndpoint,
		TraceSampleRatio: w.TraceSampleRatio}
}

// stopCause is the error of a devstack stopped by cause: cause, and any
// other part's error that is not just the stop it caused.
func stopCause(cause error, errs ...error) error {
	all := []error{cause}
	for _, err := range errs {
		if err != nil && err != cause && !errors.Is(err, context.Canceled) {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// quiet drops records below min: FerretDB logs every connection at info
// and an unsupported endSessions command at warn.
type quiet struct {
	slog.Handler
	min slog.Level
}

func (q quiet) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= q.min && q.Handler.Enabled(ctx, l)
}

func (q quiet) WithAttrs(as []slog.Attr) slog.Handler { return quiet{q.Handler.WithAttrs(as), q.min} }
func (q quiet) WithGroup(name string) slog.Handler    { return quiet{q.Handler.WithGroup(name), q.min} }
