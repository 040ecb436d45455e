package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Role is who wrote a message.
type Role string

// Roles of persisted messages. Tool-call messages are never persisted.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// Message is one persisted message of a conversation.
type Message struct {
	// Seq numbers the messages of a conversation 1, 2, 3 …, with no gap:
	// a turn holds its user message, then one assistant message per part
	// of its answer (Turn.Parts), so a turn holds two messages or more.
	Seq       int64
	Role      Role
	Content   string
	RequestID string
	// Agent is the agent that wrote an assistant message ("" for user messages).
	Agent     string
	CreatedAt time.Time
	// Status is set on assistant messages only: complete, incomplete,
	// cancelled or interrupted. It is the run's, the same on every
	// assistant message of a turn.
	Status events.Status
	// Usage is the token usage of the run, when the model reported it. It
	// is set on the turn's last assistant message only.
	Usage *events.Usage
	// Interrupt is set on the last assistant message of an interrupted
	// turn: what the run asked the user.
	Interrupt *Interrupt
}

// Interrupt is what an interrupted answer waits for: the question to the
// user, and where the run resumes with the answer.
type Interrupt struct {
	// Agent and Tool are the agent and tool that interrupted (Tool is ""
	// when the agent itself did).
	Agent, Tool string
	// Question is shown to the user.
	Question string
	// Targets are the interrupt points (eino interrupt ids) that receive
	// the user's answer when the run resumes.
	Targets []string
}

// Maximum sizes of an Interrupt's parts.
const (
	maxInterruptTargets     = 16
	maxInterruptTargetBytes = 1 << 10
)

func (in *Interrupt) validate() error {
	var errs []error
	if len(in.Agent) > events.MaxAgentBytes || len(in.Tool) > events.MaxAgentBytes {
		errs = append(errs, fmt.Errorf("%w interrupt: agent or tool over %d bytes", events.ErrInvalid, events.MaxAgentBytes))
	}
	if len(in.Question) > events.MaxQuestionBytes {
		errs = append(errs, fmt.Errorf("%w interrupt: question over %d bytes", events.ErrInvalid, events.MaxQuestionBytes))
	}
	if len(in.Targets) == 0 || len(in.Targets) > maxInterruptTargets {
		errs = append(errs, fmt.Errorf("%w interrupt: %d targets, want 1..%d", events.ErrInvalid, len(in.Targets), maxInterruptTargets))
	}
	for _, t := range in.Targets {
		if t == "" || len(t) > maxInterruptTargetBytes {
			errs = append(errs, fmt.Errorf("%w interrupt: target of %d bytes, want 1..%d", events.ErrInvalid, len(t), maxInterruptTargetBytes))
		}
	}
	return errors.Join(errs...)
}

// Incomplete reports whether an assistant message is anything but complete.
func (m Message) Incomplete() bool {
	return m.Role == RoleAssistant && m.Status != events.StatusComplete
}

// Part is one agent's contiguous stretch of an answer: the text one agent
// said before another agent spoke (or the answer ended).
type Part struct {
	Agent string
	Text  string
}

// MaxParts bounds the parts of one answer (Turn.Parts): a turn holds at
// most MaxParts+1 messages. The bridge ends an answer incomplete rather
// than start a part beyond it.
const MaxParts = 64

// Turn is what Commit persists: one user message and the assistant's
// answer, one assistant message per part of it.
type Turn struct {
	RequestID string
	// User is the user message, verbatim.
	User string
	// UserAt is when the user message was received.
	UserAt time.Time
	// Answer and Agent are an answer of one part: the assistant text and
	// the agent that wrote it. Answer is never empty (no-dangling-user),
	// except for an interrupted answer: there the question in Interrupt is
	// the assistant's content. Set either Answer and Agent or Parts.
	Answer string
	Agent  string
	// Parts, when set, is the answer of several agents, in order: each
	// part becomes an assistant message of its own, with its agent's name,
	// so no message ever holds two agents' text. Every part has text; at
	// most MaxParts of them; Answer and Agent must be empty. The whole
	// turn is one document, so the parts together, with the rest of the
	// turn, must fit in MongoDB's 16 MiB.
	Parts []Part
	// Status is complete, incomplete, cancelled or interrupted.
	Status      events.Status
	CommittedAt time.Time
	// Usage is the run's token usage, if the model reported it.
	Usage *events.Usage
	// Interrupt is required with status interrupted and allowed only there.
	Interrupt *Interrupt
	// KeepV1 is for a rolling upgrade from a release before parts (see
	// docs/deploy.md), while workers of that release may still commit
	// turns: when the conversation's last turn is of format version 1, or
	// it has none, the turn is written in version 1, as that release
	// wrote it: one assistant message, the parts' text joined, under the
	// last part's agent (seqs 2n-1 and 2n, which that release counts
	// too). A conversation whose last turn is of version 2 goes on in
	// version 2 whatever KeepV1 says (this release reads and numbers
	// both; only the older one would misnumber after it). The decision
	// reads nothing more than the commit does.
	KeepV1 bool
	// Source, when set, is the request's record: Commit refuses a turn
	// whose record is older than the one of the conversation's last turn
	// (ErrFenced), so a worker that lost its partition (a zombie) cannot
	// persist out of order.
	Source *Source
	// State, when set, is the run's change of the conversation's state and
	// the agent it leaves the conversation with: the turn keeps the
	// conversation's state after it (State.Conversation applied to the
	// state of the turn it follows), the agent, and the user and tenant
	// changes, which Commit then rolls forward (see StateChange).
	State *StateChange
	// Artifacts, when set, is the manifest of the run's artifact saves:
	// the tokens of the versions staged by ArtifactService.Stage. The
	// turn keeps it in its one document, so the saves commit with the
	// turn (atomically, exactly once); ArtifactService.Publish makes them
	// readable after the commit (see docs/api.md "Artifacts").
	Artifacts []string

	// tip, set by Pending.Start, is the conversation's newest turn when
	// the request started: the turn the commit expects to follow.
	tip *tip
}

