package ingest

import (
	"errors"
	"fmt"
	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/server"
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

// Config configures a Service. A zero field takes its default.
type Config struct {
	// MaxContentBytes bounds the content of a user message; over it is 413.
	// Default events.DefaultMaxContentBytes (32768).
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
	// 404 like any unknown one. cmd/ingest has no flag for it.
	DevTokens bool
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
	// (tenant/user) for POSTs: over it, 429 with Retry-After. Defaults 10
	// and 20; a negative rate disables the limit.
	RatePerSecond float64
	RateBurst     int
	// MaxQueuedPerConversation and MaxQueuedPerTenant bound the requests
	// accepted and not yet ended (running or queued), per conversation and
	// per tenant: over either, 429. Counted per ingest replica from the
	// completions workers announce; an end never seen expires after
	// QueuedTTL. Defaults 20, 10,000 and 15m; negative disables.
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

// Validate reports every problem of c (after defaults) at once.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
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

// BindFlags registers the ingest's limits (the shared settings and
// max-content-bytes, which the worker shares, are bound by the service
// package).
func (c *Config) BindFlags(set *flagenv.Set) {
	set.Float(&c.RatePerSecond, "rate-per-second", "TURNPIKE_RATE_PER_SECOND", DefaultRatePerSecond, "POSTs per second per user (token bucket); negative disables")
	set.Int(&c.RateBurst, "rate-burst", "TURNPIKE_RATE_BURST", DefaultRateBurst, "burst of the per-user token bucket")
	set.Int(&c.MaxQueuedPerConversation, "max-queued-per-conversation", "TURNPIKE_MAX_QUEUED_PER_CONVERSATION", DefaultMaxQueuedPerConversation, "requests accepted and not ended per conversation; negative disables")
	set.Int(&c.MaxQueuedPerTenant, "max-queued-per-tenant", "TURNPIKE_MAX_QUEUED_PER_TENANT", DefaultMaxQueuedPerTenant, "requests accepted and not ended per tenant; negative disables")
}
