package historytest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// journalTests are the conformance tests of history.Journal, run by Run
// for a store that implements it.
var journalTests = []struct {
	name string
	run  func(t *testing.T, ctx context.Context, s history.Store, j history.Journal)
}{
	{"A journal keeps each step once, in order, and a key recorded again returns the step recorded first", testJournalRecord},
	{"A journal write of a run older than the journal's owner is fenced and writes nothing", testJournalFenced},
	{"A claim makes a newer run the owner, counts its run and fences every older run's write", testJournalClaim},
	{"A step two runs race to record is recorded once, and the older run is fenced or gets the winner's step", testJournalRace},
	{"Concurrent records of distinct keys by one run all land", testJournalConcurrentKeys},
	{"A step that would take the journal past its limit is refused and the journal keeps the others", testJournalFull},
	{"Truncating keeps a prefix of the steps, and a journal deleted by its owner is gone (an older run cannot delete it)", testJournalTruncateDelete},
	{"Start reports a request's journal, decided or not, and none of another request or identity", testJournalStart},
	{"Invalid journal writes are rejected and write nothing", testJournalInvalid},
}

func runJournal(t *testing.T, newStore func(t *testing.T) history.Store) {
	for _, tc := range journalTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			t.Cleanup(cancel)
			s := newStore(t)
			j, ok := s.(history.Journal)
			if !ok {
				t.Skipf("%T is not a history.Journal", s)
			}
			tc.run(t, ctx, s, j)
		})
	}
}

func step(key, data string) history.Step {
	return history.Step{Key: key, Hash: "h-" + key, Data: []byte(data)}
}

func record(t *testing.T, ctx context.Context, j history.Journal, id events.Identity, rid string, owner int64, s history.Step) history.Step {
	t.Helper()
	got, err := j.RecordStep(ctx, id, rid, owner, s, history.JournalLimits{})
	if err != nil {
		t.Fatalf("RecordStep(%s, owner %d): %v", s.Key, owner, err)
	}
	return got
}

func journalOf(t *testing.T, ctx context.Context, j history.Journal, id events.Identity, rid string) (history.Steps, bool) {
	t.Helper()
	js, found, err := j.Steps(ctx, id, rid)
	if err != nil {
		t.Fatalf("Steps(%s): %v", rid, err)
	}
	return js, found
}

// keysOf lists a journal's keys and data: "k=data k=data".
func keysOf(js history.Steps) string {
	var b strings.Builder
	for i, s := range js.Steps {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", s.Key, s.Data)
	}
	return b.String()
}

func testJournalRecord(t *testing.T, ctx context.Context, _ history.Store, j history.Journal) {
	id := newIdentity(t, "journal")
	if _, found := journalOf(t, ctx, j, id, "r1"); found {
		t.Fatal("a request that recorded nothing has a journal")
	}
	first := record(t, ctx, j, id, "r1", 7, step("m/a/1", "calls"))
	if first.Owner != 7 || string(first.Data) != "calls" || first.At.IsZero() || first.Hash != "h-m/a/1" {
		t.Fatalf("RecordStep returned %+v, want the step with owner 7 and a time", first)
	}
	record(t, ctx, j, id, "r1", 7, step("t/a/1/c1", "result"))
	again := record(t, ctx, j, id, "r1", 7, step("m/a/1", "other"))
	if string(again.Data) != "calls" || again.Owner != 7 {
		t.Fatalf("recording m/a/1 again returned %+v, want the step recorded first", again)
	}
	js, found := journalOf(t, ctx, j, id, "r1")
	if !found || keysOf(js) != "m/a/1=calls t/a/1/c1=result" || js.Owner != 7 || js.Runs != 1 {
		t.Fatalf("journal %q (owner %d, runs %d, found %v), want two steps once each, owner 7, one run", keysOf(js), js.Owner, js.Runs, found)
	}
	if want := len("m/a/1h-m/a/1calls") + len("t/a/1/c1h-t/a/1/c1result"); js.Bytes != want {
		t.Errorf("journal bytes %d, want %d", js.Bytes, want)
	}
	if _, found := journalOf(t, ctx, j, id, "r2"); found {
		t.Error("another request of the conversation has a journal")
	}
	// A step's state changes come back with it, and count in its size.
	withState := step("t/a/1/c2", "result")
	withState.State = []byte(`[{"k":"user:lang","v":"\"fr\""}]`)
	record(t, ctx, j, id, "r1", 7, withState)
	js, _ = journalOf(t, ctx, j, id, "r1")
	if got := js.Steps[len(js.Steps)-1]; string(got.State) != string(withState.State) || js.Steps[0].State != nil {
		t.Errorf("the steps' state %q and %q, want %q and none", got.State, js.Steps[0].State, withState.State)
	}
}

