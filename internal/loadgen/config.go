package loadgen

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Modes of a run.
const (
	ModeFloor    = "floor"
	ModePipeline = "pipeline"
	ModeBoth     = "both"
)

// MaxSubsPerConn is the push gateway's default cap on the subscriptions of
// one connection (pushgw.DefaultMaxSubscriptions).
const MaxSubsPerConn = 100

// The echo model's directive bounds (echo.MaxTokens, echo.MaxDelay), kept
// here so that the harness does not link the model and its dependencies.
const (
	maxTokens = 100_000
	maxDelay  = time.Minute
)

// MetricsOff as Config.MetricsURL turns RSS sampling off.
const MetricsOff = "off"

// Defaults of Config, as the flags set them.
const (
	DefaultConversations      = 100
	DefaultMessages           = 10
	DefaultTokens             = 50
	DefaultDelay              = 20 * time.Millisecond
	DefaultUsers              = 10
	DefaultSubsPerConn        = 1
	DefaultTurnTimeout        = 2 * time.Minute
	DefaultStreamBatchTimeout = 2 * time.Millisecond // the worker's default
	DefaultHistoryConcurrency = 8
	DefaultConversationPrefix = "loadgen"
	DefaultOut                = "loadgen-result.json"
)

// Config configures a run. Bind sets the documented defaults; Validate
// reports every problem at once.
type Config struct {
	// Mode is floor, pipeline or both (floor first). Default both.
	Mode string `json:"mode"`
	// LoadedFloor, when > 0, runs a second floor of that many producers
	// (their own conversation names, the same topic and shape) during the
	// pipeline phase: the broker's produce → fetch under the stack's own
	// load, beside the idle floor. Needs the pipeline and Brokers. Default 0.
	LoadedFloor int `json:"loaded_floor,omitempty"`

	// IngestURL is the ingest API. Default http://localhost:8080.
	IngestURL string `json:"ingest_url"`
	// StreamURL is the push gateway's WebSocket. Default: the one the
	// ingest API names (its demo page's stream URL), else the ingest
	// host's port 8081, as cmd/turnpike finds it.
	StreamURL string `json:"stream_url"`
	// Token runs everything as its identity. Either Token or AuthSecret is
	// needed in pipeline mode; Token wins.
	Token string `json:"-"`
	// AuthSecret mints tokens for Users users (tenant "default").
	AuthSecret string `json:"-"`
	// Users is how many users conversations are spread over with
	// AuthSecret. Default 10.
	Users int `json:"users"`

	// Conversations run concurrently, each a closed loop of Messages user
	// messages: the next is sent after the previous one's run.completed.
	// Defaults 100 and 10.
	Conversations int `json:"conversations"`
	Messages      int `json:"messages"`
	// Tokens and Delay shape each reply with echo directives
	// ([[tokens:N]], [[delay:D]]). Defaults 50 and 20ms.
	Tokens int           `json:"tokens"`
	Delay  time.Duration `json:"delay_ns"`
	// Think pauses a conversation between a run.completed and its next
	// message. Default 0.
	Think time.Duration `json:"think_ns"`
	// SubsPerConn is how many conversations share one WebSocket (at most
	// MaxSubsPerConn). Default 1: a connection per conversation.
	SubsPerConn int `json:"subs_per_conn"`
	// ConversationPrefix starts every conversation name, followed by the
	// run id. Default "loadgen".
	ConversationPrefix string `json:"conversation_prefix"`
	// TurnTimeout bounds one message's POST to run.completed. Default 2m.
	TurnTimeout time.Duration `json:"turn_timeout_ns"`
	// HistoryConcurrency bounds the history reads of the final check.
	// Default 8.
	HistoryConcurrency int `json:"history_concurrency"`
	// MetricsURL serves the stack's process_resident_memory_bytes. Default
	// (empty): IngestURL + "/metrics"; MetricsOff: no RSS sampling.
	MetricsURL string `json:"metrics_url"`

	// Brokers are the Kafka brokers of the floor (mode floor or both).
	Brokers []string `json:"kafka_brokers"`
	// TopicPrefix names the floor topic, TopicPrefix + "loadgen.floor".
	// Default "turnpike.".
	TopicPrefix string `json:"topic_prefix"`
	// StreamBatchTimeout is the floor writer's batch timeout: the worker's
	// stream writer setting. Default 2ms.
	StreamBatchTimeout time.Duration `json:"stream_batch_timeout_ns"`

	// Out is where the command writes the JSON result. Default
	// loadgen-result.json.
	Out string `json:"out"`

	// Progress, if set, receives the progress display: one line rewritten
	// in place when ProgressTTY, otherwise a line every ProgressInterval
	// (default 5s; 1s on a TTY).
	Progress         io.Writer     `json:"-"`
	ProgressTTY      bool          `json:"-"`
	ProgressInterval time.Duration `json:"-"`

	// oracleTokens, when set, is the reply length the oracle expects instead
	// of Tokens: tests use it to prove the oracle can fail.
	oracleTokens int
}

