package worker

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/turnpike-dev/turnpike/internal/logging"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// Config is the worker's configuration: the settings of cmd/worker, one
// field per flag and TURNPIKE_* environment variable, each named in the
// field's comment with its default. LoadConfig reads them from a command
// line and the environment, DefaultConfig returns the defaults, and
// Validate reports every problem.
//
// A zero duration or count means its default, but for EchoDelay (0: no
// delay) and CompactTokens (0: off). The other fields mean what they say
// (an empty Addr serves nothing, a zero TraceSampleRatio samples no new
// trace), so start from DefaultConfig.
//
// cmd/worker also accepts -auth-secret (TURNPIKE_AUTH_SECRET), which it
// ignores: the worker verifies no token, and a command line shared with
// ingest and the push gateway still parses. A binary whose agent is
// written in Go (WithAgent, WithAgentFactory) has no -model, -echo-delay,
// -openai-base-url, -openai-api-key, -openai-model, -instruction or
// -agent-config: they configure the agent built without Go code.
type Config struct {
	// Brokers are the Kafka bootstrap addresses (-kafka-brokers,
	// TURNPIKE_KAFKA_BROKERS, comma-separated). Required.
	Brokers []string
	// MongoURI is the MongoDB connection string (-mongo-uri,
	// TURNPIKE_MONGO_URI). Required, unless WithStore gives the store.
	MongoURI string
	// MongoDB is the database (-mongo-db, TURNPIKE_MONGO_DB). Default
	// "turnpike".
	MongoDB string
	// MongoPool bounds the MongoDB client's connections, and so its
	// commands in flight (-mongo-pool, TURNPIKE_MONGO_POOL). Default 0:
	// the driver's 100.
	MongoPool int
	// TopicPrefix prefixes the Kafka topic names (-topic-prefix,
	// TURNPIKE_TOPIC_PREFIX). Default "turnpike.".
	TopicPrefix string
	// Partitions is the partition count of topics created at start
	// (-topic-partitions, TURNPIKE_PARTITIONS). Default 12.
	Partitions int
	// StreamPartitions is the partition count of the stream topic when
	// it is created at start (-stream-partitions,
	// TURNPIKE_STREAM_PARTITIONS). Default 0: Partitions. The stream
	// writer places events by the stream topic's own count, whatever it
	// is (docs/pushgw.md "Sizing partitions").
	StreamPartitions int
	// GroupID is the Kafka consumer group (-group-id,
	// TURNPIKE_WORKER_GROUP). Default "turnpike-worker".
	GroupID string
	// Addr serves /healthz, /readyz and /metrics (-addr,
	// TURNPIKE_WORKER_ADDR). Default ":8082"; "" serves nothing.
	Addr string

	// Model is the model of the agent configuration's agents and the
	// default compaction summarizer (-model, TURNPIKE_MODEL): "echo" or
	// "openai". Default "echo". An agent written in Go brings its own
	// models; it summarizes with WithSummarizer's, else with this one.
	Model string
	// EchoDelay is the echo model's per-token delay (-echo-delay,
	// TURNPIKE_ECHO_DELAY); 0: none. Default 20ms.
	EchoDelay time.Duration
	// OpenAIBaseURL, OpenAIAPIKey and OpenAIModel configure Model "openai"
	// (-openai-base-url, -openai-api-key, -openai-model;
	// TURNPIKE_OPENAI_BASE_URL, TURNPIKE_OPENAI_API_KEY,
	// TURNPIKE_OPENAI_MODEL). Default: none (OpenAI's base URL).
	OpenAIBaseURL, OpenAIAPIKey, OpenAIModel string
	// AgentFile is the agent configuration file (-agent-config,
	// TURNPIKE_AGENT_CONFIG), the way cmd/worker builds agents without Go
	// code. It must be empty with WithAgent or WithAgentFactory. Default:
	// none.
	AgentFile string
	// AgentName and Instruction describe the agent built without an agent
	// file or Go code (Instruction: -instruction, TURNPIKE_INSTRUCTION;
	// AgentName has no flag). Defaults "assistant" and none.
	AgentName, Instruction string

	// WindowMessages is how many stored messages the agent sees before
	// the new one (-window, TURNPIKE_WINDOW_MESSAGES). Default 20.
	WindowMessages int
	// MaxContentBytes bounds a request's content (-max-content-bytes,
	// TURNPIKE_MAX_CONTENT_BYTES). Default 32768.
	MaxContentBytes int
	// CompactTokens is the token budget of the agent's window (estimated
	// as bytes/4 per message, plus 4), over which the older messages are
	// condensed into a summary (-compact-tokens, TURNPIKE_COMPACT_TOKENS).
	// Default 0: off.
	CompactTokens int
	// CompactKeep is how many newest stored messages compaction keeps
	// verbatim, rounded so that they start with a user message
	// (-compact-keep, TURNPIKE_COMPACT_KEEP). Default 6.
	CompactKeep int

	// Memory gives the agent file's agents long-term memory: turns are
	// remembered, and its memory settings and search_memory work (-memory, TURNPIKE_MEMORY), in
	// the MongoDB collection "memories": "text" searches it with a text
	// index and $text (MongoDB), "terms" with the term scan (FerretDB:
	// the devstack's); "" (the default) is off. docs/api.md "Memory".
	// The service is opened on the worker's MongoDB when Run starts, and
	// only there: New refuses Memory with WithStore unless WithMemory
	// passes a service (which then replaces it), and NewStep (pkg/replay's
	// shadow runs included) never opens it.
	Memory string

	// HistoryV1 keeps the worker from starting turn format version 2 (an
	// answer of several agents stored as one assistant message per agent)
	// in a conversation (-history-v1, TURNPIKE_HISTORY_V1). True is for the
	// first phase of a rolling upgrade from a release before version 2
	// (docs/deploy.md), whose workers misnumber a conversation after a
	// version 2 turn: a conversation whose last turn is of version 1, or
	// that has none, then gets version 1 turns (the parts joined into one
	// message, under the last agent's name, as that release stored them);
	// one whose last turn is of version 2 stays in version 2. Default
	// false: version 2.
	HistoryV1 bool

	// JournalOff turns the step journal of durable runs off (-journal-off,
	// TURNPIKE_JOURNAL_OFF): every run of a request then runs its agent
	// from the start (at least once). Default false: the agents of the
	// agent file, and Go agents built with Durable, journal their steps
	// (DESIGN.md, "Durable runs").
	JournalOff bool
	// JournalDivergence is what a re-run does when its inputs differ from
	// its journal's (the agent's code or instruction changed, the window
	// differs): "live" drops the journal from the divergent step on and
	// runs live from there; "fail" fails the request (dead-lettered)
	// (-journal-divergence, TURNPIKE_JOURNAL_DIVERGENCE). Default "live".
	JournalDivergence string
	// JournalStepBytes bounds one journaled step (a model output, a tool
	// result); a larger one is not recorded and runs again if the request
	// does (-journal-step-bytes, TURNPIKE_JOURNAL_STEP_BYTES). Default
	// 262144.
	JournalStepBytes int
	// JournalBytes bounds a request's journal; a step that would pass it
	// is not recorded (-journal-bytes, TURNPIKE_JOURNAL_BYTES). Default
	// 4194304, at most history.MaxJournalBytes.
	JournalBytes int
	// JournalTTL is how long the journal of a request that never reaches a
	// durable end is kept after its last write (-journal-ttl,
	// TURNPIKE_JOURNAL_TTL). Default 24h.
	JournalTTL time.Duration
	// ArtifactSweepInterval is how often the worker drops the artifact
	// saves no committed turn holds (history.ArtifactService's
	// SweepArtifacts: staged saves of runs that persisted nothing, and
	// content a failed save left), when it has an artifact service
	// (-artifact-sweep-interval, TURNPIKE_ARTIFACT_SWEEP_INTERVAL);
	// negative: never. Every replica sweeps on its own schedule, and
	// sweeps at once are harmless: negative on all replicas but one is
	// enough. Default 1h.
	ArtifactSweepInterval time.Duration
	// ArtifactSweepAge is how old an uncommitted save must be to be swept
	// (-artifact-sweep-age, TURNPIKE_ARTIFACT_SWEEP_AGE). A run's saves
	// are staged while it runs and published after its commit, and a
	// redelivered request publishes its committed turn's saves again, so
	// the age must pass the longest run and any redelivery by far; a
	// durable run's re-run brings back the saves of its earlier attempts
	// (from the journal), so a save can be MaxAttempts × RunTimeout (plus
	// the backoffs) old when it is published: at least 1h and more than
	// MaxAttempts × RunTimeout + (MaxAttempts-1) × RetryBackoffMax (50m40s
	// with the defaults). A committed save whose staged save is gone at
	// publish is logged at error and counted in
	// turnpike_worker_artifacts_lost_total. Default 24h.
	ArtifactSweepAge time.Duration

	// Ordering is "key" (conversations of a partition run concurrently,
	// each strictly in topic order) or "partition" (one record at a time
	// per partition) (-ordering, TURNPIKE_ORDERING). Default "key".
	Ordering string
	// MaxInflight bounds the records running or queued across partitions
	// (-max-inflight, TURNPIKE_MAX_INFLIGHT); each partition may also hold
	// one record fetched and waiting for a slot. Default 1024.
	MaxInflight int
	// ReadAhead bounds them per partition (-read-ahead,
	// TURNPIKE_READ_AHEAD). Default 512.
	ReadAhead int
	// MaxAttempts bounds the runs of a record failing transiently in the
	// model (or in the agent factory) before it is dead-lettered
	// (-max-attempts, TURNPIKE_MAX_ATTEMPTS). Store and Kafka outages are
	// retried for as long as they last. Default 5.
	MaxAttempts int
	// RunTimeout bounds one run (-run-timeout, TURNPIKE_RUN_TIMEOUT).
	// Default 10m.
	RunTimeout time.Duration
	// DrainTimeout is how long in-flight runs may finish on shutdown or a
	// lost partition before they are aborted and re-delivered
	// (-drain-timeout, TURNPIKE_DRAIN_TIMEOUT). Default 30s.
	DrainTimeout time.Duration
	// SessionTimeout is the consumer group's session timeout
	// (-session-timeout, TURNPIKE_SESSION_TIMEOUT). Default 10s.
	SessionTimeout time.Duration
	// PartitionWatchInterval is how often the requests topic's partition
	// count is checked; a change rebalances the workers, which then place
	// records by the new count (-partition-watch-interval,
	// TURNPIKE_PARTITION_WATCH_INTERVAL). Default 10s.
	PartitionWatchInterval time.Duration
	// StreamBatchTimeout is the longest a stream event waits for a batch
	// (-stream-batch-timeout, TURNPIKE_STREAM_BATCH_TIMEOUT). Default 2ms.
	StreamBatchTimeout time.Duration
	// RetryBackoffMin and RetryBackoffMax bound the exponential backoff
	// between attempts (no flag). Defaults 100ms and 10s.
	RetryBackoffMin, RetryBackoffMax time.Duration
	// CommitInterval is how often each partition commits its highest
	// contiguous completed offset, when it moved (no flag). Default 200ms.
	CommitInterval time.Duration

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
	// (-trace-sample-ratio, TURNPIKE_TRACE_SAMPLE_RATIO); 0 samples none
	// (a caller's sampled trace is still continued). Default 1.
	TraceSampleRatio float64
	// PprofAddr serves net/http/pprof (-pprof-addr, TURNPIKE_PPROF_ADDR).
	// Default: off. Keep it on loopback or a private network.
	PprofAddr string
}

