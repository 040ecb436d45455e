package history

import (
	"context"
	"fmt"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Start is what a worker must know before it runs a request: whether the
// request id is already decided, whether a recorded cancel covers it, and
// otherwise the model's window. Pending.Start reads it.
type Start struct {
	// Decided is set when the request id already has a turn or an outcome
	// (a redelivery, a duplicate record): Committed says which (N is 0 for
	// an outcome without a turn), and the request must not run again.
	Decided   bool
	Committed Committed
	// Cancelled is set when a recorded cancel covers the request (never
	// together with Decided).
	Cancelled bool
	// Window is set when neither is: the last n stored messages, oldest
	// first, followed by the pending user message (as Pending.Window).
	Window []Message
	// Steps is the request's step journal, when the store is a Journal
	// and the request has one (an earlier run of it recorded steps and
	// did not end). A MongoStore reads it in the query of the request's
	// outcome, at no extra command.
	Steps *Steps
	// State is the conversation's state and active agent as its newest
	// turn left them (with Window): read by the same query as the window.
	State State
}

// tip is the newest turn of a conversation as Start saw it: the turn a
// commit expects to follow, and the record that fences it.
type tip struct {
	n      int64      // 0: the conversation had no turn
	next   int64      // the seq after turn n's last message (1 when none)
	source *Source    // of turn n; nil when it had none
	v1     bool       // turn n is of format version 1, or there is none
	st     *turnState // what turn n keeps of state, as the resets leave it
	resets resetMarks // the conversation's newest resets
}

// stateTip is implemented by the stores of this package that are not
// starters: what the conversation's newest turn keeps of state.
type stateTip interface {
	tipState(ctx context.Context, id events.Identity) (*turnState, error)
}

// scopeApplier is implemented by the stores of this package that keep
// the user and tenant scopes: apply a turn's changes of them, per key,
// over older stamps only (idempotent).
type scopeApplier interface {
	applyScoped(ctx context.Context, id events.Identity, st *turnState) error
}

// reapply rolls forward the user and tenant changes of the newest turn
// again: its commit may have crashed before it did. Only a conversation
// whose newest turn changed those scopes pays for it.
func (p *Pending) reapply(ctx context.Context, st *turnState) error {
	a, ok := p.store.(scopeApplier)
	if !ok || !st.scoped() {
		return nil
	}
	return a.applyScoped(ctx, p.id, st)
}

// starter is implemented by the stores of this package that answer Start
// in fewer round trips than Lookup, Cancelled and Window one after the
// other (MongoStore: two queries issued together), and whose Commit uses
// the tip to skip its own reads.
type starter interface {
	start(ctx context.Context, p *Pending, n int) (Start, *tip, error)
}

// Start reads, for the pending request, whether it is already decided or
// cancelled (the cancel check needs the request's source, see SetSource)
// and otherwise the window of the last n stored messages followed by the
// pending message. On a MongoStore that is two queries issued at once; and
// the commit that follows then costs one insert (the commit point and the
// idempotency check at once) and one conversation update, so an ordinary
// turn costs four commands in three round trips. Other stores answer with
// Lookup, Cancelled and Window.
func (p *Pending) Start(ctx context.Context, n int) (Start, error) {
	if p.closed {
		return Start{}, fmt.Errorf("start: %w", ErrClosed)
	}
	if err := p.id.Validate(); err != nil {
		return Start{}, fmt.Errorf("start: %w", err)
	}
	if s, ok := p.store.(starter); ok {
		st, tip, err := s.start(ctx, p, n)
		if err != nil {
			return Start{}, fmt.Errorf("start: %w", err)
		}
		p.tip = tip
		if st.Window != nil {
			st.Window = append(st.Window, p.Message())
			if err := p.reapply(ctx, tip.st); err != nil {
				return Start{}, fmt.Errorf("start: %w", err)
			}
			st.State = tip.st.state()
		}
		return st, nil
	}
	var steps *Steps
	if j, ok := p.store.(Journal); ok {
		js, found, err := j.Steps(ctx, p.id, p.requestID)
		if err != nil {
			return Start{}, fmt.Errorf("start: %w", err)
		}
		if found {
			steps = &js
		}
	}
	c, decided, err := p.store.Lookup(ctx, p.id, p.requestID)
	if err != nil {
		return Start{}, fmt.Errorf("start: %w", err)
	}
	if decided {
		return Start{Decided: true, Committed: c, Steps: steps}, nil
	}
	if p.source != nil {
		cancelled, err := p.store.Cancelled(ctx, p.id, p.requestID, *p.source)
		if err != nil {
			return Start{}, fmt.Errorf("start: %w", err)
		}
		if cancelled {
			return Start{Cancelled: true, Steps: steps}, nil
		}
	}
	w, err := p.Window(ctx, n)
	if err != nil {
		return Start{}, fmt.Errorf("start: %w", err)
	}
	start := Start{Window: w, Steps: steps}
	if s, ok := p.store.(stateTip); ok {
		ts, err := s.tipState(ctx, p.id)
		if err != nil {
			return Start{}, fmt.Errorf("start: %w", err)
		}
		if err := p.reapply(ctx, ts); err != nil {
			return Start{}, fmt.Errorf("start: %w", err)
		}
		start.State = ts.state()
	}
	return start, nil
}