// Source is the coordinates of a request record in the requests topic.
type Source struct {
	Topic     string
	Partition int
	Offset    int64
	// Time is the record's timestamp. A record at a lower offset of the
	// same partition but with a later time is from a recreated topic, whose
	// offsets started again, and is not fenced.
	Time time.Time
}

// Fences reports whether a turn from src may not follow a turn from last:
// same topic and partition, a lower offset, and no later timestamp.
func (src *Source) Fences(last *Source) bool {
	if src == nil || last == nil || src.Topic != last.Topic || src.Partition != last.Partition {
		return false
	}
	return src.Offset < last.Offset && !src.Time.After(last.Time)
}

// Validate checks that t can be persisted. Every error wraps
// events.ErrInvalid (a permanent failure: retrying cannot help); an empty
// answer also wraps ErrEmptyAnswer.
func (t Turn) Validate() error {
	var errs []error
	if err := events.ValidateID("request_id", t.RequestID); err != nil {
		errs = append(errs, err)
	}
	if t.User == "" {
		errs = append(errs, fmt.Errorf("%w turn: empty user message", events.ErrInvalid))
	}
	switch {
	case len(t.Parts) > 0 && (t.Answer != "" || t.Agent != ""):
		errs = append(errs, fmt.Errorf("%w turn: both parts and an answer or agent", events.ErrInvalid))
	case len(t.Parts) > MaxParts:
		errs = append(errs, fmt.Errorf("%w turn: %d parts, at most %d", events.ErrInvalid, len(t.Parts), MaxParts))
	case len(t.Parts) == 0 && t.Answer == "" && t.Status != events.StatusInterrupted:
		errs = append(errs, fmt.Errorf("%w turn: %w", events.ErrInvalid, ErrEmptyAnswer))
	}
	for i, p := range t.Parts {
		if p.Text == "" {
			errs = append(errs, fmt.Errorf("%w turn: part %d has no text", events.ErrInvalid, i))
		}
	}
	switch {
	case t.Status == events.StatusInterrupted && t.Interrupt == nil:
		errs = append(errs, fmt.Errorf("%w turn: status interrupted without an interrupt", events.ErrInvalid))
	case t.Status != events.StatusInterrupted && t.Interrupt != nil:
		errs = append(errs, fmt.Errorf("%w turn: an interrupt with status %q", events.ErrInvalid, truncate(string(t.Status), 32)))
	case t.Interrupt != nil:
		errs = append(errs, t.Interrupt.validate())
	}
	if u := t.Usage; u != nil && (u.PromptTokens < 0 || u.CompletionTokens < 0 || u.TotalTokens < 0) {
		errs = append(errs, fmt.Errorf("%w turn: negative token usage", events.ErrInvalid))
	}
	if t.Source != nil && t.Source.Topic == "" {
		errs = append(errs, fmt.Errorf("%w turn: source without topic", events.ErrInvalid))
	}
	if err := t.State.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := validateManifest(t.Artifacts); err != nil {
		errs = append(errs, err)
	}
	if !t.Status.Persisted() {
		errs = append(errs, fmt.Errorf("%w turn: status %q: must be complete, incomplete, cancelled or interrupted", events.ErrInvalid, truncate(string(t.Status), 32)))
	}
	return errors.Join(errs...)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Committed reports where a turn landed.
type Committed struct {
	// N is the turn number (1, 2, 3 … in the conversation). Its messages'
	// seqs follow those of turn N-1: 2N-1 and 2N only while every turn
	// so far had one part.
	N      int64
	Status events.Status
	// Duplicate is true when the request id had already been committed: the
	// existing turn is reported and nothing new was written.
	Duplicate bool
	// Artifacts is the number of artifact saves the turn's manifest holds
	// (Turn.Artifacts; 0 without a turn). A store that is a
	// ManifestReader must report it, on a duplicate Commit, Lookup and a
	// decided Start too (historytest.Artifacts checks it): the worker reads
	// the manifest to publish again only when it is above 0, so a store
	// that leaves it 0 silently skips re-publishing after a crash.
	Artifacts int
}

// Page is one page of a conversation's messages, oldest first.
type Page struct {
	Messages []Message
	// NextBefore is the seq to pass as before for the next older page; 0
	// when there is none.
	NextBefore int64
}

// ErrNotFound is returned for a conversation that does not exist for the
// given identity (including one that exists only for another identity).
var ErrNotFound = errors.New("not found")

// ErrFenced is returned by Commit for a turn whose request record is older
// than the record of the conversation's last turn: a newer request was
// committed meanwhile, by a worker that took the partition over. Nothing is
// written.
var ErrFenced = errors.New("fenced: a newer request of the conversation is already committed")

// ErrEmptyAnswer is returned when a turn (or a Pending commit) has no
// assistant content: nothing is persisted without it, not even the user
// message.
var ErrEmptyAnswer = errors.New("empty answer (nothing is persisted without assistant content)")

// Store keeps conversations, bound to the identity triple. Every method is
// safe for concurrent use. Implementations: MongoStore (MongoDB and
// FerretDB) and MemoryStore; historytest holds the conformance suite.
type Store interface {
	// Window returns the last n messages of the conversation, oldest first.
	// A conversation with no turns yields an empty window, not an error.
	Window(ctx context.Context, id events.Identity, n int) ([]Message, error)
	// Commit persists a turn atomically: all its messages or none. It is
	// idempotent per request id: committing the same request id again
	// writes nothing and reports the existing turn with Duplicate set.
	Commit(ctx context.Context, id events.Identity, t Turn) (Committed, error)
	// Lookup reports the committed turn or the recorded outcome of a
	// request id, if any. For an outcome without a turn, N is 0.
	Lookup(ctx context.Context, id events.Identity, requestID string) (Committed, bool, error)
	// RecordOutcome durably records how a request ended without a turn
	// (discarded, rejected, cancelled before it ran, failed), so that a
	// re-delivery completes the same way without running again. The first
	// decision wins: if the request id already has a turn or an outcome,
	// that is reported with Duplicate set and nothing is written.
	RecordOutcome(ctx context.Context, id events.Identity, requestID string, status events.Status) (Committed, error)
	// List returns up to limit messages with seq < before (before <= 0:
	// the newest), oldest first. ErrNotFound if the conversation does not exist.
	List(ctx context.Context, id events.Identity, before int64, limit int) (Page, error)
	// Conversations lists the conversations of tenant/user that have a
	// committed turn, newest first (ordered as ConversationCursor says):
	// up to limit (clamped to 1..MaxListLimit) of those after before (the
	// zero cursor: from the newest).
	Conversations(ctx context.Context, tenant, user string, before ConversationCursor, limit int) (ConversationPage, error)
	// RecordCancel durably records a cancellation. Recording the same one
	// again is harmless; a conversation-wide cancel only ever moves its
	// position forward.
	RecordCancel(ctx context.Context, id events.Identity, c Cancel) error
	// Cancelled reports whether a recorded cancel covers request requestID
	// whose record is at src.
	Cancelled(ctx context.Context, id events.Identity, requestID string, src Source) (bool, error)
	// Summary returns the conversation's summary, if one was saved.
	Summary(ctx context.Context, id events.Identity) (Summary, bool, error)
	// SaveSummary keeps s as the conversation's summary unless the stored
	// one already covers as much (Through >= s.Through): summaries only
	// move forward, and saving the same one again is harmless. Messages
	// are never deleted.
	SaveSummary(ctx context.Context, id events.Identity, s Summary) error
	// SaveCheckpoint stores an agent checkpoint under name (ID rule),
	// replacing any earlier one of that name: writing it again is
	// harmless. At most MaxCheckpointBytes.
	SaveCheckpoint(ctx context.Context, id events.Identity, name string, data []byte) error
	// LoadCheckpoint returns the checkpoint stored under name, if any.
	LoadCheckpoint(ctx context.Context, id events.Identity, name string) ([]byte, bool, error)
}

// validateOutcome checks the arguments of RecordOutcome.
func validateOutcome(id events.Identity, requestID string, status events.Status) error {
	var errs []error
	if err := id.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := events.ValidateID("request_id", requestID); err != nil {
		errs = append(errs, err)
	}
	// cancelled is both: the outcome of a request cancelled while queued
	// (nothing persisted) and the status of a cancelled run's partial answer.
	if err := status.Validate(); err != nil || status == events.StatusComplete || status == events.StatusIncomplete {
		errs = append(errs, fmt.Errorf("%w outcome: status %q: must be discarded, rejected, cancelled or failed", events.ErrInvalid, truncate(string(status), 32)))
	}
	if len(errs) > 0 {
		return fmt.Errorf("record outcome: %w", errors.Join(errs...))
	}
	return nil
}
