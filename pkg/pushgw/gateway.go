package pushgw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
)

// kafkaTimeout bounds each metadata and list-offsets request.
const kafkaTimeout = 10 * time.Second

// WebSocket buffer sizes. A connection owns only its read buffer; write
// buffers come from a pool and are held only while a frame is written, so
// an idle connection holds none. Client frames are a few hundred bytes; a
// bigger one (up to MaxFrameBytes) is read through the buffer in pieces.
const (
	readBufferSize  = 512
	writeBufferSize = 8 << 10
)

// gateway is the push gateway: it serves GET /v1/stream upgrades
// (ServeHTTP) and event streams (ServeEvents) and, while Run runs, streams
// the stream topic's events to their subscribers.
type gateway struct {
	cfg            Config
	verifier       *auth.Verifier
	clock          Clock // tokens' expiry; the verifier's Now is its Now
	log            *slog.Logger
	metrics        *metrics
	transport      *kafka.Transport
	kafka          *kafka.Client
	upgrader       websocket.Upgrader
	origins        server.OriginPolicy
	connectLimit   *limiter      // nil: no limit
	subscribeLimit *limiter      // nil: no limit
	replaySlots    chan struct{} // ReplayConcurrency tokens
	batches        sync.Pool     // write batch buffers (*[]byte) of the clients' wires
	running        atomic.Bool   // Run was called
	failingReaders atomic.Int32  // live readers whose last fetch failed

	// beforeDispatch, if set before Run, is called by the live readers
	// before each record is dispatched: tests use it to hold one replica
	// back.
	beforeDispatch func(partition int, offset int64)
	// dialKafka, if set before Run, opens the live readers' broker
	// connections: tests break them.
	dialKafka topic.DialFunc

	mu sync.Mutex
	// Guarded by mu.
	hub        *hub               // nil until Run has the stream topic's partitions
	ctx        context.Context    // Run's context for clients and live readers; set with hub
	stopRun    context.CancelFunc // ends ctx; set with hub
	closing    bool               // Run is shutting down: no new clients, no new live readers
	clients    sync.WaitGroup     // Add only under mu while hub != nil && !closing
	readers    sync.WaitGroup     // live readers; Add only under mu while hub != nil && !closing
	readerErrs []error            // live readers that stopped for good
}

// New returns a gateway for cfg. Tokens are checked by v; metrics are
// registered on reg (nil: not registered); log may be nil (discard).
func newGateway(cfg Config, v *auth.Verifier, reg prometheus.Registerer, log *slog.Logger) (*gateway, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validateGateway(); err != nil {
		return nil, fmt.Errorf("push gateway config: %w", err)
	}
	if v == nil {
		return nil, errors.New("push gateway: no token verifier")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	origins, err := server.NewOriginPolicy(cfg.AllowedOrigins)
	if err != nil { // Validate has reported it already
		return nil, fmt.Errorf("push gateway config: %w", err)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("push gateway: %w", err)
	}
	tr := &kafka.Transport{}
	g := &gateway{
		cfg:            cfg,
		verifier:       v,
		clock:          systemClock{},
		log:            log,
		metrics:        m,
		transport:      tr,
		kafka:          &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Timeout: kafkaTimeout, Transport: tr},
		origins:        origins,
		connectLimit:   newLimiter(cfg.ConnectPerMinute, cfg.ConnectBurst, nil),
		subscribeLimit: newLimiter(cfg.SubscribePerMinute, cfg.SubscribeBurst, nil),
		replaySlots:    make(chan struct{}, cfg.ReplayConcurrency),
	}
	g.batches.New = func() any {
		b := make([]byte, 0, batchBytes)
		return &b
	}
	g.upgrader = websocket.Upgrader{
		HandshakeTimeout: cfg.WriteTimeout,
		ReadBufferSize:   readBufferSize,
		WriteBufferSize:  writeBufferSize,
		WriteBufferPool:  &sync.Pool{},
		// ServeHTTP has checked the origin against the policy already.
		CheckOrigin: func(*http.Request) bool { return true },
		Error: func(w http.ResponseWriter, _ *http.Request, status int, reason error) {
			if status == http.StatusMethodNotAllowed {
				w.Header().Set("Allow", "GET")
			}
			server.WriteError(w, status, server.CodeFor(status), reason.Error(), 0)
		},
	}
	return g, nil
}

