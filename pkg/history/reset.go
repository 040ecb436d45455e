package history

import (
	"context"
	"errors"
	"fmt"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Reset names the parts of a conversation's state a reset clears: its
// conversation-scoped keys (State), and the agent it is left with (Agent:
// it returns to the root). The user: and tenant: scopes are shared by
// other conversations and are never reset by one of them.
type Reset struct {
	State, Agent bool
}

// ErrNotResettable is returned by Pending.Reset on a store that keeps no
// reset marks.
var ErrNotResettable = errors.New("the store cannot reset a conversation's state")

// resetMark is the newest reset of one part of a conversation's state. It
// covers turn n and every turn before it, and every turn whose record is
// older than the reset's (a worker that lost the partition may commit
// such a turn after the reset: its state was computed before the reset).
// A turn the mark does not cover was committed after the reset, from
// state the reset had already cleared.
type resetMark struct {
	n      int64
	source *Source
}

// covers reports whether the reset clears what turn n, from the record
// at src, left.
func (m *resetMark) covers(n int64, src *Source) bool {
	return m != nil && (n <= m.n || src.Fences(m.source))
}

// after reports whether m is not older than o: a mark only moves forward.
func (m *resetMark) after(o *resetMark) bool {
	return o == nil || m.n > o.n || m.n == o.n && !m.source.Fences(o.source)
}

// resetMarks are a conversation's newest resets, one per part.
type resetMarks struct {
	state, agent *resetMark
}

// apply is st, the state turn n (from the record at src) left, as the
// resets leave it: the conversation's keys cleared, the agent back at the
// root. The user and tenant changes are kept (Start rolls them forward
// again).
func (r resetMarks) apply(st *turnState, n int64, src *Source) *turnState {
	cs, ca := r.state.covers(n, src), r.agent.covers(n, src)
	if st == nil || !cs && !ca {
		return st
	}
	out := *st
	if cs {
		out.values = nil
	}
	if ca {
		out.agent = ""
	}
	return &out
}

// resetter is implemented by the stores of this package: record request
// requestID as a reset of the parts r names, covering the conversation's
// turns up to n (-1: the store's newest) and the turns of records older
// than src, unless the request is already decided; its decision is
// complete, with no turn.
type resetter interface {
	reset(ctx context.Context, id events.Identity, requestID string, r Reset, n int64, src *Source) (Committed, error)
}

// Reset records the pending request as a reset of the parts r names of the
// conversation's state, instead of a turn: the next run of the
// conversation starts from empty conversation-scoped state (r.State)
// and from the root agent (r.Agent). The conversation's messages are not
// touched, nor the user: and tenant: scopes. Call it after Start found
// the request neither decided nor cancelled: the reset then covers the
// newest turn Start saw, and, with SetSource, every turn of an older
// record that a fenced worker may still commit. It is idempotent per
// request id like Commit: a request already decided reports its decision
// with Duplicate set and resets nothing. The decision is
// events.StatusComplete with no turn (N 0). The Pending is closed after.
func (p *Pending) Reset(ctx context.Context, r Reset) (Committed, error) {
	if p.closed {
		return Committed{}, fmt.Errorf("reset: %w", ErrClosed)
	}
	if err := p.id.Validate(); err != nil {
		return Committed{}, fmt.Errorf("reset: %w", err)
	}
	if err := events.ValidateID("request_id", p.requestID); err != nil {
		return Committed{}, fmt.Errorf("reset: %w", err)
	}
	if !r.State && !r.Agent {
		return Committed{}, fmt.Errorf("reset: %w reset: clears nothing", events.ErrInvalid)
	}
	rs, ok := p.store.(resetter)
	if !ok {
		return Committed{}, fmt.Errorf("reset: %w", ErrNotResettable)
	}
	n := int64(-1)
	if p.tip != nil {
		n = p.tip.n
	}
	c, err := rs.reset(ctx, p.id, p.requestID, r, n, p.source)
	if err != nil {
		return Committed{}, fmt.Errorf("reset: %w", err)
	}
	p.closed = true
	return c, nil
}