func testJournalFenced(t *testing.T, ctx context.Context, _ history.Store, j history.Journal) {
	id := newIdentity(t, "zombie")
	record(t, ctx, j, id, "r1", 5, step("m/a/1", "zombie's"))
	record(t, ctx, j, id, "r1", 9, step("t/a/1/c1", "owner's"))
	// The zombie (owner 5) writes late, after the new owner (9) wrote.
	if got, err := j.RecordStep(ctx, id, "r1", 5, step("t/a/1/c2", "late"), history.JournalLimits{}); !errors.Is(err, history.ErrFenced) {
		t.Fatalf("the zombie's late write = %+v, %v; want ErrFenced", got, err)
	}
	if _, err := j.RecordStep(ctx, id, "r1", 5, step("t/a/1/c1", "late"), history.JournalLimits{}); !errors.Is(err, history.ErrFenced) {
		t.Fatalf("the zombie's late write of a recorded key = %v; want ErrFenced", err)
	}
	if err := j.TruncateSteps(ctx, id, "r1", 5, 0); !errors.Is(err, history.ErrFenced) {
		t.Fatalf("the zombie's truncate = %v; want ErrFenced", err)
	}
	js, _ := journalOf(t, ctx, j, id, "r1")
	if keysOf(js) != "m/a/1=zombie's t/a/1/c1=owner's" || js.Owner != 9 {
		t.Fatalf("journal %q owner %d after the zombie's writes, want them refused", keysOf(js), js.Owner)
	}
}

func testJournalClaim(t *testing.T, ctx context.Context, _ history.Store, j history.Journal) {
	id := newIdentity(t, "claim")
	if runs, err := j.ClaimSteps(ctx, id, "r1", 3); err != nil || runs != 0 {
		t.Fatalf("claiming a missing journal = %d, %v; want 0, nil", runs, err)
	}
	if _, found := journalOf(t, ctx, j, id, "r1"); found {
		t.Fatal("a claim created a journal")
	}
	record(t, ctx, j, id, "r1", 3, step("m/a/1", "x"))
	if runs, err := j.ClaimSteps(ctx, id, "r1", 4); err != nil || runs != 2 {
		t.Fatalf("the second run's claim = %d, %v; want run 2", runs, err)
	}
	if runs, err := j.ClaimSteps(ctx, id, "r1", 8); err != nil || runs != 3 {
		t.Fatalf("the third run's claim = %d, %v; want run 3", runs, err)
	}
	for _, owner := range []int64{4, 8} {
		if _, err := j.ClaimSteps(ctx, id, "r1", owner); !errors.Is(err, history.ErrFenced) {
			t.Errorf("a claim of owner %d after owner 8 = %v; want ErrFenced", owner, err)
		}
	}
	if _, err := j.RecordStep(ctx, id, "r1", 4, step("t/a/1/c1", "y"), history.JournalLimits{}); !errors.Is(err, history.ErrFenced) {
		t.Fatalf("a write of owner 4 after owner 8's claim = %v; want ErrFenced", err)
	}
	js, _ := journalOf(t, ctx, j, id, "r1")
	if keysOf(js) != "m/a/1=x" || js.Owner != 8 || js.Runs != 3 {
		t.Fatalf("journal %q owner %d runs %d, want one step, owner 8, 3 runs", keysOf(js), js.Owner, js.Runs)
	}
}