// Orderings of Config.Ordering.
const (
	orderingKey       = "key"
	orderingPartition = "partition"
)

// Defaults of the fields whose zero value is not their default.
const (
	defaultAddr        = ":8082"
	defaultGroupID     = "turnpike-worker"
	defaultAgentName   = "assistant"
	defaultMongoDB     = "turnpike"
	defaultModelKind   = "echo"
	defaultLogLevel    = "info"
	defaultLogFormat   = "json"
	defaultSampleRatio = 1
	// defaultJournalStepBytes is JournalStepBytes' default.
	defaultJournalStepBytes = 256 << 10
)

// DefaultConfig returns the configuration with every default and no
// brokers or MongoDB URI.
func DefaultConfig() Config {
	c := Config{
		MongoDB: defaultMongoDB, TopicPrefix: topic.DefaultPrefix, GroupID: defaultGroupID, Addr: defaultAddr,
		Model: defaultModelKind, EchoDelay: echo.DefaultDelay, AgentName: defaultAgentName, Ordering: orderingKey,
		LogLevel: defaultLogLevel, LogFormat: defaultLogFormat, TraceSampleRatio: defaultSampleRatio,
	}
	c.setDefaults()
	return c
}

// setDefaults fills the zero durations and counts (EchoDelay and
// CompactTokens aside), and the zero strings
// of the consumer's own settings (the group, the agent's name, the
// ordering), with their defaults.
func (c *Config) setDefaults() {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defDur := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	if c.GroupID == "" {
		c.GroupID = defaultGroupID
	}
	if c.AgentName == "" {
		c.AgentName = defaultAgentName
	}
	if c.Ordering == "" {
		c.Ordering = orderingKey
	}
	if c.JournalDivergence == "" {
		c.JournalDivergence = DivergenceLive
	}
	def(&c.JournalStepBytes, defaultJournalStepBytes)
	def(&c.JournalBytes, history.DefaultJournalBytes)
	defDur(&c.JournalTTL, history.DefaultJournalTTL)
	defDur(&c.ArtifactSweepInterval, defaultArtifactSweepInterval)
	defDur(&c.ArtifactSweepAge, defaultArtifactSweepAge)
	def(&c.Partitions, topic.DefaultPartitions)
	def(&c.WindowMessages, 20)
	def(&c.MaxContentBytes, events.DefaultMaxContentBytes)
	def(&c.CompactKeep, 6)
	def(&c.MaxInflight, 1024)
	def(&c.ReadAhead, 512)
	def(&c.MaxAttempts, 5)
	defDur(&c.StreamBatchTimeout, 2*time.Millisecond)
	defDur(&c.RunTimeout, 10*time.Minute)
	defDur(&c.DrainTimeout, 30*time.Second)
	defDur(&c.RetryBackoffMin, 100*time.Millisecond)
	defDur(&c.RetryBackoffMax, 10*time.Second)
	defDur(&c.SessionTimeout, 10*time.Second)
	defDur(&c.PartitionWatchInterval, 10*time.Second)
	defDur(&c.CommitInterval, 200*time.Millisecond)
}

