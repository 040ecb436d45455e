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
	// Seq numbers the messages of a conversation 1, 2, 3 …: a turn n holds
	// the user message 2n-1 and the assistant message 2n.
	Seq       int64
	Role      Role
	Content   string
	RequestID string
	// Agent is the agent that wrote an assistant message ("" for user messages).
	Agent     string
	CreatedAt time.Time
	// Status is set on assistant messages only: complete, incomplete or cancelled.
	Status events.Status
}

// Incomplete reports whether an assistant message is anything but complete.
func (m Message) Incomplete() bool {
	return m.Role == RoleAssistant && m.Status != events.StatusComplete
}

// Turn is what Commit persists: one user message and the assistant's answer.
type Turn struct {
	RequestID string
	// User is the user message, verbatim.
	User string
	// UserAt is when the user message was received.
	UserAt time.Time
	// Answer is the concatenated assistant text. Never empty (no-dangling-user).
	Answer string
	Agent  string
	// Status is complete, incomplete or cancelled.
	Status      events.Status
	CommittedAt time.Time
	// Source, when set, is the request's record: Commit refuses a turn
	// whose record is older than the one of the conversation's last turn
	// (ErrFenced), so a worker that lost its partition (a zombie) cannot
	// persist out of order.
	Source *Source
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
	if t.Answer == "" {
		errs = append(errs, fmt.Errorf("%w turn: %w", events.ErrInvalid, ErrEmptyAnswer))
	}
	if t.Source != nil && t.Source.Topic == "" {
		errs = append(errs, fmt.Errorf("%w turn: source without topic", events.ErrInvalid))
	}
	if !t.Status.Persisted() {
		errs = append(errs, fmt.Errorf("%w turn: status %q: must be complete, incomplete or cancelled", events.ErrInvalid, truncate(string(t.Status), 32)))
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
	// N is the turn number; its messages have seq 2N-1 and 2N.
	N      int64
	Status events.Status
	// Duplicate is true when the request id had already been committed: the
	// existing turn is reported and nothing new was written.
	Duplicate bool
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
	// Commit persists a turn atomically: both messages or neither. It is
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
