package bridge

import (
	"context"
	"time"
	"unicode/utf8"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Sink receives the stream events of runs, in order. Emit returns once the
// event is durably accepted (for Kafka: acknowledged). The bridge calls Emit
// from one goroutine per run.
type Sink interface {
	Emit(ctx context.Context, id events.Identity, e events.Event) error
}

// Emitter numbers and timestamps the events of one run and sends them to a
// Sink. The bridge uses one per run; the worker uses one directly for
// requests that end without running (duplicates, rejections). It is not
// safe for concurrent use.
type Emitter struct {
	sink      Sink
	id        events.Identity
	requestID string
	runID     string
	now       func() time.Time
	seq       int64
}

// NewEmitter returns an emitter for one run. now may be nil (time.Now).
func NewEmitter(sink Sink, id events.Identity, requestID, runID string, now func() time.Time) *Emitter {
	if now == nil {
		now = time.Now
	}
	return &Emitter{sink: sink, id: id, requestID: requestID, runID: runID, now: now}
}

// Seq is the seq of the last event emitted (0 before the first).
func (e *Emitter) Seq() int64 { return e.seq }

func (e *Emitter) meta() events.Meta {
	e.seq++
	return events.Meta{
		Conversation: e.id.Conversation,
		RequestID:    e.requestID,
		RunID:        e.runID,
		Seq:          e.seq,
		TS:           e.now().UnixNano(),
	}
}

// Started emits run.started.
func (e *Emitter) Started(ctx context.Context) error {
	return e.StartedFrom(ctx, "")
}

// StartedFrom emits run.started of a run that starts from agent, a
// sub-agent the conversation was left with ("" for the root).
func (e *Emitter) StartedFrom(ctx context.Context, agent string) error {
	return e.sink.Emit(ctx, e.id, &events.RunStartedEvent{Meta: e.meta(), Agent: agent})
}

// Token emits one token event.
func (e *Emitter) Token(ctx context.Context, delta, agent, role string) error {
	return e.sink.Emit(ctx, e.id, &events.TokenEvent{Meta: e.meta(), Delta: delta, Agent: agent, Role: role})
}

// Notice emits an ephemeral notice.
func (e *Emitter) Notice(ctx context.Context, msg string) error {
	if len(msg) > events.MaxNoticeBytes {
		cut := events.MaxNoticeBytes
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut]
	}
	return e.sink.Emit(ctx, e.id, &events.NoticeEvent{Meta: e.meta(), Message: msg})
}

// Completed emits run.completed with status.
func (e *Emitter) Completed(ctx context.Context, status events.Status) error {
	return e.sink.Emit(ctx, e.id, &events.RunCompletedEvent{Meta: e.meta(), Status: status})
}

// CompletedWithUsage emits run.completed with status and the run's token
// usage (nil: none reported).
func (e *Emitter) CompletedWithUsage(ctx context.Context, status events.Status, usage *events.Usage) error {
	return e.sink.Emit(ctx, e.id, &events.RunCompletedEvent{Meta: e.meta(), Status: status, Usage: usage})
}

// Transfer emits agent.transfer: agent from handed over to agent to.
func (e *Emitter) Transfer(ctx context.Context, from, to string) error {
	return e.sink.Emit(ctx, e.id, &events.AgentTransferEvent{Meta: e.meta(),
		From: truncateText(from, events.MaxAgentBytes), To: truncateText(to, events.MaxAgentBytes)})
}

// Interrupted emits run.interrupted with what the run asks the user.
func (e *Emitter) Interrupted(ctx context.Context, in events.Interrupt) error {
	in.Agent = truncateText(in.Agent, events.MaxAgentBytes)
	in.Tool = truncateText(in.Tool, events.MaxAgentBytes)
	in.Question = truncateText(in.Question, events.MaxQuestionBytes)
	return e.sink.Emit(ctx, e.id, &events.RunInterruptedEvent{Meta: e.meta(), Interrupt: in})
}

// StateChanged emits state.changed: the keys of the conversation and the
// user scopes a committed turn set or deleted. Keys are listed in order,
// conversation first, up to events.MaxStateChangedKeys per scope and
// events.MaxStateChangedBytes in all; beyond, the event says Truncated.
func (e *Emitter) StateChanged(ctx context.Context, conversation, user []string) error {
	ev := &events.StateChangedEvent{Meta: e.meta()}
	budget := events.MaxStateChangedBytes
	take := func(keys []string) []string {
		var out []string
		for _, k := range keys {
			if len(out) == events.MaxStateChangedKeys || len(k) > budget {
				ev.Truncated = true
				break
			}
			out = append(out, k)
			budget -= len(k)
		}
		return out
	}
	ev.Conversation = take(conversation)
	ev.User = take(user)
	return e.sink.Emit(ctx, e.id, ev)
}

// ArtifactSaved emits artifact.saved: a version of an artifact the run's
// tools saved is published.
func (e *Emitter) ArtifactSaved(ctx context.Context, a events.ArtifactInfo) error {
	return e.sink.Emit(ctx, e.id, &events.ArtifactSavedEvent{Meta: e.meta(), Artifact: a})
}
