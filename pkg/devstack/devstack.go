package devstack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/logging"
	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/internal/webui"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/ingest"
	"github.com/turnpike-dev/turnpike/pkg/pushgw"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// readyLine is logged once every part serves.
const readyLine = "turnpike devstack ready"

// Defaults of Config's addresses, directory and dev user (cmd/devstack's):
// every listener on loopback.
const (
	defaultKafkaAddr  = "127.0.0.1:9092"
	defaultMongoAddr  = "127.0.0.1:27017"
	defaultDataDir    = "./data"
	defaultIngestAddr = "127.0.0.1:8080"
	defaultPushgwAddr = "127.0.0.1:8081"
	defaultDevUser    = "dev"
)

// devTokenTTL is how long Stack.DevToken is valid.
const devTokenTTL = 7 * 24 * time.Hour

// devstackMongoPool is the MongoDB pool of the parts on the embedded
// store, unless Worker.MongoPool says otherwise. The embedded FerretDB
// runs on the same cores as the token path: each connection is a
// goroutine that decodes, runs SQLite and encodes, and a hundred of them
// runnable at once queued the token path's goroutines behind store work.
// A few connections keep the store busy (group commit batches the writes)
// while the rest of the store's callers wait, parked, for a connection.
const devstackMongoPool = 8

// Config configures a devstack. Run and Start give each zero field its
// value in DefaultConfig (those of Worker one by one); Main reads them
// from cmd/devstack's flags and environment.
type Config struct {
	// DataDir keeps the embedded broker's and store's files, and the
	// generated auth secret (-data-dir, TURNPIKE_DATA_DIR). Default
	// "./data".
	DataDir string
	// KafkaAddr and MongoAddr are the embedded broker's and store's
	// addresses (-kafka-addr, -mongo-addr; TURNPIKE_KAFKA_ADDR,
	// TURNPIKE_MONGO_ADDR). Defaults "127.0.0.1:9092" and
	// "127.0.0.1:27017"; port 0 picks a free one.
	KafkaAddr, MongoAddr string
	// IngestAddr and PushgwAddr are the ingest API's and the push
	// gateway's listen addresses (-ingest-addr, -pushgw-addr;
	// TURNPIKE_INGEST_ADDR, TURNPIKE_PUSHGW_ADDR). Defaults
	// "127.0.0.1:8080" and "127.0.0.1:8081": loopback only, as
	// cmd/devstack.
	IngestAddr, PushgwAddr string
	// IngestListener and PushgwListener, when set, are served instead of
	// listening on IngestAddr and PushgwAddr (tests hand in listeners on
	// ports they chose). The devstack closes them when it stops.
	IngestListener, PushgwListener net.Listener
	// PprofAddr, when set, serves net/http/pprof there (-pprof-addr,
	// TURNPIKE_PPROF_ADDR). Default off; keep it private.
	PprofAddr string
	// DevUser is the user of Stack.DevToken (-dev-user,
	// TURNPIKE_DEV_USER). Default "dev".
	DevUser string
	// AuthSecret signs and verifies the bearer tokens (-auth-secret,
	// TURNPIKE_AUTH_SECRET; at least 32 bytes). Default: a secret the
	// devstack generates once and keeps in DataDir/auth-secret (mode
	// 0600), so that the tokens it minted stay valid across restarts.
	AuthSecret string
	// DevTokensRemote serves POST /v1/dev/token to clients beyond
	// loopback too: whoever reaches the ingest port can then mint tokens
	// (-dev-tokens-remote, TURNPIKE_DEV_TOKENS_REMOTE). Default false.
	DevTokensRemote bool
	// PublicStreamURL is the push gateway's WebSocket URL for the demo
	// page; "{host}" stands for the page's host name (-public-stream-url,
	// TURNPIKE_PUBLIC_STREAM_URL). Default: the push gateway's port, on
	// the page's host name when the gateway listens on every interface or
	// on loopback, else on the gateway's address.
	PublicStreamURL string
	// Worker configures the worker, and the settings every part shares:
	// the brokers, MongoDB, topics and partitions, the log level and
	// format, tracing, the content limit. Its Brokers and MongoURI, when
	// set, replace the embedded broker and store. Run and Start give each
	// zero field its value in DefaultConfig().Worker (worker.DefaultConfig
	// with text logs), so setting Worker.Brokers alone uses that broker
	// with every other default; a zero TraceSampleRatio, too, takes the
	// default 1, while a zero EchoDelay means no delay, as in
	// worker.Config. Its Addr and PprofAddr do not apply (the ingest port
	// serves the devstack's /metrics and /readyz; see PprofAddr).
	Worker worker.Config
	// Ingest and Pushgw are ingest's and the push gateway's own settings
	// (limits, allowed origins, …; zero fields take their defaults). The
	// devstack sets their brokers, MongoDB, topics, secret, logs and
	// tracing from Worker and AuthSecret, their listeners, and the demo
	// page's settings.
	Ingest ingest.Config
	Pushgw pushgw.Config
	// Ready, if set, is called once every part serves, from the
	// devstack's goroutine, with where it serves.
	Ready func(Stack)
	// Logger. Default: Worker.LogLevel and LogFormat on stderr.
	Logger *slog.Logger
}