// Run reads the stream topic's partition list (retrying while Kafka or the
// topic is unreachable, then again every PartitionWatch: watchPartitions),
// serves clients, and dispatches the stream topic's
// events to their subscribers until ctx ends. A partition's live reader
// opens at the partition's end offset when its first subscriber comes, and
// closes ReaderIdle after its last one left (hub.go). When ctx ends Run
// closes every client with 1001 and returns nil once all its goroutines
// (readers, clients, replays) are done. Live readers retry failed fetches;
// Run returns an error only if one stops for good. Run may be called once.
func (g *gateway) Run(ctx context.Context) error {
	if !g.running.CompareAndSwap(false, true) {
		return errors.New("push gateway: Run called twice")
	}
	defer g.transport.CloseIdleConnections()
	defer func() {
		g.mu.Lock()
		g.closing = true
		g.mu.Unlock()
	}()
	parts, err := g.awaitPartitions(ctx)
	if err != nil { // only when ctx ended
		return nil
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	h := newHub(parts, hubConfig{replayBuffer: g.cfg.ReplayBuffer, replayBufferBytes: g.cfg.ReplayBufferBytes, ringBytes: g.cfg.RingBytes,
		readers: g, readerIdle: g.cfg.ReaderIdle}, g.metrics, g.log)
	g.mu.Lock()
	g.hub, g.ctx, g.stopRun = h, runCtx, stop
	g.mu.Unlock()
	g.metrics.partitions.Set(float64(len(parts)))
	g.log.Info("push gateway ready", "topic", g.cfg.Topic, "partitions", len(parts))
	watched := make(chan struct{})
	go func() { // owned: Run waits on watched
		defer close(watched)
		g.watchPartitions(runCtx, h)
	}()

	<-runCtx.Done()
	g.mu.Lock()
	g.closing = true // no live reader starts from now on
	g.mu.Unlock()
	<-watched
	h.shutdown()
	g.clients.Wait()
	g.readers.Wait()
	g.mu.Lock()
	err = errors.Join(g.readerErrs...)
	g.mu.Unlock()
	if err != nil {
		return fmt.Errorf("push gateway: %w", err)
	}
	return nil
}

// Ready reports whether the gateway serves: Run has the stream topic's
// partition list (from a metadata request), no open live reader is
// failing, and a broker answers now. It needs no partition to be open, nor
// any partition's offsets: a subscribe whose partition cannot be opened is
// answered unavailable on its own. For /readyz.
func (g *gateway) Ready(ctx context.Context) error {
	g.mu.Lock()
	ready := g.hub != nil && !g.closing
	g.mu.Unlock()
	if !ready {
		return errors.New("push gateway: not running")
	}
	if n := g.failingReaders.Load(); n > 0 {
		return fmt.Errorf("push gateway: %d live readers failing", n)
	}
	return topic.Ping(ctx, g.cfg.Brokers)
}

// ServeHTTP upgrades GET /v1/stream. In order: an Origin the policy does
// not allow is answered 403; without a valid bearer token (header or
// ?access_token=), 401 (a connection lives until its token expires, then
// is closed with CloseTokenExpired); a user over the connect rate limit, 429 with
// Retry-After; before Run has the stream topic's partitions, or while it
// shuts down, 503. None of them upgrades.
func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok, user, ok := g.admit(w, r)
	if !ok {
		return
	}
	h, ctx, err := g.join()
	if err != nil {
		server.WriteError(w, http.StatusServiceUnavailable, server.CodeUnavailable, err.Error(), time.Second)
		return
	}
	conn, err := g.upgrader.Upgrade(wireHijacker{ResponseWriter: w, pool: &g.batches, timeout: g.cfg.WriteTimeout}, r, nil)
	if err != nil { // the upgrader has answered
		g.clients.Done()
		return
	}
	c := newClient(g, h, conn, tok, user)
	go func() { // owned: Run waits on g.clients
		defer g.clients.Done()
		c.serve(ctx)
	}()
}

// tokenExpiry is closed when a connection's token expires on the
// gateway's clock (gateway.expiry).
type tokenExpiry struct {
	expired chan struct{} // closed at the token's exp
	stop    func() bool   // stops the clock's timer
}

// expiry returns the expiry of a token whose exp is exp, on g's clock.
func (g *gateway) expiry(exp time.Time) tokenExpiry {
	e := tokenExpiry{expired: make(chan struct{})}
	e.stop = g.clock.AfterFunc(exp.Sub(g.clock.Now()), func() { close(e.expired) })
	return e
}