func testJournalRace(t *testing.T, ctx context.Context, _ history.Store, j history.Journal) {
	id := newIdentity(t, "race")
	const rounds = 8
	for r := range rounds {
		rid := fmt.Sprintf("r%d", r)
		var wg sync.WaitGroup
		got := make([]history.Step, 2)
		errs := make([]error, 2)
		for i, owner := range []int64{10, 20} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], errs[i] = j.RecordStep(ctx, id, rid, owner, step("m/a/1", fmt.Sprint(owner)), history.JournalLimits{})
			}()
		}
		wg.Wait()
		js, _ := journalOf(t, ctx, j, id, rid)
		if len(js.Steps) != 1 {
			t.Fatalf("round %d: the raced step is recorded %d times: %q", r, len(js.Steps), keysOf(js))
		}
		winner := js.Steps[0]
		for i, owner := range []int64{10, 20} {
			switch {
			case errs[i] == nil && (got[i].Owner != winner.Owner || string(got[i].Data) != string(winner.Data)):
				t.Errorf("round %d: owner %d was told the step is %s's, the journal holds %s's", r, owner, got[i].Data, winner.Data)
			case errs[i] != nil && (owner != 10 || !errors.Is(errs[i], history.ErrFenced)):
				t.Errorf("round %d: owner %d: %v; only the older run may be refused, and only as fenced", r, owner, errs[i])
			}
		}
	}
}

