package history

import (
	"fmt"
	"slices"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// MaxListLimit is the largest page List returns; a larger limit is clamped
// to it, and a limit below 1 is raised to 1.
const MaxListLimit = 200

// numbered is a committed turn, its number and the seq of its user
// message: the stores' common form. t is normalized (see normalize): its
// answer is in t.Parts, at least one part.
type numbered struct {
	n   int64
	seq int64
	t   Turn
	// v1 is set on a turn stored in format version 1 (one part, seqs
	// 2n-1 and 2n).
	v1 bool
	// st is what the turn keeps of state (nil: nothing).
	st *turnState
}

// inV1 reports whether turn n, whose user message has seq seq, is
// written in format version 1: asked for (Turn.KeepV1), after a version 1
// turn or none (prevV1), and where version 1's numbering holds.
func inV1(t Turn, n, seq int64, prevV1 bool) bool {
	return t.KeepV1 && prevV1 && seq == 2*n-1
}

// asV1 is the normalized t as a version 1 turn holds it: one part, the
// parts' text joined, under the last part's agent (as the bridge of a
// release before parts committed an answer of several agents).
func asV1(t Turn) Turn {
	if len(t.Parts) < 2 {
		return t
	}
	var text []byte
	for _, p := range t.Parts {
		text = append(text, p.Text...)
	}
	t.Parts = []Part{{Agent: t.Parts[len(t.Parts)-1].Agent, Text: string(text)}}
	return t
}

// end is the seq of the turn's last message.
func (x numbered) end() int64 { return x.seq + int64(len(x.t.Parts)) }

// messages returns the user message (seq x.seq) and one assistant message
// per part (the seqs that follow). Status, request id and time are on
// every assistant message; usage and interrupt, the run's, on the last.
func (x numbered) messages() []Message {
	out := make([]Message, 0, 1+len(x.t.Parts))
	out = append(out, Message{
		Seq:       x.seq,
		Role:      RoleUser,
		Content:   x.t.User,
		RequestID: x.t.RequestID,
		CreatedAt: x.t.UserAt,
	})
	for i, p := range x.t.Parts {
		m := Message{
			Seq:       x.seq + 1 + int64(i),
			Role:      RoleAssistant,
			Content:   p.Text,
			RequestID: x.t.RequestID,
			Agent:     p.Agent,
			CreatedAt: x.t.CommittedAt,
			Status:    x.t.Status,
		}
		if i == len(x.t.Parts)-1 {
			m.Usage, m.Interrupt = cloneUsage(x.t.Usage), cloneInterrupt(x.t.Interrupt)
		}
		out = append(out, m)
	}
	return out
}

// flatten returns the messages of turns (ascending, contiguous) whose seq
// lies in [lo, hi], oldest first. The result is never nil.
func flatten(turns []numbered, lo, hi int64) []Message {
	out := make([]Message, 0, 2*len(turns))
	for _, x := range turns {
		if x.end() < lo || x.seq > hi {
			continue
		}
		for _, m := range x.messages() {
			if m.Seq >= lo && m.Seq <= hi {
				out = append(out, m)
			}
		}
	}
	return out
}

// contiguous checks that turns (ascending) follow each other by number
// and by seq.
func contiguous(turns []numbered) error {
	for i := 1; i < len(turns); i++ {
		prev, x := turns[i-1], turns[i]
		if x.n != prev.n+1 {
			return fmt.Errorf("turn %d follows turn %d", x.n, prev.n)
		}
		if x.seq != prev.end()+1 {
			return fmt.Errorf("turn %d starts at seq %d, turn %d ends at %d", x.n, x.seq, prev.n, prev.end())
		}
	}
	return nil
}

// windowTurns is how many of the newest turns hold the last n messages
// (every turn holds two or more; without overflowing for n near
// math.MaxInt).
func windowTurns(n int) int64 { return int64(n/2 + n%2) }

// spanTurns is how many turns, from the one holding a page's newest
// message back, hold a page of n messages: the first holds one of them
// or more, every other two or more.
func spanTurns(n int64) int64 { return n/2 + 1 }

// windowMessages flattens the newest turns and keeps the last n messages.
func windowMessages(turns []numbered, n int) []Message {
	if len(turns) == 0 || n < 1 {
		return []Message{}
	}
	newest := turns[len(turns)-1].end()
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
	if before <= 0 || before > newest {
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

// turnOf is the number of the turn holding message seq if every turn up
// to it has one part (as every turn written before parts existed), and in
// any case the highest number the turn holding seq can have.
func turnOf(seq int64) int64 { return (seq + 1) / 2 }

// storedTime is t as the stores keep it: UTC, millisecond precision (BSON
// dates), and now() when t is zero.
func storedTime(t time.Time, now func() time.Time) time.Time {
	if t.IsZero() {
		t = now()
	}
	return t.UTC().Truncate(time.Millisecond)
}

// normalize returns t with its times as stored and its answer in Parts
// (an answer of one part, possibly empty when interrupted, becomes one
// part), sharing nothing with the caller's t.
func normalize(t Turn, now func() time.Time) Turn {
	t.UserAt = storedTime(t.UserAt, now)
	t.CommittedAt = storedTime(t.CommittedAt, now)
	t.Usage, t.Interrupt = cloneUsage(t.Usage), cloneInterrupt(t.Interrupt)
	if len(t.Parts) == 0 {
		t.Parts = []Part{{Agent: t.Agent, Text: t.Answer}}
	} else {
		t.Parts = slices.Clone(t.Parts)
	}
	t.Answer, t.Agent = "", ""
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
