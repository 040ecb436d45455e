package history

import (
	"slices"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// MaxListLimit is the largest page List returns; a larger limit is clamped
// to it, and a limit below 1 is raised to 1.
const MaxListLimit = 200

// numbered is a committed turn and its number: the stores' common form.
type numbered struct {
	n int64
	t Turn
}

// messages returns the user message (seq 2n-1) and the assistant message
// (seq 2n) of the turn.
func (x numbered) messages() [2]Message {
	return [2]Message{
		{
			Seq:       2*x.n - 1,
			Role:      RoleUser,
			Content:   x.t.User,
			RequestID: x.t.RequestID,
			CreatedAt: x.t.UserAt,
		},
		{
			Seq:       2 * x.n,
			Role:      RoleAssistant,
			Content:   x.t.Answer,
			RequestID: x.t.RequestID,
			Agent:     x.t.Agent,
			CreatedAt: x.t.CommittedAt,
			Status:    x.t.Status,
			Usage:     cloneUsage(x.t.Usage),
			Interrupt: cloneInterrupt(x.t.Interrupt),
		},
	}
}

// flatten returns the messages of turns (ascending, contiguous) whose seq
// lies in [lo, hi], oldest first. The result is never nil.
func flatten(turns []numbered, lo, hi int64) []Message {
	out := make([]Message, 0, 2*len(turns))
	for _, x := range turns {
		for _, m := range x.messages() {
			if m.Seq >= lo && m.Seq <= hi {
				out = append(out, m)
			}
		}
	}
	return out
}

// windowTurns is how many of the newest turns hold the last n messages
// (without overflowing for n near math.MaxInt).
func windowTurns(n int) int64 { return int64(n/2 + n%2) }

// windowMessages flattens the newest turns and keeps the last n messages.
func windowMessages(turns []numbered, n int) []Message {
	if len(turns) == 0 || n <= 0 {
		return []Message{}
	}
	newest := 2 * turns[len(turns)-1].n
	return flatten(turns, newest-int64(n)+1, newest)
}

// clampLimit brings a List limit into 1..MaxListLimit.
func clampLimit(limit int) int {
	return min(max(limit, 1), MaxListLimit)
}

// listRange returns the seqs [lo, hi] of a List page over a conversation
// whose newest message is newest (lo > hi: an empty page). before <= 0, or
// beyond the newest message, means "after the newest".
func listRange(newest, before int64, limit int) (lo, hi int64) {
	if before <= 0 || before > newest+1 {
		before = newest + 1
	}
	return max(1, before-int64(clampLimit(limit))), before - 1
}

// nextBefore is the NextBefore of a page starting at seq lo.
func nextBefore(lo, hi int64) int64 {
	if lo > hi || lo <= 1 {
		return 0
	}
	return lo
}

// turnOf is the number of the turn holding message seq.
func turnOf(seq int64) int64 { return (seq + 1) / 2 }

// storedTime is t as the stores keep it: UTC, millisecond precision (BSON
// dates), and now() when t is zero.
func storedTime(t time.Time, now func() time.Time) time.Time {
	if t.IsZero() {
		t = now()
	}
	return t.UTC().Truncate(time.Millisecond)
}

// normalize returns t with its times as stored, sharing nothing with the
// caller's t.
func normalize(t Turn, now func() time.Time) Turn {
	t.UserAt = storedTime(t.UserAt, now)
	t.CommittedAt = storedTime(t.CommittedAt, now)
	t.Usage, t.Interrupt = cloneUsage(t.Usage), cloneInterrupt(t.Interrupt)
	return t
}

func cloneUsage(u *events.Usage) *events.Usage {
	if u == nil {
		return nil
	}
	c := *u
	return &c
}

func cloneInterrupt(in *Interrupt) *Interrupt {
	if in == nil {
		return nil
	}
	c := *in
	c.Targets = slices.Clone(in.Targets)
	return &c
}
