package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/cloudwego/eino-ext/components/model/openai"
	"github.com/cloudwego/eino/components/model"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/logging"
	"github.com/turnpike-dev/turnpike/internal/mongodial"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/internal/tracing"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// Shared holds the settings of docs/api.md's "Configuration" section, read by
// every service.
type Shared struct {
	Brokers     []string // TURNPIKE_KAFKA_BROKERS
	MongoURI    string   // TURNPIKE_MONGO_URI
	MongoDB     string   // TURNPIKE_MONGO_DB, default "turnpike"
	AuthSecret  string   // TURNPIKE_AUTH_SECRET
	TopicPrefix string   // TURNPIKE_TOPIC_PREFIX, default "turnpike."
	Model       string   // TURNPIKE_MODEL: "echo" (default) or "openai"
	EchoDelay   time.Duration
	OpenAI      OpenAIConfig
	LogLevel    string // TURNPIKE_LOG_LEVEL: debug, info (default), warn, error
	LogFormat   string // TURNPIKE_LOG_FORMAT: json (default) or text
	// Partitions is the partition count of topics created at start
	// (TURNPIKE_PARTITIONS, default 12); every service creates what it
	// needs with the same count.
	Partitions int
	// PprofAddr, when set, serves net/http/pprof there (TURNPIKE_PPROF_ADDR;
	// default off). Bind it to loopback or a private network only.
	PprofAddr string
	// OTLPEndpoint, when set, exports trace spans over OTLP/HTTP there
	// (TURNPIKE_OTLP_ENDPOINT; default off: trace context is still carried).
	OTLPEndpoint string
	// TraceSampleRatio samples new traces (TURNPIKE_TRACE_SAMPLE_RATIO, default 1).
	TraceSampleRatio float64
	// MongoPool bounds the connections, and so the commands in flight, of
	// the MongoDB client (TURNPIKE_MONGO_POOL; default 0: the driver's
	// 100). The devstack lowers it for its embedded store (DevstackMongoPool).
	MongoPool int
}

// DevstackMongoPool is the devstack's MongoPool for its embedded store,
// unless TURNPIKE_MONGO_POOL says otherwise. The embedded FerretDB runs on
// the same cores as the token path: each connection is a goroutine that
// decodes, runs SQLite and encodes, and a hundred of them runnable at once
// queued the token path's goroutines behind store work. A few connections
// keep the store busy (group commit batches the writes) while the rest of
// the store's callers wait, parked, for a connection.
const DevstackMongoPool = 8

// OpenAIConfig configures TURNPIKE_MODEL=openai.
type OpenAIConfig struct {
	BaseURL, APIKey, Model string
}

// Bind registers the shared flags. The log format defaults to json; the
// devstack, read by people, defaults it to text with BindLogFormat.
func (s *Shared) Bind(set *flagenv.Set) { s.BindLogFormat(set, "json") }

// BindLogFormat is Bind with another default log format.
func (s *Shared) BindLogFormat(set *flagenv.Set, defaultLogFormat string) {
	s.BindWithout(set, defaultLogFormat)
}

// BindWithout is BindLogFormat without the flags named in omit (e.g.
// "auth-secret"), for a command that does not use those settings: its -h
// then lists only what it reads. Omitted fields keep their zero values.
func (s *Shared) BindWithout(set *flagenv.Set, defaultLogFormat string, omit ...string) {
	flags := []struct {
		name string
		bind func(name string)
	}{
		{"kafka-brokers", func(n string) { set.List(&s.Brokers, n, "TURNPIKE_KAFKA_BROKERS", nil, "Kafka bootstrap brokers") }},
		{"mongo-uri", func(n string) { set.String(&s.MongoURI, n, "TURNPIKE_MONGO_URI", "", "MongoDB connection string") }},
		{"mongo-db", func(n string) { set.String(&s.MongoDB, n, "TURNPIKE_MONGO_DB", "turnpike", "MongoDB database") }},
		{"mongo-pool", func(n string) {
			set.Int(&s.MongoPool, n, "TURNPIKE_MONGO_POOL", 0, "most connections (commands in flight) of the MongoDB client; 0: the driver's default, 100")
		}},
		{"auth-secret", func(n string) {
			set.String(&s.AuthSecret, n, "TURNPIKE_AUTH_SECRET", "", "HS256 secret of bearer tokens (at least 32 bytes)")
		}},
		{"topic-prefix", func(n string) {
			set.String(&s.TopicPrefix, n, "TURNPIKE_TOPIC_PREFIX", topic.DefaultPrefix, "prefix of the Kafka topic names")
		}},
		{"model", func(n string) { set.String(&s.Model, n, "TURNPIKE_MODEL", "echo", "model: echo or openai") }},
		{"echo-delay", func(n string) {
			set.Duration(&s.EchoDelay, n, "TURNPIKE_ECHO_DELAY", echo.DefaultDelay, "per-token delay of the echo model")
		}},
		{"openai-base-url", func(n string) {
			set.String(&s.OpenAI.BaseURL, n, "TURNPIKE_OPENAI_BASE_URL", "", "base URL of an OpenAI-compatible API")
		}},
		{"openai-api-key", func(n string) {
			set.String(&s.OpenAI.APIKey, n, "TURNPIKE_OPENAI_API_KEY", "", "API key of the OpenAI-compatible API")
		}},
		{"openai-model", func(n string) {
			set.String(&s.OpenAI.Model, n, "TURNPIKE_OPENAI_MODEL", "", "model name at the OpenAI-compatible API")
		}},
		{"log-level", func(n string) {
			set.String(&s.LogLevel, n, "TURNPIKE_LOG_LEVEL", "info", "log level: debug, info, warn, error")
		}},
		{"log-format", func(n string) {
			set.String(&s.LogFormat, n, "TURNPIKE_LOG_FORMAT", defaultLogFormat, "log format: json or text")
		}},
		{"topic-partitions", func(n string) {
			set.Int(&s.Partitions, n, "TURNPIKE_PARTITIONS", topic.DefaultPartitions, "partitions of topics created at start")
		}},
		{"otlp-endpoint", func(n string) {
			set.String(&s.OTLPEndpoint, n, "TURNPIKE_OTLP_ENDPOINT", "", "OTLP/HTTP endpoint of trace spans, e.g. http://otel-collector:4318 (off when empty)")
		}},
		{"trace-sample-ratio", func(n string) {
			set.Float(&s.TraceSampleRatio, n, "TURNPIKE_TRACE_SAMPLE_RATIO", 1, "share of new traces sampled, 0..1")
		}},
		{"pprof-addr", func(n string) {
			set.String(&s.PprofAddr, n, "TURNPIKE_PPROF_ADDR", "", "serve net/http/pprof on this address (off when empty; keep it private)")
		}},
	}
	for _, f := range flags {
		if !slices.Contains(omit, f.name) {
			f.bind(f.name)
		}
	}
}