// Bind registers the flags of Config on set with their defaults.
func (c *Config) Bind(set *flagenv.Set) {
	set.String(&c.Mode, "mode", "", ModeBoth, "what to measure: floor (raw Kafka), pipeline (the stack), or both (floor first)")
	set.String(&c.IngestURL, "ingest", "TURNPIKE_INGEST_URL", "http://localhost:8080", "ingest API base URL")
	set.String(&c.StreamURL, "stream", "TURNPIKE_STREAM_URL", "", "push gateway WebSocket URL (default: the one the ingest API names)")
	set.String(&c.Token, "token", "TURNPIKE_TOKEN", "", "bearer token: run every conversation as its identity")
	set.String(&c.AuthSecret, "auth-secret", "TURNPIKE_AUTH_SECRET", "", "HS256 secret: mint tokens for -users users instead")
	set.Int(&c.Users, "users", "", DefaultUsers, "distinct users with -auth-secret")
	set.Int(&c.Conversations, "conversations", "", DefaultConversations, "concurrent conversations (= concurrent streams)")
	set.Int(&c.Messages, "messages", "", DefaultMessages, "messages per conversation, each sent after the previous completed")
	set.Int(&c.Tokens, "tokens", "", DefaultTokens, "tokens per reply ([[tokens:N]])")
	set.Duration(&c.Delay, "delay", "", DefaultDelay, "delay per token ([[delay:D]])")
	set.Duration(&c.Think, "think", "", 0, "pause between a reply and the next message")
	set.Int(&c.SubsPerConn, "subs-per-conn", "", DefaultSubsPerConn, fmt.Sprintf("subscriptions per WebSocket connection (1..%d)", MaxSubsPerConn))
	set.String(&c.ConversationPrefix, "conversation-prefix", "", DefaultConversationPrefix, "prefix of the conversation names (the run id follows)")
	set.Duration(&c.TurnTimeout, "turn-timeout", "", DefaultTurnTimeout, "longest wait from a POST to its run.completed")
	set.Int(&c.HistoryConcurrency, "history-concurrency", "", DefaultHistoryConcurrency, "concurrent history reads of the final check")
	set.String(&c.MetricsURL, "metrics-url", "", "", `Prometheus endpoint with the stack's process_resident_memory_bytes (default <ingest>/metrics; "off": none)`)
	set.List(&c.Brokers, "kafka-brokers", "TURNPIKE_KAFKA_BROKERS", nil, "Kafka brokers of the floor (the devstack's: 127.0.0.1:9092)")
	set.String(&c.TopicPrefix, "topic-prefix", "TURNPIKE_TOPIC_PREFIX", topic.DefaultPrefix, "topic prefix; the floor topic is <prefix>loadgen.floor")
	set.Duration(&c.StreamBatchTimeout, "stream-batch-timeout", "TURNPIKE_STREAM_BATCH_TIMEOUT", DefaultStreamBatchTimeout, "batch timeout of the floor's writer (the worker's stream writer setting)")
	set.String(&c.Out, "out", "", DefaultOut, "JSON result file")
	set.Int(&c.LoadedFloor, "loaded-floor", "", 0, "producers of a second floor run during the pipeline (the broker under the stack's load); 0: none")
}

