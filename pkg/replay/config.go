package replay

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// Modes of a replay.
const (
	// modeRedrive re-publishes the selected records to the requests topic.
	modeRedrive = "redrive"
	// modeShadow runs the selected requests offline through an agent and
	// writes the results to the report only.
	modeShadow = "shadow"
)

// Topic shorthands of config.Topic.
const (
	topicRequests = "requests"
	topicDLQ      = "dlq"
)

// Defaults of config, as Bind sets them; those of the settings a shadow
// replay shares with the worker (the window, compaction, the timeouts, the
// content limit, the agent's name) are worker.DefaultConfig's.
const (
	defaultReport             = "replay-report.jsonl"
	defaultConcurrency        = 64
	defaultMaxInflight        = 4096
	defaultSample             = 10
	defaultCheckpointInterval = time.Second
	defaultRedriveBatch       = 500
)

// config configures a replay. Bind registers every field as a flag with its
// documented default; Validate reports every problem at once.
type config struct {
	// shared are the settings a replay has in common with the other
	// commands: brokers, MongoDB (the live store: redrive looks decisions
	// up there; shadow never opens it), topic prefix, model, logs.
	shared

	// Mode is modeRedrive or modeShadow. Required.
	Mode string

	// Topic is the topic to read: "requests" (default) or "dlq" under the
	// topic prefix, or any other full topic name.
	Topic string
	// Partitions limits the selection to these partitions. Default: all.
	Partitions []int
	// StartOffset (inclusive) and EndOffset (exclusive) bound the offsets
	// read in every selected partition. -1 (the default): the partition's
	// first retained offset and its end when the replay starts.
	StartOffset, EndOffset int64
	// Since (inclusive) and Until (exclusive) bound the records by
	// timestamp, through Kafka's offset-for-time lookup: RFC 3339 times or
	// Go durations counted back from now ("2h"). Default: unbounded.
	Since, Until string
	// Tenant, User and Conversation keep only the records whose key has
	// them. Default: every record.
	Tenant, User, Conversation string

	// DryRun lists what would be replayed (counts per partition and Sample
	// records) and changes nothing.
	DryRun bool
	// Sample is how many records a dry run shows. Default 10.
	Sample int

	// Report is the JSONL report, one line per replayed record. Default
	// defaultReport. An existing report is only appended to with Resume.
	Report string
	// Checkpoint is the checkpoint file. Default: Report + ".checkpoint".
	Checkpoint string
	// CheckpointInterval is how often the checkpoint is written while the
	// replay runs (and once more at the end). Default 1s.
	CheckpointInterval time.Duration
	// Resume continues the replay of an existing checkpoint, which must be
	// for the same selection.
	Resume bool
	// ReplayID names this replay in the replay headers and the checkpoint.
	// Default: generated (rp-<time>-<random>).
	ReplayID string

	// RerunFailed (redrive): a request whose recorded outcome is failed is
	// re-published under a fresh deterministic id (<id>-rd<k>), so that it
	// runs again; without it such requests are skipped.
	RerunFailed bool
	// RedriveBatch bounds the records of one produce call. Default 500.
	RedriveBatch int
	// MaxContentBytes is the content limit records are decoded with (the
	// worker's). Default events.DefaultMaxContentBytes.
	MaxContentBytes int

	// Concurrency (shadow) bounds the conversations running at once.
	// Default 64.
	Concurrency int
	// MaxInflight (shadow) bounds the records read and not yet done.
	// Default 4096.
	MaxInflight int
	// WindowMessages (shadow) is how many stored messages the model sees
	// before the new one, as in the worker. Default 20.
	WindowMessages int
	// CompactTokens and CompactKeep (shadow) are the worker's compaction
	// settings (worker.Config): over CompactTokens, the window's older
	// messages are condensed into a summary, the newest CompactKeep kept.
	// Defaults 0 (off) and 6.
	CompactTokens, CompactKeep int
	// Agent (shadow) is the agent implementation: agentADK (default, the
	// worker's) or agentDirect (the model streamed directly; no tools).
	Agent string
	// AgentName and Instruction (shadow) configure the agent, as in the
	// worker. Defaults "assistant" and none.
	AgentName, Instruction string
	// AgentFile (shadow) is an agent configuration file, as the worker's
	// TURNPIKE_AGENT_CONFIG: its agents, models and tools run instead of
	// one agent on Model (connect builds it; needs Agent agentADK).
	AgentFile string
	// ShadowMongoDB (shadow) keeps the rebuilt histories in this MongoDB
	// database (on the Shared MongoURI), which must not be the live one.
	// Default: in memory.
	ShadowMongoDB string
	// RunTimeout (shadow) bounds one generation. Default 10m.
	RunTimeout time.Duration
	// DrainTimeout (shadow) is how long running requests may finish after
	// an interrupt before they are abandoned (and replayed on resume).
	// Default 30s.
	DrainTimeout time.Duration

	// MeasureRaw reads the selection once with a plain kafka-go reader
	// before the replay, and reports the replay's rate as a ratio to it.
	MeasureRaw bool

	// ProgressInterval is the period of the plain progress lines (without
	// a TTY). Default 5s.
	ProgressInterval time.Duration
}

