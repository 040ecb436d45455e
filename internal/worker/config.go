package worker

import (
	"errors"
	"fmt"
	"time"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Config configures a Worker. The zero value of every field but Brokers
// means its documented default.
type Config struct {
	// Brokers are the Kafka bootstrap addresses. Required.
	Brokers []string
	// Topics are the topic names. Default: topic.NewNames(topic.DefaultPrefix).
	Topics topic.Names
	// GroupID is the consumer group. Default "turnpike-worker".
	GroupID string
	// Partitions is the partition count of topics created at start when
	// missing. Default topic.DefaultPartitions (12).
	Partitions int
	// WindowMessages is how many stored messages the model sees before the
	// new one. Default 20.
	WindowMessages int
	// MaxContentBytes bounds a request's content. Default
	// events.DefaultMaxContentBytes.
	MaxContentBytes int
	// AgentName names the agent in token events. Default "assistant".
	AgentName string
	// Instruction is the agent's system instruction. Default: none.
	Instruction string
	// StreamBatchTimeout is how long the stream writer waits to fill a batch.
	// Default 2ms: token latency matters more than batch size.
	StreamBatchTimeout time.Duration
	// RunTimeout bounds one generation. Default 10m.
	RunTimeout time.Duration
	// DrainTimeout is how long in-flight runs may finish after the worker
	// is told to stop or loses a partition; runs still going then are
	// aborted and their records re-delivered. Default 30s.
	DrainTimeout time.Duration
	// RetryBackoffMin and RetryBackoffMax bound the exponential backoff
	// between attempts at a record that failed for a retriable reason.
	// Defaults 100ms and 10s.
	RetryBackoffMin, RetryBackoffMax time.Duration
	// SessionTimeout of the consumer group. Default 10s.
	SessionTimeout time.Duration
	// PartitionWatchInterval is how often the requests topic's partition
	// count is checked: a change ends the consumer group's generation, and
	// the next one places records by the new count. Default 10s.
	PartitionWatchInterval time.Duration
	// Ordering is "key" (default): within a partition, requests of
	// different conversations run concurrently and those of one
	// conversation strictly in topic order; or "partition": one record at
	// a time per partition (the benchmark baseline).
	Ordering string
	// MaxInflight bounds the records fetched and not yet done, across all
	// partitions of this worker. Default 1024.
	MaxInflight int
	// ReadAhead bounds the records fetched and not yet done per partition.
	// Default 512.
	ReadAhead int
	// MaxAttempts bounds the runs of one record that fail transiently in
	// the model (rate limits, an unreachable model server); the record is
	// then dead-lettered and completes failed. Store and Kafka outages are
	// retried for as long as they last. Default 5.
	MaxAttempts int
	// CommitInterval is how often each partition commits its highest
	// contiguous completed offset, when it moved. Default 200ms.
	CommitInterval time.Duration
	// CompactTokens is the token budget of the model's window (estimated
	// as bytes/4 per message, plus 4): over it, the older messages are
	// condensed into a model-written summary (context compaction). Zero
	// (the default) turns compaction off.
	CompactTokens int
	// CompactKeep is how many of the newest stored messages compaction
	// keeps verbatim (rounded so that they start with a user message).
	// Default 6.
	CompactKeep int
	// AgentFile is the path of the agent configuration file
	// (TURNPIKE_AGENT_CONFIG; see AgentConfig). The service package loads
	// it into Deps.Agent; the Worker itself never reads it. Default: none.
	AgentFile string
}

// Orderings.
const (
	OrderingKey       = "key"
	OrderingPartition = "partition"
)

func (c *Config) setDefaults() {
	if c.Topics == (topic.Names{}) {
		c.Topics = topic.NewNames(topic.DefaultPrefix)
	}
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
		c.GroupID = "turnpike-worker"
	}
	if c.AgentName == "" {
		c.AgentName = "assistant"
	}
	if c.Ordering == "" {
		c.Ordering = OrderingKey
	}
	def(&c.MaxInflight, 1024)
	def(&c.CompactKeep, 6)
	def(&c.ReadAhead, 512)
	def(&c.MaxAttempts, 5)
	defDur(&c.CommitInterval, 200*time.Millisecond)
	def(&c.Partitions, topic.DefaultPartitions)
	def(&c.WindowMessages, 20)
	def(&c.MaxContentBytes, events.DefaultMaxContentBytes)
	defDur(&c.StreamBatchTimeout, 2*time.Millisecond)
	defDur(&c.RunTimeout, 10*time.Minute)
	defDur(&c.DrainTimeout, 30*time.Second)
	defDur(&c.RetryBackoffMin, 100*time.Millisecond)
	defDur(&c.RetryBackoffMax, 10*time.Second)
	defDur(&c.SessionTimeout, 10*time.Second)
	defDur(&c.PartitionWatchInterval, 10*time.Second)
}

