package worker

import (
	"errors"
	"flag"
	"io"
	"os"
	"time"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/service"
	iworker "github.com/turnpike-dev/turnpike/internal/worker"
)

// Config is the worker's configuration: the settings of cmd/worker, one
// field per flag and TURNPIKE_* environment variable (named in each
// field's comment, with its default). LoadConfig reads them; DefaultConfig
// returns the defaults. A zero duration or count means its default, as in
// cmd/worker.
type Config struct {
	// Brokers are the Kafka bootstrap addresses (TURNPIKE_KAFKA_BROKERS).
	// Required.
	Brokers []string
	// MongoURI is the MongoDB connection string (TURNPIKE_MONGO_URI).
	// Required.
	MongoURI string
	// MongoDB is the database (TURNPIKE_MONGO_DB). Default "turnpike".
	MongoDB string
	// MongoPool bounds the MongoDB client's connections, and so its
	// commands in flight (TURNPIKE_MONGO_POOL). Default 0: the driver's
	// 100.
	MongoPool int
	// TopicPrefix prefixes the Kafka topic names (TURNPIKE_TOPIC_PREFIX).
	// Default "turnpike.".
	TopicPrefix string
	// Partitions is the partition count of topics created at start
	// (TURNPIKE_PARTITIONS). Default 12.
	Partitions int
	// GroupID is the Kafka consumer group (TURNPIKE_WORKER_GROUP). Default
	// "turnpike-worker".
	GroupID string
	// Addr serves /healthz, /readyz and /metrics (TURNPIKE_WORKER_ADDR).
	// Default ":8082"; "" serves nothing.
	Addr string

	// Model is the model of the agent configuration's agents and the
	// default compaction summarizer (TURNPIKE_MODEL): "echo" or "openai".
	// Default "echo". An agent written in Go brings its own models.
	Model string
	// EchoDelay is the echo model's per-token delay (TURNPIKE_ECHO_DELAY).
	// Default 20ms.
	EchoDelay time.Duration
	// OpenAIBaseURL, OpenAIAPIKey and OpenAIModel configure Model "openai"
	// (TURNPIKE_OPENAI_BASE_URL, TURNPIKE_OPENAI_API_KEY,
	// TURNPIKE_OPENAI_MODEL). Default: none.
	OpenAIBaseURL, OpenAIAPIKey, OpenAIModel string
	// AgentFile is the agent configuration file (TURNPIKE_AGENT_CONFIG),
	// the way cmd/worker builds agents without Go code. It must be empty
	// with WithAgent or WithAgentFactory. Default: none.
	AgentFile string
	// AgentName and Instruction describe the agent built without an agent
	// file or Go code (TURNPIKE_INSTRUCTION). Defaults "assistant" and none.
	AgentName, Instruction string

	// WindowMessages is how many stored messages the agent sees before
	// the new one (TURNPIKE_WINDOW_MESSAGES). Default 20.
	WindowMessages int
	// MaxContentBytes bounds a request's content
	// (TURNPIKE_MAX_CONTENT_BYTES). Default 32768.
	MaxContentBytes int
	// CompactTokens is the token budget of the agent's window, over which
	// older messages are condensed into a summary
	// (TURNPIKE_COMPACT_TOKENS). Default 0: off.
	CompactTokens int
	// CompactKeep is how many newest messages compaction keeps verbatim
	// (TURNPIKE_COMPACT_KEEP). Default 6.
	CompactKeep int

	// Ordering is "key" (conversations of a partition run concurrently,
	// each in order) or "partition" (one record at a time per partition)
	// (TURNPIKE_ORDERING). Default "key".
	Ordering string
	// MaxInflight bounds the records fetched and not yet done across
	// partitions (TURNPIKE_MAX_INFLIGHT). Default 1024.
	MaxInflight int
	// ReadAhead bounds them per partition (TURNPIKE_READ_AHEAD). Default 512.
	ReadAhead int
	// MaxAttempts bounds the runs of a record failing transiently in the
	// model (or in the agent factory) before it is dead-lettered
	// (TURNPIKE_MAX_ATTEMPTS). Default 5.
	MaxAttempts int
	// RunTimeout bounds one run (TURNPIKE_RUN_TIMEOUT). Default 10m.
	RunTimeout time.Duration
	// DrainTimeout is how long in-flight runs may finish on shutdown or a
	// lost partition before they are aborted and re-delivered
	// (TURNPIKE_DRAIN_TIMEOUT). Default 30s.
	DrainTimeout time.Duration
	// SessionTimeout is the consumer group's session timeout
	// (TURNPIKE_SESSION_TIMEOUT). Default 10s.
	SessionTimeout time.Duration
	// PartitionWatchInterval is how often the requests topic's partition
	// count is checked; a change rebalances the workers, which then place
	// records by the new count (TURNPIKE_PARTITION_WATCH_INTERVAL).
	// Default 10s.
	PartitionWatchInterval time.Duration
	// StreamBatchTimeout is the longest a stream event waits for a batch
	// (TURNPIKE_STREAM_BATCH_TIMEOUT). Default 2ms.
	StreamBatchTimeout time.Duration
	// RetryBackoffMin and RetryBackoffMax bound the backoff between
	// attempts (no flag). Defaults 100ms and 10s.
	RetryBackoffMin, RetryBackoffMax time.Duration
	// CommitInterval is how often each partition commits its offset (no
	// flag). Default 200ms.
	CommitInterval time.Duration

	// LogLevel is debug, info, warn or error (TURNPIKE_LOG_LEVEL). Default
	// "info".
	LogLevel string
	// LogFormat is json or text (TURNPIKE_LOG_FORMAT). Default "json".
	LogFormat string
	// OTLPEndpoint exports trace spans over OTLP/HTTP
	// (TURNPIKE_OTLP_ENDPOINT). Default: off.
	OTLPEndpoint string
	// TraceSampleRatio samples new traces (TURNPIKE_TRACE_SAMPLE_RATIO).
	// Default 1.
	TraceSampleRatio float64
	// PprofAddr serves net/http/pprof (TURNPIKE_PPROF_ADDR). Default: off.
	PprofAddr string
}

