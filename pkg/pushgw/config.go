package pushgw

import (
	"errors"
	"fmt"
	"time"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/internal/topic"
)

// Defaults of Config. A zero field takes its default.
const (
	DefaultQueueSize          = 1024
	DefaultQueueBytes         = 1 << 20
	DefaultMaxSubscriptions   = 100
	DefaultPingInterval       = 25 * time.Second
	DefaultPongWait           = 60 * time.Second
	DefaultWriteTimeout       = 10 * time.Second
	DefaultReplayConcurrency  = 64
	DefaultReplayBuffer       = 4096
	DefaultReplayBufferBytes  = 4 << 20
	DefaultRingBytes          = 64 << 20
	DefaultCursorWait         = 2 * time.Second
	DefaultReaderIdle         = 30 * time.Second
	DefaultPartitionWatch     = 10 * time.Second
	DefaultConnectPerMinute   = 600
	DefaultConnectBurst       = 100
	DefaultSubscribePerMinute = 6000
	DefaultSubscribeBurst     = 1000
	DefaultSSEHeartbeat       = 15 * time.Second
	DefaultSSERetry           = 2 * time.Second
)

// Config configures a push gateway Server: the settings of cmd/pushgw,
// one field per flag and TURNPIKE_* environment variable, each named in
// the field's comment with its default. LoadConfig reads them from a
// command line and the environment, DefaultConfig returns the defaults,
// RegisterFlags binds them to a flag set (the one place they are named),
// and Validate reports every problem. A zero field takes its default, but
// for Addr ("" serves nothing: mount Server.Handler yourself) and
// TraceSampleRatio.
//
// cmd/pushgw also accepts the settings its command line shares with
// ingest and the worker and that the gateway does not read (-mongo-uri,
// -mongo-db, -mongo-pool, -model, -echo-delay, -openai-base-url,
// -openai-api-key, -openai-model, -otlp-endpoint, -trace-sample-ratio):
// it ignores them.
type Config struct {
	// Brokers are the Kafka bootstrap addresses (-kafka-brokers,
	// TURNPIKE_KAFKA_BROKERS, comma-separated). Required.
	Brokers []string
	// AuthSecret is the HS256 secret of the bearer tokens (-auth-secret,
	// TURNPIKE_AUTH_SECRET), at least auth.MinSecretBytes. Required.
	AuthSecret string
	// TopicPrefix prefixes the Kafka topic names (-topic-prefix,
	// TURNPIKE_TOPIC_PREFIX). Default "turnpike.".
	TopicPrefix string
	// Topic is the stream topic (no flag). Default: the stream topic
	// under TopicPrefix ("turnpike.stream").
	Topic string
	// Partitions is the partition count of the stream topic when Run
	// creates it and StreamPartitions is 0 (-topic-partitions,
	// TURNPIKE_PARTITIONS, the count of every topic). Default 12.
	Partitions int
	// StreamPartitions, when above 0, is the partition count of the
	// stream topic when Run creates it instead of Partitions
	// (-stream-partitions, TURNPIKE_STREAM_PARTITIONS). Default 0. The
	// gateway places keys by the count the stream topic has, whatever
	// created it (docs/pushgw.md "Sizing partitions").
	StreamPartitions int
	// Addr serves GET /v1/stream, the event streams, /healthz, /readyz and
	// /metrics (-addr, TURNPIKE_PUSHGW_ADDR). Default ":8081"; "" serves
	// nothing (WithListener still does).
	Addr string
	// LogLevel is debug, info, warn or error (-log-level,
	// TURNPIKE_LOG_LEVEL). Default "info".
	LogLevel string
	// LogFormat is json or text (-log-format, TURNPIKE_LOG_FORMAT).
	// Default "json".
	LogFormat string
	// PprofAddr serves net/http/pprof (-pprof-addr, TURNPIKE_PPROF_ADDR).
	// Default: off. Keep it on loopback or a private network.
	PprofAddr string

	// QueueSize and QueueBytes bound each connection's outbound queue, in
	// frames and in bytes. A live event that would take the queue past
	// either is not queued: the client is closed with 4008. A frame always
	// fits an empty queue. Defaults 1024 frames and 1 MiB.
	QueueSize  int
	QueueBytes int
	// MaxSubscriptions caps the subscriptions of one connection. Default 100.
	MaxSubscriptions int

	// PingInterval is how often the server pings each client. It must be
	// shorter than PongWait. Default 25s.
	PingInterval time.Duration
	// PongWait is how long a connection may stay silent (no pong, no frame)
	// before it is dropped. Default 60s.
	PongWait time.Duration
	// WriteTimeout bounds every write to a client, close frames included,
	// and the upgrade handshake. Default 10s.
	WriteTimeout time.Duration

	// RingBytes bounds the in-memory ring of recent stream records, split
	// evenly between the partitions. A resume whose cursor is still in its
	// partition's ring is served from memory; an older one reads Kafka.
	// Counted per record: the frame, the key and 64 bytes of bookkeeping.
	// Default 64 MiB.
	RingBytes int
	// ReplayConcurrency caps the replays reading Kafka at once, across the
	// gateway (replays served from the ring need no slot). Default 64.
	ReplayConcurrency int
	// ReplayBuffer and ReplayBufferBytes cap the live frames held back for
	// one subscription while its replay runs; past either the client is
	// closed with 4008. Defaults 4096 frames and 4 MiB.
	ReplayBuffer      int
	ReplayBufferBytes int
	// CursorWait is how long a subscribe waits for this gateway's live
	// reader to reach a cursor it has not dispatched yet (a cursor handed
	// over from a replica that is ahead). Past it the subscribe fails with
	// unavailable. A cursor beyond the end of the partition fails at once
	// with invalid_argument. Default 2s.
	CursorWait time.Duration

	// ReaderIdle is how long a partition's live reader stays open after
	// its last subscriber on this replica left (-reader-idle,
	// TURNPIKE_PUSHGW_READER_IDLE). A replica opens a partition's reader
	// at its first subscriber and reads nothing of the partitions nobody
	// subscribes to; a subscriber that comes back within ReaderIdle finds
	// the reader and its ring (a resume from memory, no Kafka replay), one
	// that comes later resumes from Kafka. Default 30s: several times the
	// clients' reconnection backoff (pkg/client's 5 s at most, the event
	// streams' 2 s retry), so a page reload, a dropped connection or a
	// token renewal does not close and reopen the reader, while a
	// partition nobody reads any more stops being fetched within half a
	// minute.
	ReaderIdle time.Duration

	// PartitionWatch is how often a replica reads the stream topic's
	// partition count again (-partition-watch-interval,
	// TURNPIKE_PUSHGW_PARTITION_WATCH_INTERVAL). When partitions were
	// added it places conversations by the new count, as the workers'
	// stream writers do, and ends each subscription whose conversation
	// moved with an unavailable error frame: the client subscribes again
	// from its last cursor and the resume reads the rest of the former
	// home, then the new one (docs/api.md "Cursors"). Default 10s, the
	// workers' TURNPIKE_PARTITION_WATCH_INTERVAL.
	PartitionWatch time.Duration

	// AllowedOrigins lists the browser origins allowed to connect:
	// "https://app.example.com" (scheme, host and optional port, exactly),
	// "https://*.example.com" (any subdomain, any port unless the entry
	// names one), or "*" (any origin). An upgrade without an Origin header
	// (not a browser) is allowed; any other origin, the gateway's own host
	// name included (the Host header proves nothing under DNS rebinding),
	// is answered 403 permission_denied. Default: none, so browser pages
	// need their origin listed (the devstack lists its demo page's).
	AllowedOrigins []string

	// ConnectPerMinute and ConnectBurst rate-limit the upgrades of one user
	// (tenant and user of the token) with a token bucket: ConnectBurst at
	// once, refilled at ConnectPerMinute. An upgrade beyond it is answered
	// 429 rate_limited with Retry-After. A negative ConnectPerMinute turns
	// the limit off. Defaults 600 per minute (10/s) and 100.
	ConnectPerMinute int
	ConnectBurst     int
	// SubscribePerMinute and SubscribeBurst rate-limit the subscribe frames
	// of one user across all its connections; one beyond the limit gets an
	// error frame with code rate_limited. A negative SubscribePerMinute
	// turns the limit off. Defaults 6000 per minute (100/s) and 1000.
	SubscribePerMinute int
	SubscribeBurst     int

	// SSEHeartbeat is how often a Server-Sent Events stream, busy or idle,
	// gets a comment line, so that proxies keep it open and a dead peer is
	// noticed by the write deadline. Default 15s.
	SSEHeartbeat time.Duration
	// SSERetry is the reconnection delay each event stream tells its
	// EventSource (the retry field). Default 2s.
	SSERetry time.Duration
}

