package replay

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/logging"
	"github.com/turnpike-dev/turnpike/internal/mongodial"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// shared are the settings of docs/api.md's "Configuration" section that a
// replay reads, with the flags, environment variables and defaults the
// other commands give them. A replay verifies no token, creates no topic,
// exports no trace and serves nothing: it has no -auth-secret,
// -topic-partitions, -otlp-endpoint, -trace-sample-ratio or -pprof-addr.
type shared struct {
	Brokers     []string // -kafka-brokers, TURNPIKE_KAFKA_BROKERS
	MongoURI    string   // -mongo-uri, TURNPIKE_MONGO_URI
	MongoDB     string   // -mongo-db, TURNPIKE_MONGO_DB, default "turnpike"
	MongoPool   int      // -mongo-pool, TURNPIKE_MONGO_POOL, default 0: the driver's 100
	TopicPrefix string   // -topic-prefix, TURNPIKE_TOPIC_PREFIX, default "turnpike."
	// Model is the model of the agent built without Go code and of the
	// compaction summarizer (-model, TURNPIKE_MODEL): "echo" (default) or
	// "openai", with EchoDelay and the OpenAI settings, as the worker's.
	Model                                    string
	EchoDelay                                time.Duration
	OpenAIBaseURL, OpenAIAPIKey, OpenAIModel string
	LogLevel                                 string // -log-level, TURNPIKE_LOG_LEVEL, default "info"
	LogFormat                                string // -log-format, TURNPIKE_LOG_FORMAT, default "json"
}

// bind registers the shared flags, with the worker's defaults.
func (s *shared) bind(set *flagenv.Set) {
	w := worker.DefaultConfig()
	set.List(&s.Brokers, "kafka-brokers", "TURNPIKE_KAFKA_BROKERS", nil, "Kafka bootstrap brokers")
	set.String(&s.MongoURI, "mongo-uri", "TURNPIKE_MONGO_URI", "", "MongoDB connection string")
	set.String(&s.MongoDB, "mongo-db", "TURNPIKE_MONGO_DB", w.MongoDB, "MongoDB database")
	set.Int(&s.MongoPool, "mongo-pool", "TURNPIKE_MONGO_POOL", 0, "most connections (commands in flight) of the MongoDB client; 0: the driver's default, 100")
	set.String(&s.TopicPrefix, "topic-prefix", "TURNPIKE_TOPIC_PREFIX", w.TopicPrefix, "prefix of the Kafka topic names")
	set.String(&s.Model, "model", "TURNPIKE_MODEL", w.Model, "model: echo or openai")
	set.Duration(&s.EchoDelay, "echo-delay", "TURNPIKE_ECHO_DELAY", w.EchoDelay, "per-token delay of the echo model")
	set.String(&s.OpenAIBaseURL, "openai-base-url", "TURNPIKE_OPENAI_BASE_URL", "", "base URL of an OpenAI-compatible API")
	set.String(&s.OpenAIAPIKey, "openai-api-key", "TURNPIKE_OPENAI_API_KEY", "", "API key of the OpenAI-compatible API")
	set.String(&s.OpenAIModel, "openai-model", "TURNPIKE_OPENAI_MODEL", "", "model name at the OpenAI-compatible API")
	set.String(&s.LogLevel, "log-level", "TURNPIKE_LOG_LEVEL", w.LogLevel, "log level: debug, info, warn, error")
	set.String(&s.LogFormat, "log-format", "TURNPIKE_LOG_FORMAT", w.LogFormat, "log format: json or text")
}

// Topics returns the topic names under the configured prefix.
func (s shared) Topics() topic.Names { return topic.NewNames(s.TopicPrefix) }

// NewLogger returns the configured structured logger writing to w.
func (s shared) NewLogger(w io.Writer) *slog.Logger { return logging.New(w, s.LogLevel, s.LogFormat) }

// OpenStore connects to MongoDB and opens the history store of MongoDB
// (creating its indexes). closeStore disconnects.
func (s shared) OpenStore(ctx context.Context) (store *history.MongoStore, closeStore func(), err error) {
	conn, err := mongodial.Dial(s.MongoURI, s.MongoDB, s.MongoPool)
	if err != nil {
		return nil, nil, err
	}
	store, err = history.NewMongoStore(ctx, conn.DB, history.MongoConfig{})
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("open history store: %w", err)
	}
	return store, conn.Close, nil
}