// Validate reports every problem of c, joined.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	floor, pipeline := c.Mode == ModeFloor || c.Mode == ModeBoth, c.Mode == ModePipeline || c.Mode == ModeBoth
	if !floor && !pipeline {
		bad("mode %q: want floor, pipeline or both", c.Mode)
	}
	if c.Conversations < 1 {
		bad("conversations: %d, want at least 1", c.Conversations)
	}
	if c.Messages < 1 {
		bad("messages: %d, want at least 1", c.Messages)
	}
	if c.Tokens < 1 || c.Tokens > maxTokens {
		bad("tokens: %d, want 1..%d", c.Tokens, maxTokens)
	}
	if c.Delay < 0 || c.Delay > maxDelay {
		bad("delay: %v, want 0..%v", c.Delay, maxDelay)
	}
	if c.Think < 0 {
		bad("think: %v, want >= 0", c.Think)
	}
	if c.StreamBatchTimeout < 0 {
		bad("stream batch timeout: %v, want >= 0", c.StreamBatchTimeout)
	}
	if pipeline {
		errs = append(errs, c.validatePipeline()...)
	}
	if c.LoadedFloor < 0 {
		bad("loaded floor: %d producers, want >= 0", c.LoadedFloor)
	}
	if c.LoadedFloor > 0 && !pipeline {
		bad("loaded floor: it runs during the pipeline; pass -mode pipeline or both")
	}
	if (floor || c.LoadedFloor > 0) && len(c.Brokers) == 0 {
		bad("the floor needs Kafka brokers: pass -kafka-brokers (the devstack's: 127.0.0.1:9092) or -mode pipeline")
	}
	return errors.Join(errs...)
}

func (c Config) validatePipeline() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Token == "" && c.AuthSecret == "" {
		bad("no identity: pass -token (TURNPIKE_TOKEN; the devstack prints one at start: export TURNPIKE_TOKEN=…) " +
			"or -auth-secret (TURNPIKE_AUTH_SECRET; the devstack's is the one it was started with, else TURNPIKE_AUTH_SECRET=$(cat data/auth-secret))")
	}
	if c.Token == "" && c.AuthSecret != "" {
		if len(c.AuthSecret) < auth.MinSecretBytes {
			bad("auth secret: %d bytes, want at least %d", len(c.AuthSecret), auth.MinSecretBytes)
		}
		if c.Users < 1 {
			bad("users: %d, want at least 1", c.Users)
		}
	}
	if c.SubsPerConn < 1 || c.SubsPerConn > MaxSubsPerConn {
		bad("subs per conn: %d, want 1..%d (the gateway's default cap)", c.SubsPerConn, MaxSubsPerConn)
	}
	if c.TurnTimeout <= 0 {
		bad("turn timeout: %v, want > 0", c.TurnTimeout)
	}
	if c.HistoryConcurrency < 1 {
		bad("history concurrency: %d, want at least 1", c.HistoryConcurrency)
	}
	// The longest conversation name must pass the ID rule.
	if err := events.ValidateID("conversation prefix", conversationName(c.ConversationPrefix, "20060102t150405-abcdef", c.Conversations)); err != nil {
		bad("conversation prefix %q: %w", c.ConversationPrefix, err)
	}
	for name, u := range map[string]string{"ingest URL": c.IngestURL, "stream URL": c.StreamURL} {
		if p, err := url.Parse(u); err != nil || p.Host == "" {
			bad("%s %q: want an absolute URL", name, u)
		}
	}
	if !strings.HasPrefix(c.StreamURL, "ws://") && !strings.HasPrefix(c.StreamURL, "wss://") {
		bad("stream URL %q: want ws:// or wss://", c.StreamURL)
	}
	if c.MetricsURL != "" && c.MetricsURL != MetricsOff {
		if p, err := url.Parse(c.MetricsURL); err != nil || p.Host == "" {
			bad("metrics URL %q: want an absolute URL or %q", c.MetricsURL, MetricsOff)
		}
	}
	return errs
}

// conversationName is the name of conversation i of a run.
func conversationName(prefix, runID string, i int) string {
	return fmt.Sprintf("%s-%s-%d", prefix, runID, i)
}

// metricsURL is where RSS is sampled, "" for nowhere.
func (c Config) metricsURL() string {
	switch c.MetricsURL {
	case MetricsOff:
		return ""
	case "":
		return strings.TrimRight(c.IngestURL, "/") + "/metrics"
	}
	return c.MetricsURL
}

// expectedText is the reply the oracle expects for every message.
func (c Config) expectedText() string {
	if c.oracleTokens > 0 {
		return fillerText(c.oracleTokens)
	}
	return fillerText(c.Tokens)
}

// content is the i-th (1-based) user message of a conversation.
func (c Config) content(i int) string {
	return fmt.Sprintf("m%d [[tokens:%d]][[delay:%s]]", i, c.Tokens, c.Delay)
}