// topics returns the topic names under the configured prefix.
func (c Config) topics() topic.Names { return topic.NewNames(c.TopicPrefix) }

// Validate reports every problem with c, those of its agent file
// included, joined.
func (c Config) Validate() error { return c.validate(true, false) }

// validate is Validate; needStore is false when the store is given
// (WithStore), goAgent true when the agent is written in Go.
func (c Config) validate(needStore, goAgent bool) error {
	errs := []error{c.validateConsumer()}
	if needStore && c.MongoURI == "" {
		errs = append(errs, errors.New("TURNPIKE_MONGO_URI is required"))
	}
	if needStore && c.MongoDB == "" {
		errs = append(errs, errors.New("TURNPIKE_MONGO_DB is empty"))
	}
	if _, err := memorySearch(c.Memory); err != nil {
		errs = append(errs, err)
	}
	if c.MongoPool < 0 {
		errs = append(errs, fmt.Errorf("TURNPIKE_MONGO_POOL %d: must not be negative", c.MongoPool))
	}
	switch c.Model {
	case providerEcho:
	case providerOpenAI:
		if c.OpenAIModel == "" {
			errs = append(errs, errors.New("TURNPIKE_OPENAI_MODEL is required with TURNPIKE_MODEL=openai"))
		}
	default:
		errs = append(errs, fmt.Errorf("TURNPIKE_MODEL %q: want echo or openai", c.Model))
	}
	errs = append(errs, logging.Check(c.LogLevel, c.LogFormat))
	if c.TraceSampleRatio < 0 || c.TraceSampleRatio > 1 {
		errs = append(errs, fmt.Errorf("TURNPIKE_TRACE_SAMPLE_RATIO %v: want 0..1", c.TraceSampleRatio))
	}
	if goAgent && c.AgentFile != "" {
		errs = append(errs, errAgentFileWithGoAgent)
	}
	if _, err := c.agentFile(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// errAgentFileWithGoAgent refuses an agent file beside an agent written
// in Go.
var errAgentFileWithGoAgent = errors.New("TURNPIKE_AGENT_CONFIG is set, but the worker runs an agent written in Go")

// validateConsumer reports the problems of the consumer's own settings
// (after their defaults are applied).
func (c Config) validateConsumer() error {
	c.setDefaults()
	errs := c.runErrors()
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("worker: no Kafka brokers (TURNPIKE_KAFKA_BROKERS)"))
	}
	if c.Partitions < 1 {
		errs = append(errs, fmt.Errorf("worker: Partitions %d < 1", c.Partitions))
	}
	if c.StreamPartitions < 0 {
		errs = append(errs, fmt.Errorf("worker: StreamPartitions %d < 0", c.StreamPartitions))
	}
	if c.MaxContentBytes < 1 || c.MaxContentBytes > events.MaxRecordBytes {
		errs = append(errs, fmt.Errorf("worker: MaxContentBytes %d not in 1..%d", c.MaxContentBytes, events.MaxRecordBytes))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"StreamBatchTimeout", c.StreamBatchTimeout}, {"DrainTimeout", c.DrainTimeout},
		{"RetryBackoffMin", c.RetryBackoffMin}, {"RetryBackoffMax", c.RetryBackoffMax}, {"SessionTimeout", c.SessionTimeout},
		{"PartitionWatchInterval", c.PartitionWatchInterval}, {"CommitInterval", c.CommitInterval},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("worker: %s %v < 0", d.name, d.v))
		}
	}
	if c.Ordering != orderingKey && c.Ordering != orderingPartition {
		errs = append(errs, fmt.Errorf("worker: Ordering %q: want key or partition", c.Ordering))
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"MaxInflight", c.MaxInflight}, {"ReadAhead", c.ReadAhead}, {"MaxAttempts", c.MaxAttempts}} {
		if n.v < 1 {
			errs = append(errs, fmt.Errorf("worker: %s %d < 1", n.name, n.v))
		}
	}
	if c.RetryBackoffMax < c.RetryBackoffMin {
		errs = append(errs, fmt.Errorf("worker: RetryBackoffMax %v < RetryBackoffMin %v", c.RetryBackoffMax, c.RetryBackoffMin))
	}
	// The sweep is the consumer's (a Step, such as pkg/replay's, sweeps
	// nothing and has no setting of its age).
	if floor := c.artifactSweepFloor(); c.ArtifactSweepAge < minArtifactSweepAge || c.ArtifactSweepAge <= floor {
		errs = append(errs, fmt.Errorf("worker: ArtifactSweepAge %v: want at least %v and more than MaxAttempts × RunTimeout + (MaxAttempts-1) × RetryBackoffMax (%v): a run's saves are staged until its commit, and a durable run's re-runs bring back the saves of its earlier attempts", c.ArtifactSweepAge, minArtifactSweepAge, floor))
	}
	return errors.Join(errs...)
}

// artifactSweepFloor is the oldest a save can be when it is published: a
// durable run's re-run brings back the saves of its earlier attempts (from
// the journal), so a save can be staged in the first of MaxAttempts runs
// of RunTimeout each, with the backoffs between them, before the commit
// that publishes it. ArtifactSweepAge must pass it.
func (c Config) artifactSweepFloor() time.Duration {
	n := time.Duration(max(c.MaxAttempts, 1))
	return n*c.RunTimeout + (n-1)*c.RetryBackoffMax
}

// agentFile loads the agent configuration file, if one is set.
func (c Config) agentFile() (*agentConfig, error) {
	if c.AgentFile == "" {
		return nil, nil
	}
	return loadAgentConfig(c.AgentFile)
}

// newLogger is the logger of LogLevel and LogFormat on w.
func (c Config) newLogger(w io.Writer) *slog.Logger {
	return logging.New(w, c.LogLevel, c.LogFormat)
}
