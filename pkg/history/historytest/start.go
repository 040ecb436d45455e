package historytest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// at is the record of offset off in partition 0 of topic "requests".
func at(off int64) history.Source {
	return history.Source{Topic: "requests", Partition: 0, Offset: off, Time: base.Add(time.Duration(off) * time.Second)}
}

// commitSourced commits turn(1) … turn(count), turn i from the record at
// offset i.
func commitSourced(t *testing.T, ctx context.Context, s history.Store, id events.Identity, count int) {
	t.Helper()
	for i := 1; i <= count; i++ {
		if c := commit(t, ctx, s, id, sourced(i, at(int64(i)))); c.N != int64(i) || c.Duplicate {
			t.Fatalf("Commit(turn %d) = %+v", i, c)
		}
	}
}

// begin is the pending request rid from the record at offset off.
func begin(s history.Store, id events.Identity, rid string, off int64) *history.Pending {
	p := history.Begin(s, id, rid, "question "+rid, base.Add(time.Hour))
	p.SetSource(at(off))
	return p
}

func start(t *testing.T, ctx context.Context, p *history.Pending, n int) history.Start {
	t.Helper()
	st, err := p.Start(ctx, n)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return st
}

func testStartWindowThenCommit(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "start")
	commitSourced(t, ctx, s, id, 12)
	p := begin(s, id, "r13", 13)
	st := start(t, ctx, p, 20)
	if st.Decided || st.Cancelled {
		t.Fatalf("Start of a new request = %+v", st)
	}
	if err := equalMessages(st.Window, append(fixtureMessages(5, 24), p.Message())); err != nil {
		t.Fatalf("Start's window: %v", err)
	}
	c, err := p.Commit(ctx, "answer 13", "echo", events.StatusComplete, base.Add(2*time.Hour))
	if err != nil || c != (history.Committed{N: 13, Status: events.StatusComplete}) {
		t.Fatalf("Commit after Start = %+v, %v; want turn 13", c, err)
	}
	if got := window(t, ctx, s, id, 2); len(got) != 2 || got[1].Seq != 26 || got[1].Content != "answer 13" {
		t.Fatalf("window after the commit = %s", summary(got))
	}

	first := begin(s, newIdentity(t, "new"), "r1", 1)
	if st := start(t, ctx, first, 20); st.Decided || st.Cancelled || len(st.Window) != 1 {
		t.Fatalf("Start in a new conversation = %+v, want only the pending message", st)
	}
	if st := start(t, ctx, begin(s, id, "r14", 14), 0); st.Decided || st.Cancelled || len(st.Window) != 1 {
		t.Fatalf("Start with a window of 0 = %+v, want only the pending message", st)
	}
}

func testStartDecided(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "decided")
	commitSourced(t, ctx, s, id, 15)
	if _, err := s.RecordOutcome(ctx, id, "gone", events.StatusDiscarded); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		p    *history.Pending
		want history.Committed
	}{
		{"A redelivered request in the window is decided.", begin(s, id, "r14", 14), history.Committed{N: 14, Status: events.StatusComplete}},
		{"A redelivered request older than the window is decided.", begin(s, id, "r2", 2), history.Committed{N: 2, Status: events.StatusComplete}},
		{"A request with an outcome is decided.", begin(s, id, "gone", 16), history.Committed{Status: events.StatusDiscarded}},
		{"A request without a source is looked up too.", history.Begin(s, id, "r1", "question r1", base), history.Committed{N: 1, Status: events.StatusComplete}},
	}
	for _, tc := range tests {
		st := start(t, ctx, tc.p, 4)
		if !st.Decided || st.Committed != tc.want || st.Window != nil {
			t.Errorf("%s Start = %+v, want decided %+v", tc.name, st, tc.want)
		}
	}

	// An old record never committed is not decided; its commit is fenced.
	p := begin(s, id, "late", 3)
	if st := start(t, ctx, p, 4); st.Decided || st.Cancelled {
		t.Fatalf("Start of an old record never committed = %+v", st)
	}
	if _, err := p.Commit(ctx, "too late", "echo", events.StatusComplete, base); !errors.Is(err, history.ErrFenced) {
		t.Fatalf("Commit of an old record = %v, want ErrFenced", err)
	}
}

