package historytest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// resetTests are the suite's tests of Pending.Reset.
var resetTests = []struct {
	name string
	run  func(t *testing.T, ctx context.Context, s history.Store)
}{
	{"A reset of the state and the agent makes the next run start from empty state at the root, and keeps the messages and the user scope", testResetClears},
	{"A reset clears only the parts it names", testResetParts},
	{"A turn committed after a reset keeps its own state: the reset does not erase what comes after it", testResetThenTurn},
	{"A turn of a record older than the reset, committed after it by a fenced worker, does not bring the old state back", testResetCoversOlderRecord},
	{"A reset delivered again, or repeated at a later offset, is decided once and erases nothing committed after it", testResetOnce},
	{"A reset adds no message, no turn and no conversation to the listing", testResetAddsNoMessage},
	{"A reset covers the newest turn by number when no record orders them", testResetWithoutRecords},
	{"ConversationState reads the state a reset left, not the newest turn's as it was committed", testResetRead},
}

// reset starts request rid of id (record at offset off) and resets r.
func reset(t *testing.T, ctx context.Context, s history.Store, id events.Identity, rid string, off int64, r history.Reset) (history.Committed, history.Start) {
	t.Helper()
	p := begin(s, id, rid, off)
	st := start(t, ctx, p, 0)
	if st.Decided {
		return st.Committed, st
	}
	c, err := p.Reset(ctx, r)
	if err != nil {
		t.Fatalf("Reset(%s): %v", rid, err)
	}
	return c, st
}

var resetBoth = history.Reset{State: true, Agent: true}

func testResetClears(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "reset")
	commit(t, ctx, s, id, stateTurn(1, &history.StateChange{
		Conversation: []history.StateOp{op("cart", `["apple"]`)},
		User:         []history.StateOp{op("lang", `"fr"`)},
		Agent:        "billing",
	}))
	c, _ := reset(t, ctx, s, id, "r2", 2, resetBoth)
	if c.N != 0 || c.Status != events.StatusComplete || c.Duplicate {
		t.Fatalf("Reset = %+v, want complete without a turn", c)
	}
	p := begin(s, id, "r3", 3)
	st := start(t, ctx, p, 20)
	if got := stateString(st.State); got != "@" {
		t.Fatalf("state after the reset = %q, want empty at the root", got)
	}
	if got, want := messageIDs(st.Window), "1:r1 2:r1 0:r3 "; got != want {
		t.Fatalf("window after the reset = %q, want %q (messages are kept)", got, want)
	}
	if got, want := scope(t, ctx, s, id.Tenant, id.User), `lang="fr"`; got != want {
		t.Fatalf("user state after the reset = %q, want %q (user: is not reset)", got, want)
	}
}