// BindFlags registers the gateway's settings (not the brokers and topic,
// which come from the shared settings) as flags and TURNPIKE_PUSHGW_*
// environment variables.
func (c *Config) bindGateway(set *flagenv.Set) {
	set.Int(&c.QueueSize, "queue-size", "TURNPIKE_PUSHGW_QUEUE_SIZE", DefaultQueueSize, "frames queued per client before it is closed as too slow (4008)")
	set.Int(&c.QueueBytes, "queue-bytes", "TURNPIKE_PUSHGW_QUEUE_BYTES", DefaultQueueBytes, "bytes queued per client before it is closed as too slow (4008)")
	set.Int(&c.MaxSubscriptions, "max-subscriptions", "TURNPIKE_PUSHGW_MAX_SUBSCRIPTIONS", DefaultMaxSubscriptions, "subscriptions per connection")
	set.Int(&c.RingBytes, "ring-bytes", "TURNPIKE_PUSHGW_RING_BYTES", DefaultRingBytes,
		"memory for recent stream records, split between partitions: resumes within it do not read Kafka")
	set.Duration(&c.CursorWait, "cursor-wait", "TURNPIKE_PUSHGW_CURSOR_WAIT", DefaultCursorWait,
		"how long a subscribe waits for this replica to reach a cursor from a replica further ahead")
	set.Duration(&c.ReaderIdle, "reader-idle", "TURNPIKE_PUSHGW_READER_IDLE", DefaultReaderIdle,
		"how long a partition's live reader stays open after its last subscriber left")
	set.Duration(&c.PartitionWatch, "partition-watch-interval", "TURNPIKE_PUSHGW_PARTITION_WATCH_INTERVAL", DefaultPartitionWatch,
		"how often the stream topic's partition count is read again (partitions added: conversations placed by the new count)")
	set.List(&c.AllowedOrigins, "allowed-origins", "TURNPIKE_PUSHGW_ALLOWED_ORIGINS", nil,
		"browser origins allowed to connect (others get 403): https://app.example.com, https://*.example.com, or *")
	set.Int(&c.ConnectPerMinute, "connect-per-minute", "TURNPIKE_PUSHGW_CONNECT_PER_MINUTE", DefaultConnectPerMinute,
		"WebSocket connects per user per minute after the burst; negative disables")
	set.Int(&c.ConnectBurst, "connect-burst", "TURNPIKE_PUSHGW_CONNECT_BURST", DefaultConnectBurst, "WebSocket connects per user at once")
	set.Int(&c.SubscribePerMinute, "subscribe-per-minute", "TURNPIKE_PUSHGW_SUBSCRIBE_PER_MINUTE", DefaultSubscribePerMinute,
		"subscribes per user per minute after the burst; negative disables")
	set.Int(&c.SubscribeBurst, "subscribe-burst", "TURNPIKE_PUSHGW_SUBSCRIBE_BURST", DefaultSubscribeBurst, "subscribes per user at once")
	set.Duration(&c.SSEHeartbeat, "sse-heartbeat", "TURNPIKE_PUSHGW_SSE_HEARTBEAT", DefaultSSEHeartbeat,
		"how often an idle Server-Sent Events stream gets a comment line")
	set.Duration(&c.SSERetry, "sse-retry", "TURNPIKE_PUSHGW_SSE_RETRY", DefaultSSERetry,
		"reconnection delay Server-Sent Events streams tell their clients")
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.TopicPrefix == "" {
		c.TopicPrefix = topic.DefaultPrefix
	}
	if c.Topic == "" {
		c.Topic = topic.NewNames(c.TopicPrefix).Stream
	}
	setDefault(&c.Partitions, topic.DefaultPartitions)
	setDefault(&c.QueueSize, DefaultQueueSize)
	setDefault(&c.QueueBytes, DefaultQueueBytes)
	setDefault(&c.MaxSubscriptions, DefaultMaxSubscriptions)
	setDefault(&c.PingInterval, DefaultPingInterval)
	setDefault(&c.PongWait, DefaultPongWait)
	setDefault(&c.WriteTimeout, DefaultWriteTimeout)
	setDefault(&c.RingBytes, DefaultRingBytes)
	setDefault(&c.ReplayConcurrency, DefaultReplayConcurrency)
	setDefault(&c.ReplayBuffer, DefaultReplayBuffer)
	setDefault(&c.ReplayBufferBytes, DefaultReplayBufferBytes)
	setDefault(&c.CursorWait, DefaultCursorWait)
	setDefault(&c.ReaderIdle, DefaultReaderIdle)
	setDefault(&c.PartitionWatch, DefaultPartitionWatch)
	setDefault(&c.ConnectPerMinute, DefaultConnectPerMinute)
	setDefault(&c.ConnectBurst, DefaultConnectBurst)
	setDefault(&c.SubscribePerMinute, DefaultSubscribePerMinute)
	setDefault(&c.SubscribeBurst, DefaultSubscribeBurst)
	setDefault(&c.SSEHeartbeat, DefaultSSEHeartbeat)
	setDefault(&c.SSERetry, DefaultSSERetry)
	return c
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// Validate reports every problem of c (after defaults), joined.
func (c Config) validateGateway() error {
	c = c.withDefaults()
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("brokers: none given"))
	}
	for i, b := range c.Brokers {
		if b == "" {
			errs = append(errs, fmt.Errorf("brokers[%d]: empty", i))
		}
	}
	positive := func(name string, v int64) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s: %d, want > 0", name, v))
		}
	}
	positive("queue size", int64(c.QueueSize))
	positive("queue bytes", int64(c.QueueBytes))
	positive("max subscriptions", int64(c.MaxSubscriptions))
	positive("ring bytes", int64(c.RingBytes))
	positive("replay concurrency", int64(c.ReplayConcurrency))
	positive("replay buffer", int64(c.ReplayBuffer))
	positive("replay buffer bytes", int64(c.ReplayBufferBytes))
	positive("connect burst", int64(c.ConnectBurst))
	positive("subscribe burst", int64(c.SubscribeBurst))
	positive("stream partitions", int64(c.StreamPartitions))
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ping interval", c.PingInterval}, {"pong wait", c.PongWait}, {"write timeout", c.WriteTimeout}, {"cursor wait", c.CursorWait}, {"reader idle", c.ReaderIdle}, {"partition watch interval", c.PartitionWatch},
		{"sse heartbeat", c.SSEHeartbeat}, {"sse retry", c.SSERetry}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: %v, want > 0", d.name, d.v))
		}
	}
	if c.PingInterval > 0 && c.PongWait > 0 && c.PingInterval >= c.PongWait {
		errs = append(errs, fmt.Errorf("ping interval %v: must be shorter than pong wait %v", c.PingInterval, c.PongWait))
	}
	if _, err := server.NewOriginPolicy(c.AllowedOrigins); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