// Bind registers the flags of c, the shared ones included.
func (c *config) Bind(set *flagenv.Set) {
	// A replay verifies no token, creates no topic, exports no trace and
	// serves nothing: those shared settings would only mislead in -h.
	c.shared.bind(set)
	w := worker.DefaultConfig()
	set.String(&c.Mode, "mode", "", "", "redrive (re-publish to the requests topic) or shadow (run offline, report only)")
	set.String(&c.Topic, "topic", "", topicRequests, `topic to read: "requests", "dlq" (under the topic prefix), or a full topic name`)
	set.FlagSet().Func("partitions", "partitions to read, comma-separated (default: all)", func(v string) error {
		ps, err := parsePartitions(v)
		c.Partitions = ps
		return err
	})
	set.FlagSet().Int64Var(&c.StartOffset, "start-offset", -1, "first offset to read in each partition (default: the first retained)")
	set.FlagSet().Int64Var(&c.EndOffset, "end-offset", -1, "offset to stop before in each partition (default: the end when the replay starts)")
	set.String(&c.Since, "since", "", "", `records from this time on: RFC 3339 or a duration back from now ("2h")`)
	set.String(&c.Until, "until", "", "", `records before this time: RFC 3339 or a duration back from now`)
	set.String(&c.Tenant, "tenant", "", "", "only records of this tenant")
	set.String(&c.User, "user", "", "", "only records of this user")
	set.String(&c.Conversation, "conversation", "", "", "only records of this conversation")
	set.Bool(&c.DryRun, "dry-run", "", false, "list what would be replayed and change nothing")
	set.Int(&c.Sample, "sample", "", defaultSample, "records a dry run shows")
	set.String(&c.Report, "report", "", defaultReport, "JSONL report, one line per replayed record")
	set.String(&c.Checkpoint, "checkpoint", "", "", "checkpoint file (default: <report>.checkpoint)")
	set.Duration(&c.CheckpointInterval, "checkpoint-interval", "", defaultCheckpointInterval, "how often the checkpoint is written")
	set.Bool(&c.Resume, "resume", "", false, "continue the replay of the checkpoint")
	set.String(&c.ReplayID, "replay-id", "", "", "id of this replay (default: generated)")
	set.Bool(&c.RerunFailed, "rerun-failed", "", false, "redrive: re-run requests recorded failed under a fresh id <id>-rd<k> (default: skip them)")
	set.Int(&c.RedriveBatch, "redrive-batch", "", defaultRedriveBatch, "redrive: records per produce call")
	set.Int(&c.MaxContentBytes, "max-content-bytes", "TURNPIKE_MAX_CONTENT_BYTES", w.MaxContentBytes, "largest user message in bytes (the worker's)")
	set.Int(&c.Concurrency, "concurrency", "", defaultConcurrency, "shadow: conversations running at once")
	set.Int(&c.MaxInflight, "max-inflight", "", defaultMaxInflight, "shadow: records read and not yet done")
	set.Int(&c.WindowMessages, "window", "TURNPIKE_WINDOW_MESSAGES", w.WindowMessages, "shadow: stored messages the model sees before the new one")
	set.Int(&c.CompactTokens, "compact-tokens", "TURNPIKE_COMPACT_TOKENS", 0,
		"shadow: token budget of the model's window (bytes/4), as the worker's: over it, older messages are condensed into a summary; 0: off")
	set.Int(&c.CompactKeep, "compact-keep", "TURNPIKE_COMPACT_KEEP", w.CompactKeep, "shadow: newest stored messages compaction keeps verbatim")
	set.String(&c.Agent, "agent", "", agentADK, "shadow: adk (the worker's eino agent) or direct (the model streamed directly, no tools; faster)")
	set.String(&c.Instruction, "instruction", "TURNPIKE_INSTRUCTION", "", "shadow: system instruction of the agent")
	set.String(&c.AgentFile, "agent-config", "TURNPIKE_AGENT_CONFIG", "",
		"shadow: agent configuration file to run, as the worker does (agents, sub-agents, models, tools); default: one agent on -model")
	set.String(&c.ShadowMongoDB, "shadow-mongo-db", "", "", "shadow: keep the rebuilt histories in this MongoDB database (never the live one; default: in memory)")
	set.Duration(&c.RunTimeout, "run-timeout", "TURNPIKE_RUN_TIMEOUT", w.RunTimeout, "shadow: longest one generation may run")
	set.Duration(&c.DrainTimeout, "drain-timeout", "TURNPIKE_DRAIN_TIMEOUT", w.DrainTimeout, "shadow: how long running requests may finish after an interrupt")
	set.Bool(&c.MeasureRaw, "measure-raw", "", false, "read the selection raw first and report the replay's rate as a ratio to it")
	set.Duration(&c.ProgressInterval, "progress-interval", "", 5*time.Second, "period of the progress lines without a terminal")
}