func testResetParts(t *testing.T, ctx context.Context, s history.Store) {
	for _, tc := range []struct {
		name string
		r    history.Reset
		want string
	}{
		{"state", history.Reset{State: true}, "@billing"},
		{"agent", history.Reset{Agent: true}, "a=1@"},
	} {
		id := newIdentity(t, "reset-"+tc.name)
		commit(t, ctx, s, id, stateTurn(1, &history.StateChange{Conversation: []history.StateOp{op("a", `1`)}, Agent: "billing"}))
		reset(t, ctx, s, id, "r2", 2, tc.r)
		if got := stateString(startState(t, ctx, s, id, "r3", 3)); got != tc.want {
			t.Fatalf("state after a reset of the %s = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func testResetThenTurn(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "reset-then")
	commit(t, ctx, s, id, stateTurn(1, &history.StateChange{Conversation: []history.StateOp{op("a", `1`)}, Agent: "billing"}))
	reset(t, ctx, s, id, "r2", 2, resetBoth)
	// The run after the reset starts from the empty state and commits
	// through Start's tip, as a worker does.
	p := begin(s, id, "r3", 3)
	start(t, ctx, p, 20)
	if _, err := p.CommitAnswer(ctx, history.Answer{Text: "three", Agent: "echo", Status: events.StatusComplete,
		State: &history.StateChange{Conversation: []history.StateOp{op("b", `2`)}, Agent: "support"}}); err != nil {
		t.Fatalf("Commit(r3): %v", err)
	}
	if got, want := stateString(startState(t, ctx, s, id, "r4", 4)), `b=2@support`; got != want {
		t.Fatalf("state after a turn that followed the reset = %q, want %q", got, want)
	}
	// A commit without Start (no tip) right after a reset computes from
	// the reset state too.
	direct := newIdentity(t, "reset-direct")
	commit(t, ctx, s, direct, stateTurn(1, &history.StateChange{Conversation: []history.StateOp{op("a", `1`)}, Agent: "billing"}))
	reset(t, ctx, s, direct, "r2", 2, resetBoth)
	commit(t, ctx, s, direct, stateTurn(3, &history.StateChange{Conversation: []history.StateOp{op("c", `3`)}}))
	if got, want := stateString(startState(t, ctx, s, direct, "r4", 4)), `c=3@`; got != want {
		t.Fatalf("state after a turn committed without Start after the reset = %q, want %q", got, want)
	}
}

func testResetCoversOlderRecord(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "reset-zombie")
	commit(t, ctx, s, id, stateTurn(1, &history.StateChange{Conversation: []history.StateOp{op("a", `1`)}, Agent: "billing"}))
	// A worker starts record 2 and loses the partition; its successor
	// decides record 2 without a turn and applies the reset of record 3.
	zombie := begin(s, id, "r2", 2)
	start(t, ctx, zombie, 20)
	reset(t, ctx, s, id, "r3", 3, resetBoth)
	// The zombie commits now, with the state it computed before the reset.
	if _, err := zombie.CommitAnswer(ctx, history.Answer{Text: "two", Agent: "billing", Status: events.StatusComplete,
		State: &history.StateChange{Conversation: []history.StateOp{op("z", `9`)}, Agent: "billing"}}); err != nil && !errors.Is(err, history.ErrFenced) {
		t.Fatalf("Commit(r2) = %v", err)
	}
	if got := stateString(startState(t, ctx, s, id, "r4", 4)); got != "@" {
		t.Fatalf("state after the reset and an older record's late turn = %q, want empty at the root", got)
	}
}

func testResetOnce(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "reset-once")
	commit(t, ctx, s, id, stateTurn(1, &history.StateChange{Conversation: []history.StateOp{op("a", `1`)}}))
	reset(t, ctx, s, id, "r2", 2, resetBoth)
	// Redelivered before anything else ran: decided.
	c, st := reset(t, ctx, s, id, "r2", 2, resetBoth)
	if !st.Decided || c.Status != events.StatusComplete || c.N != 0 {
		t.Fatalf("Start of a redelivered reset = %+v, want decided complete without a turn", st)
	}
	commit(t, ctx, s, id, stateTurn(3, &history.StateChange{Conversation: []history.StateOp{op("b", `2`)}}))
	// The same reset again at a later offset (a producer's retry).
	if _, st := reset(t, ctx, s, id, "r2", 4, resetBoth); !st.Decided {
		t.Fatalf("Start of a repeated reset = %+v, want decided", st)
	}
	// And Reset itself refuses to apply a decided request again.
	p := begin(s, id, "r2", 4)
	if c, err := p.Reset(ctx, resetBoth); err != nil || !c.Duplicate || c.Status != events.StatusComplete {
		t.Fatalf("Reset of a decided request = %+v, %v; want a duplicate", c, err)
	}
	if got, want := stateString(startState(t, ctx, s, id, "r5", 5)), `b=2@`; got != want {
		t.Fatalf("state after a repeated reset = %q, want %q (the turn after the reset kept)", got, want)
	}
	if c, found, err := s.Lookup(ctx, id, "r2"); err != nil || !found || c.N != 0 || c.Status != events.StatusComplete {
		t.Fatalf("Lookup(reset) = %+v, %v, %v; want complete without a turn", c, found, err)
	}
}

func testResetAddsNoMessage(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "reset-none")
	reset(t, ctx, s, id, "r1", 1, resetBoth)
	if _, err := s.List(ctx, id, 0, 50); !errors.Is(err, history.ErrNotFound) {
		t.Fatalf("List of a conversation with only a reset = %v, want ErrNotFound", err)
	}
	if page, err := s.Conversations(ctx, id.Tenant, id.User, history.ConversationCursor{}, 50); err != nil || len(page.Conversations) != 0 {
		t.Fatalf("Conversations after only a reset = %+v, %v; want none", page, err)
	}
	commit(t, ctx, s, id, stateTurn(2, nil))
	reset(t, ctx, s, id, "r3", 3, resetBoth)
	page, err := s.List(ctx, id, 0, 50)
	if err != nil || messageIDs(page.Messages) != "1:r2 2:r2 " {
		t.Fatalf("List after a turn and a reset = %q, %v; want the turn's two messages", messageIDs(page.Messages), err)
	}
	c := commit(t, ctx, s, id, stateTurn(4, nil))
	if c.N != 2 {
		t.Fatalf("turn after a reset = %+v, want turn 2", c)
	}
}

// messageIDs is "seq:request " for each message.
func messageIDs(msgs []history.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "%d:%s ", m.Seq, m.RequestID)
	}
	return b.String()
}

func testResetWithoutRecords(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "reset-unsourced")
	tr := stateTurn(1, &history.StateChange{Conversation: []history.StateOp{op("a", `1`)}, Agent: "billing"})
	tr.Source = nil
	commit(t, ctx, s, id, tr)
	p := history.Begin(s, id, "r2", "", base.Add(time.Hour))
	if st := start(t, ctx, p, 0); st.Decided || st.Cancelled {
		t.Fatalf("Start(r2) = %+v", st)
	}
	if _, err := p.Reset(ctx, resetBoth); err != nil {
		t.Fatalf("Reset(r2): %v", err)
	}
	p3 := history.Begin(s, id, "r3", "question r3", base.Add(time.Hour))
	if got := stateString(start(t, ctx, p3, 20).State); got != "@" {
		t.Fatalf("state after a reset of a turn without a record = %q, want empty at the root", got)
	}
}

func testResetRead(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "reset-read")
	commit(t, ctx, s, id, stateTurn(1, &history.StateChange{
		Conversation: []history.StateOp{op("cart", `["apple"]`)},
		User:         []history.StateOp{op("lang", `"fr"`)},
		Agent:        "billing",
	}))
	reset(t, ctx, s, id, "r2", 2, history.Reset{Agent: true})
	if got, want := readState(t, ctx, s, id), `cart=["apple"]@ user:lang="fr"`; got != want {
		t.Fatalf("state after a reset of the agent = %q, want %q", got, want)
	}
	reset(t, ctx, s, id, "r3", 3, history.Reset{State: true})
	if got, want := readState(t, ctx, s, id), `@ user:lang="fr"`; got != want {
		t.Fatalf("state after a reset of the state = %q, want %q (user: is not reset)", got, want)
	}
	commit(t, ctx, s, id, stateTurn(4, &history.StateChange{Conversation: []history.StateOp{op("step", `1`)}}))
	if got, want := readState(t, ctx, s, id), `step=1@ user:lang="fr"`; got != want {
		t.Fatalf("state of a turn after the reset = %q, want %q", got, want)
	}
}