func testJournalConcurrentKeys(t *testing.T, ctx context.Context, _ history.Store, j history.Journal) {
	id := newIdentity(t, "parallel")
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := j.RecordStep(ctx, id, "r1", 1, step(fmt.Sprintf("t/a/1/c%02d", i), "ok"), history.JournalLimits{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("RecordStep: %v", err)
	}
	js, _ := journalOf(t, ctx, j, id, "r1")
	if len(js.Steps) != n || js.Bytes != n*len("t/a/1/c00h-t/a/1/c00ok") {
		t.Fatalf("%d concurrent steps left %d in the journal (%d bytes): %q", n, len(js.Steps), js.Bytes, keysOf(js))
	}
}

func testJournalFull(t *testing.T, ctx context.Context, _ history.Store, j history.Journal) {
	id := newIdentity(t, "full")
	limit := history.JournalLimits{MaxBytes: 64}
	big := history.Step{Key: "m/a/1", Data: make([]byte, 65)}
	if _, err := j.RecordStep(ctx, id, "r1", 1, big, limit); !errors.Is(err, history.ErrJournalFull) {
		t.Fatalf("a step over the limit = %v; want ErrJournalFull", err)
	}
	if _, found := journalOf(t, ctx, j, id, "r1"); found {
		t.Fatal("a refused first step created a journal")
	}
	small := history.Step{Key: "m/a/1", Data: make([]byte, 40)}
	if _, err := j.RecordStep(ctx, id, "r1", 1, small, limit); err != nil {
		t.Fatal(err)
	}
	if _, err := j.RecordStep(ctx, id, "r1", 1, history.Step{Key: "t/a/1/c1", Data: make([]byte, 40)}, limit); !errors.Is(err, history.ErrJournalFull) {
		t.Fatalf("a step past the journal's limit = %v; want ErrJournalFull", err)
	}
	if _, err := j.RecordStep(ctx, id, "r1", 1, history.Step{Key: "t/a/1/c2", Data: []byte("fits")}, limit); err != nil {
		t.Fatalf("a step that fits after a refused one: %v", err)
	}
	js, _ := journalOf(t, ctx, j, id, "r1")
	if len(js.Steps) != 2 || js.Steps[0].Key != "m/a/1" || js.Steps[1].Key != "t/a/1/c2" || js.Bytes != 5+40+8+4 {
		t.Fatalf("journal %q of %d bytes, want the two steps that fit", keysOf(js), js.Bytes)
	}
}

func testJournalTruncateDelete(t *testing.T, ctx context.Context, _ history.Store, j history.Journal) {
	id := newIdentity(t, "truncate")
	for _, k := range []string{"m/a/1", "t/a/1/c1", "m/a/2", "t/a/2/c1"} {
		record(t, ctx, j, id, "r1", 2, step(k, "d"))
	}
	if err := j.TruncateSteps(ctx, id, "r1", 3, 2); err != nil {
		t.Fatal(err)
	}
	js, _ := journalOf(t, ctx, j, id, "r1")
	if keysOf(js) != "m/a/1=d t/a/1/c1=d" || js.Owner != 3 || js.Bytes != len("m/a/1h-m/a/1d")+len("t/a/1/c1h-t/a/1/c1d") {
		t.Fatalf("after truncating to 2: %q owner %d bytes %d", keysOf(js), js.Owner, js.Bytes)
	}
	if got := record(t, ctx, j, id, "r1", 3, step("m/a/2", "new")); string(got.Data) != "new" {
		t.Fatalf("a truncated key recorded again returned %q, want the new step", got.Data)
	}
	if err := j.DeleteSteps(ctx, id, "r1", 2); !errors.Is(err, history.ErrFenced) {
		t.Fatalf("an older run's delete = %v; want ErrFenced", err)
	}
	if _, found := journalOf(t, ctx, j, id, "r1"); !found {
		t.Fatal("an older run deleted the journal")
	}
	if err := j.DeleteSteps(ctx, id, "r1", 3); err != nil {
		t.Fatal(err)
	}
	if _, found := journalOf(t, ctx, j, id, "r1"); found {
		t.Fatal("a deleted journal is still there")
	}
	if err := j.DeleteSteps(ctx, id, "r1", 3); err != nil {
		t.Fatalf("deleting a missing journal: %v", err)
	}
	if err := j.TruncateSteps(ctx, id, "r1", 3, 0); err != nil {
		t.Fatalf("truncating a missing journal: %v", err)
	}
	if _, found := journalOf(t, ctx, j, id, "r1"); found {
		t.Fatal("truncating a missing journal created one")
	}
}

func testJournalStart(t *testing.T, ctx context.Context, s history.Store, j history.Journal) {
	id := newIdentity(t, "start")
	other := id
	other.User = "bob"
	commitSourced(t, ctx, s, id, 2)
	record(t, ctx, j, id, "r3", 4, step("m/a/1", "calls"))
	record(t, ctx, j, other, "r4", 4, step("m/a/1", "bob's"))

	st := start(t, ctx, begin(s, id, "r3", 3), 20)
	if st.Decided || st.Steps == nil || keysOf(*st.Steps) != "m/a/1=calls" || st.Steps.Owner != 4 || st.Steps.Runs != 1 {
		t.Fatalf("Start of a request with a journal = %+v", st)
	}
	if st := start(t, ctx, begin(s, id, "r4", 4), 20); st.Steps != nil {
		t.Fatalf("Start of a request without a journal found %+v (another identity's)", *st.Steps)
	}
	record(t, ctx, j, id, "r2", 4, step("m/a/1", "left behind"))
	st = start(t, ctx, begin(s, id, "r2", 2), 20)
	if !st.Decided || st.Steps == nil || keysOf(*st.Steps) != "m/a/1=left behind" {
		t.Fatalf("Start of a committed request whose journal was left behind = %+v, want decided with the journal", st)
	}
}

func testJournalInvalid(t *testing.T, ctx context.Context, _ history.Store, j history.Journal) {
	id := newIdentity(t, "invalid")
	bad := []struct {
		id    events.Identity
		rid   string
		owner int64
		s     history.Step
		l     history.JournalLimits
	}{
		{events.Identity{}, "r1", 1, step("k", "d"), history.JournalLimits{}},
		{id, "", 1, step("k", "d"), history.JournalLimits{}},
		{id, "r1", 0, step("k", "d"), history.JournalLimits{}},
		{id, "r1", 1, step("", "d"), history.JournalLimits{}},
		{id, "r1", 1, step(strings.Repeat("k", history.MaxStepKeyBytes+1), "d"), history.JournalLimits{}},
		{id, "r1", 1, step("k", "d"), history.JournalLimits{MaxBytes: history.MaxJournalBytes + 1}},
	}
	for i, b := range bad {
		if _, err := j.RecordStep(ctx, b.id, b.rid, b.owner, b.s, b.l); !errors.Is(err, events.ErrInvalid) {
			t.Errorf("case %d: RecordStep = %v, want ErrInvalid", i, err)
		}
	}
	if _, err := j.ClaimSteps(ctx, id, "r1", -1); !errors.Is(err, events.ErrInvalid) {
		t.Errorf("ClaimSteps with a negative owner = %v, want ErrInvalid", err)
	}
	if _, found := journalOf(t, ctx, j, id, "r1"); found {
		t.Error("an invalid write created a journal")
	}
}