// setDefaults fills the zero fields that have a default.
func (c *config) setDefaults() {
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
	w := worker.DefaultConfig()
	if c.Topic == "" {
		c.Topic = topicRequests
	}
	if c.TopicPrefix == "" {
		c.TopicPrefix = w.TopicPrefix
	}
	if c.Report == "" {
		c.Report = defaultReport
	}
	if c.Checkpoint == "" {
		c.Checkpoint = c.Report + ".checkpoint"
	}
	if c.AgentName == "" {
		c.AgentName = w.AgentName
	}
	if c.Agent == "" {
		c.Agent = agentADK
	}
	def(&c.Sample, defaultSample)
	def(&c.RedriveBatch, defaultRedriveBatch)
	def(&c.MaxContentBytes, w.MaxContentBytes)
	def(&c.Concurrency, defaultConcurrency)
	def(&c.MaxInflight, defaultMaxInflight)
	def(&c.WindowMessages, w.WindowMessages)
	def(&c.CompactKeep, w.CompactKeep)
	defDur(&c.CheckpointInterval, defaultCheckpointInterval)
	defDur(&c.RunTimeout, w.RunTimeout)
	defDur(&c.DrainTimeout, w.DrainTimeout)
	defDur(&c.ProgressInterval, 5*time.Second)
}

