package worker

import (
	"context"
	"net"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// What the package's external tests reach of its insides.

// Deps are a consumer's collaborators (deps).
type Deps = deps

// Consumer is the worker without its process (consumer).
type Consumer = consumer

// NewConsumer is newConsumer: a worker on d's store and models, without
// the ops server, the MongoDB client or tracing of Worker.Run.
func NewConsumer(cfg Config, d Deps) (*Consumer, error) { return newConsumer(cfg, d) }

// AgentConfig is the agent configuration file (agentConfig).
type AgentConfig = agentConfig

// ParseAgentConfig and LoadAgentConfig read an agent configuration.
var (
	ParseAgentConfig = parseAgentConfig
	LoadAgentConfig  = loadAgentConfig
)

// The built-in tools' names.
const (
	ToolAskUser     = toolAskUser
	ToolCurrentTime = toolCurrentTime
)

// SetRequestsDial makes w's readers of the requests partitions dial their
// broker connections with dial. Call it before Run.
func SetRequestsDial(w *Consumer, dial func(ctx context.Context, network, address string) (net.Conn, error)) {
	w.requestsDial = dial
}

// SetCountBeforeJoin makes w believe it read n as the requests topic's
// partition count before it joined, as if the count changed around its
// first join. Call it before Run.
func SetCountBeforeJoin(w *Consumer, n int) { w.countBeforeJoin.Store(int64(n)) }

// The dead letters' header names.
const (
	HeaderDLQReason       = headerDLQReason
	HeaderDLQAttempts     = headerDLQAttempts
	HeaderSourceTopic     = headerSourceTopic
	HeaderSourcePartition = headerSourcePartition
	HeaderSourceOffset    = headerSourceOffset
)

// NewOwnerTokens returns the owner tokens of a fresh worker process's runs
// (ownerToken), by generation.
func NewOwnerTokens() func(gen int32) int64 { return (&consumer{}).ownerToken }

// SetJournalSweeps makes w sweep expired step journals at each value of
// ticks instead of every hour. Call it before Run.
func SetJournalSweeps(w *Consumer, ticks <-chan time.Time) { w.sweepTicks = ticks }

// GoOptions are a Go agent's options, as Deps.Go takes them.
func GoOptions(opts ...Option) *options { return collect(opts) }

// NewRunArtifacts is newArtifacts: the artifact store of one run of id.
func NewRunArtifacts(id events.Identity, svc history.ArtifactService) *Artifacts {
	return newArtifacts(id, svc)
}

// SweepClock is the clock of the artifact sweeps (a testenv.Clock).
type SweepClock = sweepClock

// SetArtifactSweepClock schedules w's artifact sweeps on c. Call it
// before Run.
func SetArtifactSweepClock(w *Consumer, c SweepClock) { w.sweepClock = c }