// DefaultConfig returns the devstack's defaults (cmd/devstack's):
// loopback addresses, ./data, and worker.DefaultConfig with text logs.
func DefaultConfig() Config {
	w := worker.DefaultConfig()
	w.LogFormat = "text"
	return Config{DataDir: defaultDataDir, KafkaAddr: defaultKafkaAddr, MongoAddr: defaultMongoAddr,
		IngestAddr: defaultIngestAddr, PushgwAddr: defaultPushgwAddr, DevUser: defaultDevUser, Worker: w}
}

// withDefaults is c with its zero fields set to DefaultConfig's; fill
// sets the zero fields of c.Worker too (not for Main, whose command line
// gives every worker setting its value, zero included).
func (c Config) withDefaults(fill bool) Config {
	def := DefaultConfig()
	if fill {
		fillZero(&c.Worker, def.Worker)
	}
	c.DataDir, c.KafkaAddr, c.MongoAddr = cmp.Or(c.DataDir, def.DataDir), cmp.Or(c.KafkaAddr, def.KafkaAddr), cmp.Or(c.MongoAddr, def.MongoAddr)
	c.IngestAddr, c.PushgwAddr, c.DevUser = cmp.Or(c.IngestAddr, def.IngestAddr), cmp.Or(c.PushgwAddr, def.PushgwAddr), cmp.Or(c.DevUser, def.DevUser)
	if c.Logger == nil {
		c.Logger = logging.New(os.Stderr, c.Worker.LogLevel, c.Worker.LogFormat)
	}
	return c
}

// fillZero sets each zero field of *c to def's, but EchoDelay, whose zero
// means no delay.
func fillZero(c *worker.Config, def worker.Config) {
	v, d := reflect.ValueOf(c).Elem(), reflect.ValueOf(def)
	for i := range v.NumField() {
		if f := v.Field(i); f.CanSet() && f.IsZero() && v.Type().Field(i).Name != "EchoDelay" {
			f.Set(d.Field(i))
		}
	}
}

// Stack is a running devstack: where it serves, and its lifetime. The
// Stack that Start returns and the copies Config.Ready receives stop the
// same devstack; every method is safe for concurrent use.
type Stack struct {
	// IngestURL is the ingest API's (and the demo page's) base URL, with
	// "localhost" for a wildcard host; StreamURL the push gateway's
	// WebSocket endpoint.
	IngestURL, StreamURL string
	// IngestAddr and PushgwAddr are the addresses the ingest API and the
	// push gateway listen on (the chosen port when the configured one was
	// 0).
	IngestAddr, PushgwAddr string
	// Brokers are the Kafka brokers the parts use (the embedded broker's
	// address, or Worker.Brokers); MongoURI the store's.
	Brokers  []string
	MongoURI string
	// AuthSecret is the secret of the tokens: Config.AuthSecret, or the
	// one kept in the data directory.
	AuthSecret string
	// DevToken is a bearer token of tenant "default" and user
	// Config.DevUser, valid 7 days, signed with AuthSecret.
	DevToken string

	devUser         string
	secretSource    string // secretFromEnv, secretGenerated or secretFromDataDir
	secretFile      string // where the devstack keeps a secret it generated
	devTokensRemote bool
	life            *life
}

