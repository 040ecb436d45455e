package ingest

import (
	"errors"
	"fmt"
	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Defaults of Config.
const (
	DefaultMaxBodyBytes        = 64 << 10
	DefaultProduceTimeout      = 10 * time.Second
	DefaultHistoryDefaultLimit = 50
	DefaultHistoryMaxLimit     = 200
)

// Config configures an ingest Server: the settings of cmd/ingest, one
// field per flag and TURNPIKE_* environment variable, each named in the
// field's comment with its default. LoadConfig reads them from a command
// line and the environment, DefaultConfig returns the defaults,
// RegisterFlags binds them to a flag set (the one place they are named),
// and Validate reports every problem. A zero field takes its default, but
// for Addr ("" serves nothing: mount Server.Handler yourself),
// PublicStreamURL ("": the demo page finds no gateway) and
// TraceSampleRatio (0 samples no new trace), so start from DefaultConfig.
//
// cmd/ingest also accepts -model, -echo-delay, -openai-base-url,
// -openai-api-key and -openai-model, which it ignores: a command line
// shared with the worker still parses.
type Config struct {
	// Brokers are the Kafka bootstrap addresses (-kafka-brokers,
	// TURNPIKE_KAFKA_BROKERS, comma-separated). Required.
	Brokers []string
	// MongoURI is the MongoDB connection string (-mongo-uri,
	// TURNPIKE_MONGO_URI). Required.
	MongoURI string
	// MongoDB is the database (-mongo-db, TURNPIKE_MONGO_DB). Default
	// "turnpike".
	MongoDB string
	// MongoPool bounds the MongoDB client's connections (-mongo-pool,
	// TURNPIKE_MONGO_POOL). Default 0: the driver's 100.
	MongoPool int
	// AuthSecret is the HS256 secret of the bearer tokens (-auth-secret,
	// TURNPIKE_AUTH_SECRET), at least auth.MinSecretBytes. Required.
	AuthSecret string
	// TopicPrefix prefixes the Kafka topic names (-topic-prefix,
	// TURNPIKE_TOPIC_PREFIX). Default "turnpike.".
	TopicPrefix string
	// Partitions is the partition count of the requests and control
	// topics when Run creates them (-topic-partitions,
	// TURNPIKE_PARTITIONS). Default 12.
	Partitions int
	// Addr serves the API, the demo page at /, /healthz, /readyz and
	// /metrics (-addr, TURNPIKE_INGEST_ADDR). Default ":8080"; "" serves
	// nothing (WithListener still does).
	Addr string
	// PublicStreamURL is the push gateway's WebSocket URL as browsers
	// reach it, for the demo page; "{host}" stands for the page's host
	// name (-public-stream-url, TURNPIKE_PUBLIC_STREAM_URL). Default
	// "ws://{host}:8081/v1/stream".
	PublicStreamURL string
	// LogLevel is debug, info, warn or error (-log-level,
	// TURNPIKE_LOG_LEVEL). Default "info".
	LogLevel string
	// LogFormat is json or text (-log-format, TURNPIKE_LOG_FORMAT).
	// Default "json".
	LogFormat string
	// OTLPEndpoint exports trace spans over OTLP/HTTP (-otlp-endpoint,
	// TURNPIKE_OTLP_ENDPOINT). Default: off (trace context is still
	// carried).
	OTLPEndpoint string
	// TraceSampleRatio is the share of new traces sampled, 0..1
	// (-trace-sample-ratio, TURNPIKE_TRACE_SAMPLE_RATIO). Default 1.
	TraceSampleRatio float64
	// PprofAddr serves net/http/pprof (-pprof-addr, TURNPIKE_PPROF_ADDR).
	// Default: off. Keep it on loopback or a private network.
	PprofAddr string

	// MaxContentBytes bounds the content of a user message; over it is 413
	// (-max-content-bytes, TURNPIKE_MAX_CONTENT_BYTES). Default
	// events.DefaultMaxContentBytes (32768).
	MaxContentBytes int
	// MaxBodyBytes bounds a POST body; over it is 413. Default 65536.
	MaxBodyBytes int64
	// ProduceTimeout bounds writing one request record to Kafka; a write
	// that does not finish in time is answered 503. Default 10s.
	ProduceTimeout time.Duration
	// HistoryDefaultLimit is the page size of GET …/messages and GET
	// /v1/conversations without ?limit. Default 50.
	HistoryDefaultLimit int
	// HistoryMaxLimit is the largest ?limit those accept. Default 200.
	HistoryMaxLimit int
	// DevTokens enables POST /v1/dev/token, which mints a bearer token of
	// tenant "default" for any user, without authentication: for the
	// devstack's demo page only. Default false, and then that path is a
	// 404 like any unknown one. cmd/ingest has no flag or environment
	// variable for it.
	DevTokens bool
	// Memory serves DELETE /v1/memories on the MongoDB collection
	// "memories" (-memory, TURNPIKE_MEMORY; the devstack copies the
	// worker's): "text" (MongoDB) or "terms" (FerretDB), as the
	// worker's Config.Memory. "" (the default): not served.
	Memory string
	// DevTokenOrigins are the browser origins (as pushgw's AllowedOrigins)
	// whose pages may call POST /v1/dev/token; a request with any other
	// Origin header is refused 403 permission_denied. One without Origin
	// (not a browser) passes. Default none.
	DevTokenOrigins []string
	// DevTokensRemote serves POST /v1/dev/token to clients beyond loopback
	// too. Default false: only a peer on a loopback address may mint, and
	// any other is refused 403 permission_denied.
	DevTokensRemote bool
	// RatePerSecond and RateBurst are the token bucket of each caller
	// (tenant/user) for POSTs: over it, 429 with Retry-After
	// (-rate-per-second, -rate-burst; TURNPIKE_RATE_PER_SECOND,
	// TURNPIKE_RATE_BURST). Defaults 10 and 20; a negative rate disables
	// the limit.
	RatePerSecond float64
	RateBurst     int
	// MaxQueuedPerConversation and MaxQueuedPerTenant bound the requests
	// accepted and not yet ended (running or queued), per conversation and
	// per tenant: over either, 429. Counted per ingest replica from the
	// completions workers announce; an end never seen expires after
	// QueuedTTL (-max-queued-per-conversation, -max-queued-per-tenant;
	// TURNPIKE_MAX_QUEUED_PER_CONVERSATION, TURNPIKE_MAX_QUEUED_PER_TENANT;
	// QueuedTTL has no flag). Defaults 20, 10,000 and 15m; negative
	// disables.
	MaxQueuedPerConversation int
	MaxQueuedPerTenant       int
	QueuedTTL                time.Duration
}

// Rate limit and queue defaults.
const (
	DefaultRatePerSecond            = 10
	DefaultRateBurst                = 20
	DefaultMaxQueuedPerConversation = 20
	DefaultMaxQueuedPerTenant       = 10_000
	DefaultQueuedTTL                = 15 * time.Minute
)

func (c Config) withDefaults() Config {
	if c.MongoDB == "" {
		c.MongoDB = defaultMongoDB
	}
	if c.TopicPrefix == "" {
		c.TopicPrefix = topic.DefaultPrefix
	}
	if c.Partitions == 0 {
		c.Partitions = topic.DefaultPartitions
	}
	if c.RatePerSecond == 0 {
		c.RatePerSecond = DefaultRatePerSecond
	}
	if c.RateBurst == 0 {
		c.RateBurst = DefaultRateBurst
	}
	if c.MaxQueuedPerConversation == 0 {
		c.MaxQueuedPerConversation = DefaultMaxQueuedPerConversation
	}
	if c.MaxQueuedPerTenant == 0 {
		c.MaxQueuedPerTenant = DefaultMaxQueuedPerTenant
	}
	if c.QueuedTTL == 0 {
		c.QueuedTTL = DefaultQueuedTTL
	}
	if c.MaxContentBytes == 0 {
		c.MaxContentBytes = events.DefaultMaxContentBytes
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.ProduceTimeout == 0 {
		c.ProduceTimeout = DefaultProduceTimeout
	}
	if c.HistoryDefaultLimit == 0 {
		c.HistoryDefaultLimit = DefaultHistoryDefaultLimit
	}
	if c.HistoryMaxLimit == 0 {
		c.HistoryMaxLimit = DefaultHistoryMaxLimit
	}
	return c
}

// validateAPI reports every problem of c (after defaults) at once.
func (c Config) validateAPI() error {
	c = c.withDefaults()
	var errs []error
	if c.Memory != "" && c.Memory != "text" && c.Memory != "terms" {
		errs = append(errs, fmt.Errorf("TURNPIKE_MEMORY %q: want text, terms or empty", c.Memory))
	}
	if c.MaxContentBytes < 0 {
		errs = append(errs, fmt.Errorf("max content bytes: %d, must be positive", c.MaxContentBytes))
	}
	if c.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("max body bytes: %d, must be positive", c.MaxBodyBytes))
	}
	if c.MaxContentBytes > 0 && c.MaxBodyBytes > 0 && int64(c.MaxContentBytes) > c.MaxBodyBytes {
		errs = append(errs, fmt.Errorf("max content bytes %d exceeds max body bytes %d", c.MaxContentBytes, c.MaxBodyBytes))
	}
	if c.ProduceTimeout < 0 {
		errs = append(errs, fmt.Errorf("produce timeout: %v, must be positive", c.ProduceTimeout))
	}
	if c.HistoryDefaultLimit < 0 {
		errs = append(errs, fmt.Errorf("history default limit: %d, must be positive", c.HistoryDefaultLimit))
	}
	if c.HistoryMaxLimit < 0 {
		errs = append(errs, fmt.Errorf("history max limit: %d, must be positive", c.HistoryMaxLimit))
	}
	if c.RatePerSecond > 0 && c.RateBurst < 1 {
		errs = append(errs, fmt.Errorf("rate burst: %d, must be at least 1", c.RateBurst))
	}
	if c.QueuedTTL < 0 {
		errs = append(errs, fmt.Errorf("queued ttl: %v, must be positive", c.QueuedTTL))
	}
	if c.HistoryDefaultLimit > c.HistoryMaxLimit {
		errs = append(errs, fmt.Errorf("history default limit %d exceeds max limit %d", c.HistoryDefaultLimit, c.HistoryMaxLimit))
	}
	if _, err := server.NewOriginPolicy(c.DevTokenOrigins); err != nil {
		errs = append(errs, fmt.Errorf("dev token origins: %w", err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("ingest config: %w", errors.Join(errs...))
	}
	return nil
}

// bindLimits registers the ingest's limits (bind registers the rest).
func (c *Config) bindLimits(set *flagenv.Set) {
	set.Float(&c.RatePerSecond, "rate-per-second", "TURNPIKE_RATE_PER_SECOND", DefaultRatePerSecond, "POSTs per second per user (token bucket); negative disables")
	set.Int(&c.RateBurst, "rate-burst", "TURNPIKE_RATE_BURST", DefaultRateBurst, "burst of the per-user token bucket")
	set.Int(&c.MaxQueuedPerConversation, "max-queued-per-conversation", "TURNPIKE_MAX_QUEUED_PER_CONVERSATION", DefaultMaxQueuedPerConversation, "requests accepted and not ended per conversation; negative disables")
	set.Int(&c.MaxQueuedPerTenant, "max-queued-per-tenant", "TURNPIKE_MAX_QUEUED_PER_TENANT", DefaultMaxQueuedPerTenant, "requests accepted and not ended per tenant; negative disables")
}
