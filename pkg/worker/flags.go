package worker

import (
	"flag"
	"io"
	"os"
	"time"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// bind registers every setting of c on set, each with its flag, its
// environment variable and its default: the one place cmd/worker's
// settings are named. goAgent leaves out the settings of the agent built
// without Go code (the model, the instruction, the agent file), and
// noAddr the ops address. The defaults are DefaultConfig's.
func (c *Config) bind(set *flagenv.Set, goAgent, noAddr bool) {
	var authSecret string // cmd/worker accepts it (see Config) and reads no token
	set.List(&c.Brokers, "kafka-brokers", "TURNPIKE_KAFKA_BROKERS", nil, "Kafka bootstrap brokers")
	set.String(&c.MongoURI, "mongo-uri", "TURNPIKE_MONGO_URI", "", "MongoDB connection string")
	set.String(&c.MongoDB, "mongo-db", "TURNPIKE_MONGO_DB", defaultMongoDB, "MongoDB database")
	set.Int(&c.MongoPool, "mongo-pool", "TURNPIKE_MONGO_POOL", 0, "most connections (commands in flight) of the MongoDB client; 0: the driver's default, 100")
	set.String(&authSecret, "auth-secret", "TURNPIKE_AUTH_SECRET", "", "HS256 secret of bearer tokens (at least 32 bytes)")
	set.String(&c.TopicPrefix, "topic-prefix", "TURNPIKE_TOPIC_PREFIX", topic.DefaultPrefix, "prefix of the Kafka topic names")
	if !goAgent {
		set.String(&c.Model, "model", "TURNPIKE_MODEL", defaultModelKind, "model: echo or openai")
		set.Duration(&c.EchoDelay, "echo-delay", "TURNPIKE_ECHO_DELAY", echo.DefaultDelay, "per-token delay of the echo model")
		set.String(&c.OpenAIBaseURL, "openai-base-url", "TURNPIKE_OPENAI_BASE_URL", "", "base URL of an OpenAI-compatible API")
		set.String(&c.OpenAIAPIKey, "openai-api-key", "TURNPIKE_OPENAI_API_KEY", "", "API key of the OpenAI-compatible API")
		set.String(&c.OpenAIModel, "openai-model", "TURNPIKE_OPENAI_MODEL", "", "model name at the OpenAI-compatible API")
	}
	set.String(&c.LogLevel, "log-level", "TURNPIKE_LOG_LEVEL", defaultLogLevel, "log level: debug, info, warn, error")
	set.String(&c.LogFormat, "log-format", "TURNPIKE_LOG_FORMAT", defaultLogFormat, "log format: json or text")
	set.Int(&c.Partitions, "topic-partitions", "TURNPIKE_PARTITIONS", topic.DefaultPartitions, "partitions of topics created at start")
	set.Int(&c.StreamPartitions, "stream-partitions", "TURNPIKE_STREAM_PARTITIONS", 0, "partitions of the stream topic when created at start (0: -topic-partitions)")
	set.String(&c.OTLPEndpoint, "otlp-endpoint", "TURNPIKE_OTLP_ENDPOINT", "", "OTLP/HTTP endpoint of trace spans, e.g. http://otel-collector:4318 (off when empty)")
	set.Float(&c.TraceSampleRatio, "trace-sample-ratio", "TURNPIKE_TRACE_SAMPLE_RATIO", defaultSampleRatio, "share of new traces sampled, 0..1 (0: none)")
	set.String(&c.PprofAddr, "pprof-addr", "TURNPIKE_PPROF_ADDR", "", "serve net/http/pprof on this address (off when empty; keep it private)")

	if !noAddr {
		set.String(&c.Addr, "addr", "TURNPIKE_WORKER_ADDR", defaultAddr, "listen address of /healthz, /readyz and /metrics")
	}
	set.String(&c.GroupID, "group-id", "TURNPIKE_WORKER_GROUP", defaultGroupID, "Kafka consumer group")
	set.Int(&c.WindowMessages, "window", "TURNPIKE_WINDOW_MESSAGES", 20, "stored messages the model sees before the new one")
	set.Int(&c.MaxContentBytes, "max-content-bytes", "TURNPIKE_MAX_CONTENT_BYTES", events.DefaultMaxContentBytes, "largest user message in bytes")
	if !goAgent {
		set.String(&c.Instruction, "instruction", "TURNPIKE_INSTRUCTION", "", "system instruction of the agent")
	}
	set.Duration(&c.StreamBatchTimeout, "stream-batch-timeout", "TURNPIKE_STREAM_BATCH_TIMEOUT", 2*time.Millisecond, "longest a stream event waits for a batch")
	set.Duration(&c.RunTimeout, "run-timeout", "TURNPIKE_RUN_TIMEOUT", 10*time.Minute, "longest one generation may run")
	set.Duration(&c.DrainTimeout, "drain-timeout", "TURNPIKE_DRAIN_TIMEOUT", 30*time.Second, "how long in-flight runs may finish on shutdown or revoke")
	set.String(&c.Ordering, "ordering", "TURNPIKE_ORDERING", orderingKey, "key: conversations of a partition run concurrently, each in order; partition: one record at a time per partition")
	set.Int(&c.MaxInflight, "max-inflight", "TURNPIKE_MAX_INFLIGHT", 1024, "records running or queued, across partitions (each partition may also hold one fetched record waiting for a slot)")
	set.Int(&c.ReadAhead, "read-ahead", "TURNPIKE_READ_AHEAD", 512, "records fetched and not yet done, per partition")
	set.Duration(&c.SessionTimeout, "session-timeout", "TURNPIKE_SESSION_TIMEOUT", 10*time.Second, "consumer group session timeout: how long a crashed worker's partitions wait")
	set.Duration(&c.PartitionWatchInterval, "partition-watch-interval", "TURNPIKE_PARTITION_WATCH_INTERVAL", 10*time.Second,
		"how often the requests topic's partition count is checked (a change rebalances the workers, which then place records by the new count)")
	set.Int(&c.MaxAttempts, "max-attempts", "TURNPIKE_MAX_ATTEMPTS", 5, "runs of a record failing transiently in the model before it is dead-lettered")
	set.Int(&c.CompactTokens, "compact-tokens", "TURNPIKE_COMPACT_TOKENS", 0,
		"token budget of the model's window (bytes/4): over it, older messages are condensed into a summary; 0: off")
	set.Int(&c.CompactKeep, "compact-keep", "TURNPIKE_COMPACT_KEEP", 6, "newest stored messages compaction keeps verbatim")
	set.String(&c.Memory, "memory", "TURNPIKE_MEMORY", "",
		"long-term memory in MongoDB: text (a text index, MongoDB), terms (term scan, FerretDB) or empty: off")
	set.Bool(&c.HistoryV1, "history-v1", "TURNPIKE_HISTORY_V1", false,
		"start no conversation in history format version 2 (one message per agent): true only while workers of a release before it may still run (docs/deploy.md)")
	set.Bool(&c.JournalOff, "journal-off", "TURNPIKE_JOURNAL_OFF", false,
		"turn the step journal off: a request's re-run runs its agent from the start (tools again)")
	set.String(&c.JournalDivergence, "journal-divergence", "TURNPIKE_JOURNAL_DIVERGENCE", DivergenceLive,
		"a re-run whose inputs differ from its journal: live (drop the journal from there, run live) or fail (dead-letter the request)")
	set.Int(&c.JournalStepBytes, "journal-step-bytes", "TURNPIKE_JOURNAL_STEP_BYTES", defaultJournalStepBytes,
		"largest journaled step (a larger one runs again on a re-run)")
	set.Int(&c.JournalBytes, "journal-bytes", "TURNPIKE_JOURNAL_BYTES", history.DefaultJournalBytes,
		"largest journal of one request (a step past it runs again on a re-run)")
	set.Duration(&c.JournalTTL, "journal-ttl", "TURNPIKE_JOURNAL_TTL", history.DefaultJournalTTL,
		"how long the journal of a request that never ends is kept after its last write")
	set.Duration(&c.ArtifactSweepInterval, "artifact-sweep-interval", "TURNPIKE_ARTIFACT_SWEEP_INTERVAL", defaultArtifactSweepInterval,
		"how often uncommitted artifact saves are swept (negative: never; one replica is enough)")
	set.Duration(&c.ArtifactSweepAge, "artifact-sweep-age", "TURNPIKE_ARTIFACT_SWEEP_AGE", defaultArtifactSweepAge,
		"how old an uncommitted artifact save must be to be swept (at least 1h, more than -max-attempts × -run-timeout plus the retry backoffs: a durable re-run brings back earlier attempts' saves)")
	if !goAgent {
		set.String(&c.AgentFile, "agent-config", "TURNPIKE_AGENT_CONFIG", "",
			"agent configuration file (JSON): agents, sub-agents, models, tools, what is streamed and persisted")
	}
}

// LoadConfig reads the configuration from command-line arguments (as
// cmd/worker: -kafka-brokers, -window, …; -h lists them on stderr) and from
// TURNPIKE_* environment variables looked up with lookupEnv (os.LookupEnv,
// or nil for it). Flags win over the environment; what neither sets keeps
// DefaultConfig's value. A -h or -help returns flag.ErrHelp.
func LoadConfig(args []string, lookupEnv func(string) (string, bool)) (Config, error) {
	return loadConfig(args, lookupEnv, os.Stderr, false)
}

func loadConfig(args []string, lookupEnv func(string) (string, bool), stderr io.Writer, goAgent bool) (Config, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	c := DefaultConfig()
	set := flagenv.New(flag.NewFlagSet("worker", flag.ContinueOnError), lookupEnv)
	set.FlagSet().SetOutput(stderr)
	c.bind(set, goAgent, false)
	if err := set.Parse(args); err != nil {
		return Config{}, err
	}
	return c, nil
}

// RegisterFlags registers c's settings on fs, as cmd/worker's flags with
// TURNPIKE_* environment variables looked up with lookupEnv (os.LookupEnv
// when nil) as their defaults; c receives the values when fs is parsed.
// It is how a program that runs the worker beside other parts
// (pkg/devstack) puts the worker's settings on its own command line.
// Fields without a flag keep the values they have, and so does Addr: the
// ops address (-addr) is the program's own to serve. With WithAgent or
// WithAgentFactory among opts, the settings of the agent built without Go
// code are left out, as from a Go-agent binary's (see Config); opts are
// not otherwise used.
//
// A flag fs already has (a setting the worker shares with another part:
// the brokers, MongoDB, the topic prefix and partitions, the logs,
// tracing, pprof) is not registered twice: c's field starts with that
// flag's value and receives whatever it is set to. RegisterFlags reports
// such a flag if its type is not the worker's, an environment variable it
// cannot parse, conflicting options (WithAgent and WithAgentFactory, hooks
// without either), and TURNPIKE_AGENT_CONFIG set beside an agent written
// in Go.
func (c *Config) RegisterFlags(fs *flag.FlagSet, lookupEnv func(string) (string, bool), opts ...Option) error {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	set := flagenv.New(fs, lookupEnv)
	c.register(set, collect(opts), true)
	return set.Err()
}

// register is bind for a binary with the options o: their conflicts, and
// an agent file in the environment beside an agent written in Go, are
// errors of the command line (exit code 2).
func (c *Config) register(set *flagenv.Set, o *options, noAddr bool) {
	set.Fail(o.checkAgent())
	if v, ok := set.Lookup()("TURNPIKE_AGENT_CONFIG"); o.goAgent() && ok && v != "" {
		set.Fail(errAgentFileWithGoAgent)
	}
	c.bind(set, o.goAgent(), noAddr)
}
