package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// ErrClosed is returned by a Pending that was already committed or
// discarded.
var ErrClosed = errors.New("pending request already committed or discarded")

// Pending is the user message of a running request, held in memory and not
// written: it is persisted only by Commit, together with the assistant's
// answer, so a request that ends without content leaves nothing behind.
//
// A Pending belongs to one request and is not safe for concurrent use.
type Pending struct {
	store     Store
	id        events.Identity
	requestID string
	content   string
	at        time.Time
	source    *Source
	keepV1    bool
	tip       *tip // the conversation's newest turn, as Start saw it
	closed    bool // committed or discarded
}

// SetSource sets the request's record coordinates, which fence the commit
// (see Turn.Source).
func (p *Pending) SetSource(src Source) { p.source = &src }

// SetKeepV1 sets the commit's Turn.KeepV1: while a rolling upgrade from a
// release before parts runs, a conversation that has only turns of format
// version 1 (or none) goes on in version 1.
func (p *Pending) SetKeepV1(keep bool) { p.keepV1 = keep }

// Begin holds the user message content of request requestID, received at
// at, for conversation id. Nothing is written.
func Begin(s Store, id events.Identity, requestID, content string, at time.Time) *Pending {
	return &Pending{store: s, id: id, requestID: requestID, content: content, at: at}
}

// Message returns the pending user message. Its Seq is 0: it is numbered
// only when committed. CreatedAt is Begin's at as it will be stored (UTC,
// milliseconds; a zero at stays zero here and is stamped by the store).
func (p *Pending) Message() Message {
	return Message{
		Role:      RoleUser,
		Content:   p.content,
		RequestID: p.requestID,
		CreatedAt: p.at.UTC().Truncate(time.Millisecond),
	}
}

// Window returns the last n stored messages of the conversation, oldest
// first, followed by the pending user message (see Message; Seq 0). It
// holds at most n+1 messages.
func (p *Pending) Window(ctx context.Context, n int) ([]Message, error) {
	if p.closed {
		return nil, fmt.Errorf("window: %w", ErrClosed)
	}
	msgs, err := p.store.Window(ctx, p.id, n)
	if err != nil {
		return nil, err
	}
	return append(msgs, p.Message()), nil
}

// Commit persists the user message and the answer as one turn. An empty
// answer is ErrEmptyAnswer and writes nothing (the Pending stays open, to be
// discarded). After a successful Commit the Pending is closed and further
// Commits return ErrClosed; after a failed one it may be retried (Commit is
// idempotent per request id).
func (p *Pending) Commit(ctx context.Context, answer, agent string, status events.Status, at time.Time) (Committed, error) {
	return p.CommitAnswer(ctx, Answer{Text: answer, Agent: agent, Status: status, At: at})
}

// Answer is what CommitAnswer persists with the pending user message.
type Answer struct {
	// Text is the assistant's answer, all of it one Agent's; it may be
	// empty only when the answer is interrupted.
	Text  string
	Agent string
	// Parts, when set instead of Text and Agent, is an answer of several
	// agents: one assistant message per part (see Turn.Parts).
	Parts  []Part
	Status events.Status
	At     time.Time
	// Usage, if known, is the run's token usage.
	Usage *events.Usage
	// Interrupt is set, with status interrupted, when the run stopped to
	// ask the user something.
	Interrupt *Interrupt
	// State, if set, is the run's change of the conversation's state and
	// its active agent (Turn.State).
	State *StateChange
	// Artifacts, if set, is the manifest of the run's staged artifact
	// saves (Turn.Artifacts).
	Artifacts []string
}

// CommitAnswer is Commit with the answer's token usage and interrupt.
func (p *Pending) CommitAnswer(ctx context.Context, a Answer) (Committed, error) {
	if p.closed {
		return Committed{}, fmt.Errorf("commit: %w", ErrClosed)
	}
	if a.Text == "" && len(a.Parts) == 0 && a.Interrupt == nil {
		return Committed{}, fmt.Errorf("commit: %w", ErrEmptyAnswer)
	}
	c, err := p.store.Commit(ctx, p.id, Turn{
		RequestID:   p.requestID,
		User:        p.content,
		UserAt:      p.at,
		Answer:      a.Text,
		Agent:       a.Agent,
		Parts:       a.Parts,
		Status:      a.Status,
		CommittedAt: a.At,
		Source:      p.source,
		KeepV1:      p.keepV1,
		Usage:       a.Usage,
		Interrupt:   a.Interrupt,
		State:       a.State,
		Artifacts:   a.Artifacts,
		tip:         p.tip,
	})
	if err != nil {
		return Committed{}, err
	}
	p.closed = true
	return c, nil
}

// Discard drops the pending message: nothing is written, and later Commits
// return ErrClosed. It may be called more than once.
func (p *Pending) Discard() { p.closed = true }