// Validate reports every problem of c (after defaults), joined.
func (c config) Validate() error {
	c.setDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch c.Mode {
	case modeRedrive, modeShadow:
	case "":
		bad("mode: required: redrive or shadow")
	default:
		bad("mode %q: want redrive or shadow", c.Mode)
	}
	if len(c.Brokers) == 0 {
		bad("no Kafka brokers: set -kafka-brokers or TURNPIKE_KAFKA_BROKERS")
	}
	for _, p := range c.Partitions {
		if p < 0 {
			bad("partition %d: must be >= 0", p)
		}
	}
	if c.StartOffset < -1 {
		bad("start offset %d: must be >= 0", c.StartOffset)
	}
	if c.EndOffset < -1 {
		bad("end offset %d: must be >= 0", c.EndOffset)
	}
	if c.StartOffset >= 0 && c.EndOffset >= 0 && c.StartOffset > c.EndOffset {
		bad("offset range: start %d is after end %d", c.StartOffset, c.EndOffset)
	}
	now := time.Now()
	since, err1 := parseTime(c.Since, now)
	until, err2 := parseTime(c.Until, now)
	if err1 != nil {
		bad("since: %w", err1)
	}
	if err2 != nil {
		bad("until: %w", err2)
	}
	if err1 == nil && err2 == nil && !since.IsZero() && !until.IsZero() && since.After(until) {
		bad("time range: since %s is after until %s", since.Format(time.RFC3339), until.Format(time.RFC3339))
	}
	for what, v := range map[string]string{"tenant": c.Tenant, "user": c.User, "conversation": c.Conversation, "replay id": c.ReplayID} {
		if v != "" {
			if err := events.ValidateID(what, v); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if c.ReplayID != "" && len(c.ReplayID) > 64 {
		bad("replay id: %d bytes, at most 64", len(c.ReplayID))
	}
	for name, v := range map[string]int{"sample": c.Sample, "redrive batch": c.RedriveBatch, "concurrency": c.Concurrency,
		"max inflight": c.MaxInflight, "max content bytes": c.MaxContentBytes} {
		if v < 1 {
			bad("%s: %d, want at least 1", name, v)
		}
	}
	if c.WindowMessages < 0 {
		bad("window: %d, want >= 0", c.WindowMessages)
	}
	if c.CompactTokens < 0 {
		bad("compact tokens: %d, want >= 0", c.CompactTokens)
	}
	if c.CompactKeep < 0 {
		bad("compact keep: %d, want >= 0", c.CompactKeep)
	}
	for name, d := range map[string]time.Duration{"checkpoint interval": c.CheckpointInterval, "run timeout": c.RunTimeout,
		"drain timeout": c.DrainTimeout, "progress interval": c.ProgressInterval} {
		if d < 0 {
			bad("%s: %v, want >= 0", name, d)
		}
	}
	if c.Mode == modeShadow {
		errs = append(errs, c.validateShadow()...)
	}
	if c.Mode != modeRedrive && c.RerunFailed {
		bad("rerun-failed applies to redrive only")
	}
	if c.Report == c.Checkpoint {
		bad("report and checkpoint are the same file %q", c.Report)
	}
	return errors.Join(errs...)
}

func (c config) validateShadow() []error {
	var errs []error
	if c.Agent != agentADK && c.Agent != agentDirect {
		errs = append(errs, fmt.Errorf("agent %q: want adk or direct", c.Agent))
	}
	if c.AgentFile != "" {
		if c.Agent == agentDirect {
			errs = append(errs, errors.New("agent direct cannot run an agent configuration file (tools, sub-agents): use -agent adk"))
		}
	}
	if c.ShadowMongoDB == "" {
		return errs
	}
	if c.MongoURI == "" {
		errs = append(errs, errors.New("shadow-mongo-db needs a MongoDB: set -mongo-uri or TURNPIKE_MONGO_URI"))
	}
	if c.ShadowMongoDB == c.MongoDB {
		errs = append(errs, fmt.Errorf("shadow-mongo-db %q is the live database (TURNPIKE_MONGO_DB): shadow never writes live history; choose another name", c.ShadowMongoDB))
	}
	return errs
}

// WorkerConfig is the worker configuration of the run step a shadow
// replay runs: the model, the agent file, the agent's name and
// instruction, the window, compaction, the run timeout and the content
// limit, as the worker reads them.
func (c config) WorkerConfig() worker.Config {
	c.setDefaults()
	w := worker.DefaultConfig()
	w.Model, w.EchoDelay = c.Model, c.EchoDelay
	w.OpenAIBaseURL, w.OpenAIAPIKey, w.OpenAIModel = c.OpenAIBaseURL, c.OpenAIAPIKey, c.OpenAIModel
	w.AgentFile, w.AgentName, w.Instruction = c.AgentFile, c.AgentName, c.Instruction
	w.WindowMessages, w.RunTimeout, w.MaxContentBytes = c.WindowMessages, c.RunTimeout, c.MaxContentBytes
	w.CompactTokens, w.CompactKeep = c.CompactTokens, c.CompactKeep
	w.LogLevel, w.LogFormat = c.LogLevel, c.LogFormat
	return w
}

// parsePartitions parses "0,3,5".
func parsePartitions(v string) ([]int, error) {
	var out []int
	for _, s := range flagenv.SplitList(v) {
		p, err := strconv.Atoi(s)
		if err != nil || p < 0 {
			return nil, fmt.Errorf("partition %q: want a number >= 0", s)
		}
		out = append(out, p)
	}
	return out, nil
}

// parseTime parses an RFC 3339 time or a duration back from now; "" is the
// zero time (unbounded).
func parseTime(v string, now time.Time) (time.Time, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%q: a duration back from now must be positive", v)
		}
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time (2026-11-30T10:00:00Z) or a duration back from now (2h)", v)
}