// Validate reports every problem with c (after defaults are applied).
func (c Config) Validate() error {
	c.setDefaults()
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("worker: no Kafka brokers"))
	}
	if c.Partitions < 1 {
		errs = append(errs, fmt.Errorf("worker: Partitions %d < 1", c.Partitions))
	}
	if c.WindowMessages < 0 {
		errs = append(errs, fmt.Errorf("worker: WindowMessages %d < 0", c.WindowMessages))
	}
	if c.MaxContentBytes < 1 || c.MaxContentBytes > events.MaxRecordBytes {
		errs = append(errs, fmt.Errorf("worker: MaxContentBytes %d not in 1..%d", c.MaxContentBytes, events.MaxRecordBytes))
	}
	for name, d := range map[string]time.Duration{
		"StreamBatchTimeout": c.StreamBatchTimeout, "RunTimeout": c.RunTimeout, "DrainTimeout": c.DrainTimeout,
		"RetryBackoffMin": c.RetryBackoffMin, "RetryBackoffMax": c.RetryBackoffMax, "SessionTimeout": c.SessionTimeout,
		"PartitionWatchInterval": c.PartitionWatchInterval,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("worker: %s %v < 0", name, d))
		}
	}
	if c.Ordering != OrderingKey && c.Ordering != OrderingPartition {
		errs = append(errs, fmt.Errorf("worker: Ordering %q: want key or partition", c.Ordering))
	}
	for name, v := range map[string]int{"MaxInflight": c.MaxInflight, "ReadAhead": c.ReadAhead, "MaxAttempts": c.MaxAttempts} {
		if v < 1 {
			errs = append(errs, fmt.Errorf("worker: %s %d < 1", name, v))
		}
	}
	if c.CompactTokens < 0 {
		errs = append(errs, fmt.Errorf("worker: CompactTokens %d < 0", c.CompactTokens))
	}
	if c.CompactKeep < 0 {
		errs = append(errs, fmt.Errorf("worker: CompactKeep %d < 0", c.CompactKeep))
	}
	if c.CommitInterval < 0 {
		errs = append(errs, fmt.Errorf("worker: CommitInterval %v < 0", c.CommitInterval))
	}
	if c.RetryBackoffMax < c.RetryBackoffMin {
		errs = append(errs, fmt.Errorf("worker: RetryBackoffMax %v < RetryBackoffMin %v", c.RetryBackoffMax, c.RetryBackoffMin))
	}
	return errors.Join(errs...)
}

// BindFlags registers the worker's own flags (the shared ones are bound by
// the service package).
func (c *Config) BindFlags(set *flagenv.Set) {
	set.String(&c.GroupID, "group-id", "TURNPIKE_WORKER_GROUP", "turnpike-worker", "Kafka consumer group")
	set.Int(&c.WindowMessages, "window", "TURNPIKE_WINDOW_MESSAGES", 20, "stored messages the model sees before the new one")
	set.Int(&c.MaxContentBytes, "max-content-bytes", "TURNPIKE_MAX_CONTENT_BYTES", events.DefaultMaxContentBytes, "largest user message in bytes")
	set.String(&c.Instruction, "instruction", "TURNPIKE_INSTRUCTION", "", "system instruction of the agent")
	set.Duration(&c.StreamBatchTimeout, "stream-batch-timeout", "TURNPIKE_STREAM_BATCH_TIMEOUT", 2*time.Millisecond, "longest a stream event waits for a batch")
	set.Duration(&c.RunTimeout, "run-timeout", "TURNPIKE_RUN_TIMEOUT", 10*time.Minute, "longest one generation may run")
	set.Duration(&c.DrainTimeout, "drain-timeout", "TURNPIKE_DRAIN_TIMEOUT", 30*time.Second, "how long in-flight runs may finish on shutdown or revoke")
	set.String(&c.Ordering, "ordering", "TURNPIKE_ORDERING", OrderingKey, "key: conversations of a partition run concurrently, each in order; partition: one record at a time per partition")
	set.Int(&c.MaxInflight, "max-inflight", "TURNPIKE_MAX_INFLIGHT", 1024, "records fetched and not yet done, across partitions")
	set.Int(&c.ReadAhead, "read-ahead", "TURNPIKE_READ_AHEAD", 512, "records fetched and not yet done, per partition")
	set.Duration(&c.SessionTimeout, "session-timeout", "TURNPIKE_SESSION_TIMEOUT", 10*time.Second, "consumer group session timeout: how long a crashed worker's partitions wait")
	set.Duration(&c.PartitionWatchInterval, "partition-watch-interval", "TURNPIKE_PARTITION_WATCH_INTERVAL", 10*time.Second,
		"how often the requests topic's partition count is checked (a change rebalances the workers, which then place records by the new count)")
	set.Int(&c.MaxAttempts, "max-attempts", "TURNPIKE_MAX_ATTEMPTS", 5, "runs of a record failing transiently in the model before it is dead-lettered")
	set.Int(&c.CompactTokens, "compact-tokens", "TURNPIKE_COMPACT_TOKENS", 0,
		"token budget of the model's window (bytes/4): over it, older messages are condensed into a summary; 0: off")
	set.Int(&c.CompactKeep, "compact-keep", "TURNPIKE_COMPACT_KEEP", 6, "newest stored messages compaction keeps verbatim")
	set.String(&c.AgentFile, "agent-config", "TURNPIKE_AGENT_CONFIG", "",
		"agent configuration file (JSON): agents, sub-agents, models, tools, what is streamed and persisted")
}