// DefaultConfig returns the configuration with every default and no
// brokers or MongoDB URI.
func DefaultConfig() Config {
	c, err := LoadConfig(nil, func(string) (string, bool) { return "", false })
	if err != nil {
		panic(err) // the defaults parse
	}
	return c
}

// LoadConfig reads the configuration from command-line arguments (as
// cmd/worker: -kafka-brokers, -window, …; -h lists them on stderr) and from
// TURNPIKE_* environment variables looked up with lookupEnv (os.LookupEnv,
// or nil for it). Flags win over the environment. A -h or -help returns
// flag.ErrHelp.
func LoadConfig(args []string, lookupEnv func(string) (string, bool)) (Config, error) {
	return loadConfig(args, lookupEnv, os.Stderr)
}

func loadConfig(args []string, lookupEnv func(string) (string, bool), stderr io.Writer) (Config, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	var sc service.WorkerConfig
	set := flagenv.New(flag.NewFlagSet("worker", flag.ContinueOnError), lookupEnv)
	set.FlagSet().SetOutput(stderr)
	sc.Bind(set)
	if err := set.Parse(args); err != nil {
		return Config{}, err
	}
	return fromService(sc), nil
}

// Validate reports every problem with c, those of its agent file included.
func (c Config) Validate() error {
	return c.service(nil).Validate()
}

func (c Config) service(custom *iworker.Custom) service.WorkerConfig {
	var s service.WorkerConfig
	s.Brokers, s.MongoURI, s.MongoDB, s.MongoPool, s.TopicPrefix, s.Partitions = c.Brokers, c.MongoURI, c.MongoDB, c.MongoPool, c.TopicPrefix, c.Partitions
	s.Model, s.EchoDelay = c.Model, c.EchoDelay
	s.OpenAI.BaseURL, s.OpenAI.APIKey, s.OpenAI.Model = c.OpenAIBaseURL, c.OpenAIAPIKey, c.OpenAIModel
	s.LogLevel, s.LogFormat, s.OTLPEndpoint, s.TraceSampleRatio, s.PprofAddr = c.LogLevel, c.LogFormat, c.OTLPEndpoint, c.TraceSampleRatio, c.PprofAddr
	s.Addr = c.Addr
	w := &s.Worker
	w.GroupID, w.AgentFile, w.AgentName, w.Instruction = c.GroupID, c.AgentFile, c.AgentName, c.Instruction
	w.WindowMessages, w.MaxContentBytes, w.CompactTokens, w.CompactKeep = c.WindowMessages, c.MaxContentBytes, c.CompactTokens, c.CompactKeep
	w.Ordering, w.MaxInflight, w.ReadAhead, w.MaxAttempts = c.Ordering, c.MaxInflight, c.ReadAhead, c.MaxAttempts
	w.RunTimeout, w.DrainTimeout, w.SessionTimeout, w.StreamBatchTimeout = c.RunTimeout, c.DrainTimeout, c.SessionTimeout, c.StreamBatchTimeout
	w.RetryBackoffMin, w.RetryBackoffMax, w.CommitInterval = c.RetryBackoffMin, c.RetryBackoffMax, c.CommitInterval
	w.PartitionWatchInterval = c.PartitionWatchInterval
	s.Custom = custom
	return s
}

func fromService(s service.WorkerConfig) Config {
	w := s.Worker
	return Config{
		Brokers: s.Brokers, MongoURI: s.MongoURI, MongoDB: s.MongoDB, MongoPool: s.MongoPool, TopicPrefix: s.TopicPrefix, Partitions: s.Partitions,
		GroupID: w.GroupID, Addr: s.Addr,
		Model: s.Model, EchoDelay: s.EchoDelay,
		OpenAIBaseURL: s.OpenAI.BaseURL, OpenAIAPIKey: s.OpenAI.APIKey, OpenAIModel: s.OpenAI.Model,
		AgentFile: w.AgentFile, AgentName: w.AgentName, Instruction: w.Instruction,
		WindowMessages: w.WindowMessages, MaxContentBytes: w.MaxContentBytes, CompactTokens: w.CompactTokens, CompactKeep: w.CompactKeep,
		Ordering: w.Ordering, MaxInflight: w.MaxInflight, ReadAhead: w.ReadAhead, MaxAttempts: w.MaxAttempts,
		RunTimeout: w.RunTimeout, DrainTimeout: w.DrainTimeout, SessionTimeout: w.SessionTimeout, StreamBatchTimeout: w.StreamBatchTimeout,
		RetryBackoffMin: w.RetryBackoffMin, RetryBackoffMax: w.RetryBackoffMax, CommitInterval: w.CommitInterval,
		PartitionWatchInterval: w.PartitionWatchInterval,
		LogLevel:               s.LogLevel, LogFormat: s.LogFormat, OTLPEndpoint: s.OTLPEndpoint, TraceSampleRatio: s.TraceSampleRatio, PprofAddr: s.PprofAddr,
	}
}

var errNoAgentForHooks = errors.New("worker: hooks (WithStream, WithPersist, WithNotice, WithTransientErrors, WithResume…) need WithAgent or WithAgentFactory")