// Topics returns the topic names under the configured prefix.
func (s Shared) Topics() topic.Names { return topic.NewNames(s.TopicPrefix) }

// validate checks the settings a service needs: kafka, mongo, auth.
func (s Shared) validate(kafka, mongo, authSecret bool) error {
	var errs []error
	if kafka && len(s.Brokers) == 0 {
		errs = append(errs, errors.New("TURNPIKE_KAFKA_BROKERS is required"))
	}
	if mongo && s.MongoURI == "" {
		errs = append(errs, errors.New("TURNPIKE_MONGO_URI is required"))
	}
	if mongo && s.MongoDB == "" {
		errs = append(errs, errors.New("TURNPIKE_MONGO_DB is empty"))
	}
	if s.MongoPool < 0 {
		errs = append(errs, fmt.Errorf("TURNPIKE_MONGO_POOL %d: must not be negative", s.MongoPool))
	}
	if authSecret && len(s.AuthSecret) < auth.MinSecretBytes {
		errs = append(errs, fmt.Errorf("TURNPIKE_AUTH_SECRET must be at least %d bytes", auth.MinSecretBytes))
	}
	errs = append(errs, logging.Check(s.LogLevel, s.LogFormat))
	return errors.Join(errs...)
}

// NewLogger returns the configured structured logger writing to w.
func (s Shared) NewLogger(w io.Writer) *slog.Logger { return logging.New(w, s.LogLevel, s.LogFormat) }

// NewModel builds the configured chat model.
func (s Shared) NewModel() (model.ToolCallingChatModel, error) {
	switch s.Model {
	case "echo":
		return echo.New(echo.Config{Delay: s.EchoDelay})
	case "openai":
		if s.OpenAI.Model == "" {
			return nil, errors.New("TURNPIKE_OPENAI_MODEL is required with TURNPIKE_MODEL=openai")
		}
		return newOpenAIModel(s.OpenAI.BaseURL, s.OpenAI.APIKey, s.OpenAI.Model)
	}
	return nil, fmt.Errorf("TURNPIKE_MODEL %q: want echo or openai", s.Model)
}

// ModelName labels the configured model's token usage in metrics: echo,
// or the OpenAI-compatible model's name.
func (s Shared) ModelName() string {
	if s.Model == "openai" {
		return s.OpenAI.Model
	}
	return s.Model
}

// newOpenAIModel is eino-ext's OpenAI chat model on an OpenAI-compatible
// API at baseURL (default: OpenAI's), streaming with usage in the last
// chunk. The run's context bounds each call (TURNPIKE_RUN_TIMEOUT).
func newOpenAIModel(baseURL, apiKey, name string) (model.ToolCallingChatModel, error) {
	m, err := openai.NewChatModel(context.Background(), &openai.ChatModelConfig{BaseURL: baseURL, APIKey: apiKey, Model: name})
	if err != nil {
		return nil, fmt.Errorf("openai model %s: %w", name, err)
	}
	return m, nil
}

// OpenStore connects to MongoDB and opens the history store (creating its
// indexes). close disconnects.
func (s Shared) OpenStore(ctx context.Context) (store *history.MongoStore, ping func(context.Context) error, close func(), err error) {
	conn, err := mongodial.Dial(s.MongoURI, s.MongoDB, s.MongoPool)
	if err != nil {
		return nil, nil, nil, err
	}
	store, err = history.NewMongoStore(ctx, conn.DB, history.MongoConfig{})
	if err != nil {
		conn.Close()
		return nil, nil, nil, fmt.Errorf("open history store: %w", err)
	}
	return store, conn.Ping, conn.Close, nil
}

// NewTracing returns the tracing of service name.
func (s Shared) NewTracing(ctx context.Context, name string) (*tracing.Tracing, error) {
	return tracing.New(ctx, tracing.Config{ServiceName: name, Endpoint: s.OTLPEndpoint, SampleRatio: s.TraceSampleRatio})
}

// partitions is the partition count of topics a service creates.
func (s Shared) partitions() int {
	if s.Partitions > 0 {
		return s.Partitions
	}
	return topic.DefaultPartitions
}