func testStartCancelled(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "cancelled")
	commitSourced(t, ctx, s, id, 3)
	for _, c := range []history.Cancel{
		{Topic: "requests", Partition: 0, RequestID: "r9"},
		{Topic: "requests", Partition: 0, Before: 6},
	} {
		if err := s.RecordCancel(ctx, id, c); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name               string
		p                  *history.Pending
		decided, cancelled bool
	}{
		{"A request cancelled by id is cancelled.", begin(s, id, "r9", 9), false, true},
		{"A request below a conversation-wide cancel is cancelled.", begin(s, id, "r5", 5), false, true},
		{"A request past the cancel's position runs.", begin(s, id, "r7", 7), false, false},
		{"A committed request covered by a cancel is decided: the first decision wins.", begin(s, id, "r3", 3), true, false},
		{"A cancel of another partition does not cover the request.", func() *history.Pending {
			p := history.Begin(s, id, "r9", "question r9", base)
			p.SetSource(history.Source{Topic: "requests", Partition: 1, Offset: 9})
			return p
		}(), false, false},
	}
	for _, tc := range tests {
		st := start(t, ctx, tc.p, 4)
		if st.Decided != tc.decided || st.Cancelled != tc.cancelled || (st.Window != nil) != (!tc.decided && !tc.cancelled) {
			t.Errorf("%s Start = %+v", tc.name, st)
		}
	}
}

func testStartStale(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "stale")
	commitSourced(t, ctx, s, id, 2)
	// Two requests start from the same newest turn; the second commits
	// after the first took the turn both expected to take.
	a, b := begin(s, id, "r3", 3), begin(s, id, "r4", 4)
	start(t, ctx, a, 4)
	start(t, ctx, b, 4)
	ca, err := a.Commit(ctx, "answer 3", "echo", events.StatusComplete, base)
	if err != nil || ca.N != 3 {
		t.Fatalf("first Commit = %+v, %v", ca, err)
	}
	cb, err := b.Commit(ctx, "answer 4", "echo", events.StatusComplete, base)
	if err != nil || cb.N != 4 || cb.Duplicate {
		t.Fatalf("Commit after another took the expected turn = %+v, %v; want turn 4", cb, err)
	}
	// A request committed by another worker while it ran is reported as a
	// duplicate of that turn.
	early := begin(s, id, "r5", 5)
	if st := start(t, ctx, early, 4); st.Decided {
		t.Fatalf("Start of r5 = %+v", st)
	}
	if _, err := s.Commit(ctx, id, sourced(5, at(5))); err != nil {
		t.Fatal(err)
	}
	c, err := early.Commit(ctx, "answer 5 again", "echo", events.StatusComplete, base)
	if err != nil || c != (history.Committed{N: 5, Status: events.StatusComplete, Duplicate: true}) {
		t.Fatalf("Commit of a request committed meanwhile = %+v, %v; want turn 5, duplicate", c, err)
	}
	// A request that started before a newer record was committed is
	// fenced by it.
	old := begin(s, id, "r6", 6)
	start(t, ctx, old, 4)
	if _, err := s.Commit(ctx, id, sourced(7, at(7))); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Commit(ctx, "answer 6", "echo", events.StatusComplete, base); !errors.Is(err, history.ErrFenced) {
		t.Fatalf("Commit after a newer record's = %v, want ErrFenced", err)
	}
	msgs := window(t, ctx, s, id, 100)
	var got string
	for _, m := range msgs {
		if m.Role == history.RoleUser {
			got += m.RequestID + " "
		}
	}
	if want := "r1 r2 r3 r4 r5 r7 "; got != want {
		t.Fatalf("turns = %q, want %q", got, want)
	}
	closed := begin(s, id, "r8", 8)
	closed.Discard()
	if _, err := closed.Start(ctx, 4); !errors.Is(err, history.ErrClosed) {
		t.Fatalf("Start after Discard = %v, want ErrClosed", err)
	}
}