// life is a devstack's lifetime, shared by the copies of its Stack.
type life struct {
	stop  context.CancelFunc
	ready chan struct{} // closed once every part serves
	done  chan struct{} // closed once Run's work has returned; err is set
	err   error
}

// Close stops the devstack (ingest and worker first, then the push
// gateway, then the embedded broker and store) and returns Wait's error.
func (s *Stack) Close() error {
	if s.life == nil {
		return nil
	}
	s.life.stop()
	return s.Wait()
}

// Wait waits until the devstack has stopped (its context ended, Close, or
// a part failed) and returns why: nil after a clean stop, else the first
// part's failure.
func (s *Stack) Wait() error {
	if s.life == nil {
		return nil
	}
	<-s.life.done
	return s.life.err
}

// errStoppedBeforeReady is Start's error when the devstack stopped before
// it was ready without an error of its own.
var errStoppedBeforeReady = errors.New("devstack: stopped before it was ready")

// Start starts a devstack with the worker's agent and hooks of opts
// (pkg/worker's options; none: the agent file's, else one agent on
// Worker.Model) and returns once every part serves. It runs until ctx
// ends or Close; zero fields of c take their defaults, as with Run. When
// the devstack fails before it is ready, Start returns that failure, and
// everything it started has stopped.
func Start(ctx context.Context, c Config, opts ...worker.Option) (*Stack, error) {
	s := launch(ctx, c.withDefaults(true), opts)
	select {
	case <-s.life.ready:
		return s, nil
	case <-s.life.done:
		return nil, cmp.Or(s.life.err, ctx.Err(), errStoppedBeforeReady)
	}
}

// Run runs a devstack with the worker's agent and hooks of opts until ctx
// ends, and returns as Stack.Wait does. Zero fields of c take their
// defaults, field by field (those of c.Worker included).
func Run(ctx context.Context, c Config, opts ...worker.Option) error {
	return launch(ctx, c.withDefaults(true), opts).Wait()
}

// launch runs the devstack of c in a goroutine and returns its Stack,
// whose fields are set once life.ready is closed.
func launch(ctx context.Context, c Config, opts []worker.Option) *Stack {
	ctx, stop := context.WithCancel(ctx)
	s := &Stack{life: &life{stop: stop, ready: make(chan struct{}), done: make(chan struct{})}}
	go func() {
		defer close(s.life.done)
		defer stop()
		s.life.err = s.run(ctx, c, opts)
	}()
	return s
}

// run starts everything, sets s's fields, reports ready, and runs until
// ctx ends.
func (s *Stack) run(ctx context.Context, c Config, opts []worker.Option) error {
	log, w := c.Logger, c.Worker
	// Every port first, so that all conflicts are reported at once.
	var ports []port
	if len(w.Brokers) == 0 {
		ports = append(ports, port{env: "TURNPIKE_KAFKA_ADDR", addr: c.KafkaAddr})
	}
	if w.MongoURI == "" {
		ports = append(ports, port{env: "TURNPIKE_MONGO_ADDR", addr: c.MongoAddr})
	}
	ingestLn, pushLn := c.IngestListener, c.PushgwListener
	if ingestLn == nil {
		ports = append(ports, port{env: "TURNPIKE_INGEST_ADDR", addr: c.IngestAddr, keep: &ingestLn})
	}
	if pushLn == nil {
		ports = append(ports, port{env: "TURNPIKE_PUSHGW_ADDR", addr: c.PushgwAddr, keep: &pushLn})
	}
	var pprofLn net.Listener
	if c.PprofAddr != "" {
		ports = append(ports, port{env: "TURNPIKE_PPROF_ADDR", addr: c.PprofAddr, keep: &pprofLn})
	}
	if err := listenAll(ports); err != nil {
		for _, ln := range []net.Listener{c.IngestListener, c.PushgwListener} {
			if ln != nil {
				ln.Close()
			}
		}
		return fmt.Errorf("devstack: %w", err)
	}
	defer ingestLn.Close()
	defer pushLn.Close()
	if pprofLn != nil {
		defer pprofLn.Close()
	}
	s.IngestAddr, s.PushgwAddr = ingestLn.Addr().String(), pushLn.Addr().String()
	s.IngestURL, s.StreamURL = "http://"+displayAddr(s.IngestAddr), "ws://"+displayAddr(s.PushgwAddr)+"/v1/stream"
	s.devUser, s.devTokensRemote = c.DevUser, c.DevTokensRemote

	secret := c.AuthSecret
	if secret == "" {
		kept, created, err := loadOrCreateSecret(c.DataDir)
		if err != nil {
			return fmt.Errorf("devstack: %w", err)
		}
		secret, s.secretSource = kept, secretFromDataDir
		if created {
			s.secretSource = secretGenerated
		}
	} else {
		s.secretSource = secretFromEnv
	}
	tok, err := auth.Mint(secret, auth.DefaultTenant, c.DevUser, devTokenTTL, time.Now())
	if err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	s.DevToken, s.secretFile = tok, filepath.Join(c.DataDir, secretFile)

	if len(w.Brokers) == 0 {
		k, err := embedded.StartKafka(embedded.KafkaConfig{Addr: c.KafkaAddr, DataDir: filepath.Join(c.DataDir, "kafka")})
		if err != nil {
			return fmt.Errorf("devstack: %w", err)
		}
		defer k.Close()
		w.Brokers = []string{k.Addr()}
		log.Info("embedded kafka", slog.String("addr", k.Addr()))
	}
	if w.MongoURI == "" {
		m, err := embedded.StartMongo(embedded.MongoConfig{
			Addr:    c.MongoAddr,
			DataDir: filepath.Join(c.DataDir, "mongo"),
			Logger:  slog.New(quiet{log.Handler(), slog.LevelError}).With(slog.String("component", "ferretdb")),
		})
		if err != nil {
			return fmt.Errorf("devstack: %w", err)
		}
		defer m.Close()
		w.MongoURI = m.URI()
		if w.MongoPool == 0 {
			w.MongoPool = devstackMongoPool
		}
		log.Info("embedded mongo", slog.String("uri", m.URI()))
	}
	s.Brokers, s.MongoURI, s.AuthSecret = w.Brokers, w.MongoURI, secret

	// One registry for the three services: their metric names differ.
	reg := server.NewRegistry()
	const parts = 3
	readyc := make(chan struct{}, parts)
	readyHook := func() func() {
		var once sync.Once
		return func() { once.Do(func() { readyc <- struct{}{} }) }
	}
	partLog := func(name string) *slog.Logger { return log.With(slog.String("service", name)) }
	wc, ic, pc := workerConfig(w), ingestConfig(c.Ingest, w, secret), pushgwConfig(c.Pushgw, w, secret)
	ic.MaxContentBytes = wc.MaxContentBytes // one flag for both
	// The demo page signs in by picking a user: the devstack mints tokens.
	ic.DevTokens = true
	ic.PublicStreamURL = cmp.Or(c.PublicStreamURL, pageStreamURL(s.PushgwAddr))
	// Browser pages allowed: the demo page's own origins and the ones
	// configured for the gateway; the dev-token endpoint takes the same.
	pc.AllowedOrigins = append(pageOrigins(s.IngestAddr), pc.AllowedOrigins...)
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
		gw, err := pushgw.New(pc, pushgw.WithLogger(partLog("pushgw")), pushgw.WithRegistry(reg), pushgw.WithReady(readyHook()), pushgw.WithListener(pushLn))
		if err == nil {
			err = gw.Run(pushCtx)
		}
		return fail(err)
	})
	front.Go(func() error {
		in, err := ingest.New(ic, ingest.WithLogger(partLog("ingest")), ingest.WithRegistry(reg), ingest.WithReady(readyHook()), ingest.WithListener(ingestLn))
		if err == nil {
			err = in.Run(frontCtx)
		}
		return fail(err)
	})
	front.Go(func() error {
		opts := append(slices.Clip(opts), worker.WithLogger(partLog("worker")), worker.WithRegistry(reg), worker.WithReady(readyHook()))
		wk, err := worker.New(wc, opts...)
		if err == nil {
			err = wk.Run(frontCtx)
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
		if c.Ready != nil {
			c.Ready(*s)
		}
		close(s.life.ready)
		log.Info(readyLine, slog.String("page", s.IngestURL+"/"), slog.String("ingest", s.IngestURL), slog.String("pushgw", s.StreamURL),
			slog.String("kafka", w.Brokers[0]), slog.String("data_dir", c.DataDir))
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

// workerConfig is the worker's configuration: w (whose brokers and
// MongoDB are the embedded ones unless configured), with no ops or pprof
// server of its own.
func workerConfig(w worker.Config) worker.Config {
	w.Addr, w.PprofAddr = "", ""
	return w
}

// ingestConfig is ingest's configuration: i with the settings every part
// shares taken from w and the secret, and no address or pprof of its own
// (the devstack hands it its listener).
func ingestConfig(i ingest.Config, w worker.Config, secret string) ingest.Config {
	i.Brokers, i.MongoURI, i.MongoDB, i.MongoPool, i.AuthSecret = w.Brokers, w.MongoURI, w.MongoDB, w.MongoPool, secret
	i.TopicPrefix, i.Partitions, i.LogLevel, i.LogFormat = w.TopicPrefix, w.Partitions, w.LogLevel, w.LogFormat
	i.OTLPEndpoint, i.TraceSampleRatio = w.OTLPEndpoint, w.TraceSampleRatio
	i.Memory = w.Memory // the worker remembers, the API deletes
	i.Addr, i.PprofAddr = "", ""
	return i
}

// pushgwConfig is the push gateway's configuration, as ingestConfig.
func pushgwConfig(p pushgw.Config, w worker.Config, secret string) pushgw.Config {
	p.Brokers, p.AuthSecret, p.TopicPrefix, p.Partitions = w.Brokers, secret, w.TopicPrefix, w.Partitions
	p.LogLevel, p.LogFormat = w.LogLevel, w.LogFormat
	p.Addr, p.PprofAddr = "", ""
	return p
}

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

// portOf is addr's port, or addr when it has none.
func portOf(addr string) string {
	if _, port, err := net.SplitHostPort(addr); err == nil {
		return port
	}
	return addr
}

// exposure is the banner's line on who can reach the devstack, and how to
// expose it deliberately: on the ports it listens on.
func (s Stack) exposure() string {
	if loopbackOnly(s.IngestAddr) && loopbackOnly(s.PushgwAddr) {
		in, gw := portOf(s.IngestAddr), portOf(s.PushgwAddr)
		return "listening on loopback only. To expose it deliberately: TURNPIKE_INGEST_ADDR=0.0.0.0:" + in + " " +
			"TURNPIKE_PUSHGW_ADDR=0.0.0.0:" + gw + " TURNPIKE_PUSHGW_ALLOWED_ORIGINS=http://<host>:" + in + ", and " +
			"TURNPIKE_DEV_TOKENS_REMOTE=true if the demo page should mint tokens for other machines (anyone who reaches it can)."
	}
	who := "loopback clients only (TURNPIKE_DEV_TOKENS_REMOTE=true: anyone who reaches it)"
	if s.devTokensRemote {
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
