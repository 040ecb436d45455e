package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

func TestWorkerAnswersInOrderAndPersistsTurns(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "c1"}
	for i, c := range []string{"one", "two", "three"} {
		s.produce(t, ctx, id.Key(), request(id, "req-"+string(rune('a'+i)), c))
	}
	s.start(t, ctx, worker.Deps{})
	got := s.stream(t).untilCompleted(t, ctx, 3)
	for i, want := range []string{"echo #1: one", "echo #2: two", "echo #3: three"} {
		evs := got["req-"+string(rune('a'+i))]
		txt, st := text(evs)
		if txt != want || st != events.StatusComplete || evs[0].Type() != events.TypeRunStarted {
			t.Fatalf("request %d streamed %q (%s), want %q complete after run.started", i, txt, st, want)
		}
	}
	page, err := s.store.List(ctx, id, 0, 50)
	if err != nil || len(page.Messages) != 6 {
		t.Fatalf("history %+v, %v: want 6 messages", page, err)
	}
	if m := page.Messages[5]; m.Content != "echo #3: three" || m.Status != events.StatusComplete || m.Seq != 6 {
		t.Fatalf("last message %+v", m)
	}
}

func TestInvalidRecordsGoToTheDeadLetterTopicAndTheNextIsProcessed(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "c1"}
	other := events.Identity{Tenant: "acme", User: "bob", Conversation: "c1"}
	bad := []struct {
		name, key string
		value     []byte
		reason    string
	}{
		{"not JSON", id.Key(), []byte("{nope"), "json"},
		{"wrong version", id.Key(), []byte(`{"v":2,"tenant":"acme","user":"ann","conversation":"c1","content":"x"}`), "v: 2"},
		{"a key of another identity", other.Key(), request(id, "req-x", "spoof"), "does not match"},
		{"unknown field", id.Key(), []byte(`{"v":1,"tenant":"acme","user":"ann","conversation":"c1","content":"x","admin":true}`), "unknown field"},
		{"a reset with content", id.Key(), []byte(`{"v":1,"tenant":"acme","user":"ann","conversation":"c1","content":"x","reset":{"state":true}}`), "a reset has no content"},
		{"a reset that clears nothing", id.Key(), []byte(`{"v":1,"tenant":"acme","user":"ann","conversation":"c1","content":"","reset":{}}`), "clears nothing"},
		{"a reset with an unknown part", id.Key(), []byte(`{"v":1,"tenant":"acme","user":"ann","conversation":"c1","content":"","reset":{"state":true,"user":true}}`), "unknown field"},
	}
	for _, b := range bad {
		s.produce(t, ctx, b.key, b.value)
	}
	s.produce(t, ctx, id.Key(), request(id, "req-ok", "fine"))
	s.start(t, ctx, worker.Deps{})
	got := s.stream(t).untilCompleted(t, ctx, 1)
	if txt, st := text(got["req-ok"]); txt != "echo #1: fine" || st != events.StatusComplete {
		t.Fatalf("valid record after bad ones: %q %s", txt, st)
	}
	dlq := kafka.NewReader(kafka.ReaderConfig{Brokers: s.brokers, GroupID: testenv.Name(t, "dlq"), Topic: s.topics.DLQ, StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
	defer dlq.Close()
	seen := map[string]bool{}
	for range bad {
		m, err := dlq.ReadMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h := map[string]string{}
		for _, x := range m.Headers {
			h[x.Key] = string(x.Value)
		}
		if h[worker.HeaderSourceTopic] != s.topics.Requests || h[worker.HeaderSourcePartition] == "" || h[worker.HeaderSourceOffset] == "" {
			t.Fatalf("DLQ record lacks source headers: %v", h)
		}
		for _, b := range bad {
			if string(m.Value) == string(b.value) && string(m.Key) == b.key {
				if !strings.Contains(h[worker.HeaderDLQReason], b.reason) {
					t.Errorf("%s: reason %q does not mention %q", b.name, h[worker.HeaderDLQReason], b.reason)
				}
				seen[b.name] = true
			}
		}
	}
	if len(seen) != len(bad) {
		t.Fatalf("dead-lettered %v, want all of %d kept byte for byte", seen, len(bad))
	}
	if _, err := s.store.List(ctx, other, 0, 10); !errors.Is(err, history.ErrNotFound) {
		t.Fatalf("the spoofed record persisted something for bob: %v", err)
	}
}

func TestARedeliveredRequestCompletesWithoutRunningAgain(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "dup"}
	s.produce(t, ctx, id.Key(), request(id, "req-1", "hello"))
	s.produce(t, ctx, id.Key(), request(id, "req-1", "hello"))
	reg := prometheus.NewRegistry()
	s.start(t, ctx, worker.Deps{Registerer: reg})
	got := s.stream(t).untilCompleted(t, ctx, 2)
	var started, completed int
	for _, e := range got["req-1"] {
		switch e.Type() {
		case events.TypeRunStarted:
			started++
		case events.TypeRunCompleted:
			completed++
			if e.(*events.RunCompletedEvent).Status != events.StatusComplete {
				t.Fatalf("duplicate completed %s", e.(*events.RunCompletedEvent).Status)
			}
		}
	}
	if started != 1 || completed != 2 {
		t.Fatalf("run.started %d, run.completed %d: want the model run once and both records completed", started, completed)
	}
	page, err := s.store.List(ctx, id, 0, 10)
	if err != nil || len(page.Messages) != 2 {
		t.Fatalf("history %+v %v: want exactly one turn", page, err)
	}
}

// flakyStore fails the first n commits, as a MongoDB outage would.
type flakyStore struct {
	history.Store
	fails atomic.Int32
}

func (f *flakyStore) Commit(ctx context.Context, id events.Identity, t history.Turn) (history.Committed, error) {
	if f.fails.Add(-1) >= 0 {
		return history.Committed{}, errors.New("mongo unavailable")
	}
	return f.Store.Commit(ctx, id, t)
}

func TestAStoreOutageIsRetriedWithoutLosingOrDuplicatingTheTurn(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store := &flakyStore{Store: history.NewMemoryStore()}
	store.fails.Store(3)
	s := newStack(t, store)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "flaky"}
	s.produce(t, ctx, id.Key(), request(id, "req-1", "persist me"))
	s.produce(t, ctx, id.Key(), request(id, "req-2", "and me"))
	s.start(t, ctx, worker.Deps{})
	got := s.stream(t).untilCompleted(t, ctx, 2)
	if txt, st := text(got["req-2"]); txt != "echo #2: and me" || st != events.StatusComplete {
		t.Fatalf("second request: %q %s", txt, st)
	}
	page, err := s.store.List(ctx, id, 0, 10)
	if err != nil || len(page.Messages) != 4 || page.Messages[1].Content != "echo #1: persist me" {
		t.Fatalf("history %+v %v", page, err)
	}
}

func TestDirectivesShapeTheRun(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "shapes"}
	s.produce(t, ctx, id.Key(), request(id, "req-fail", "a b c d e [[fail-after:3]]"))
	s.produce(t, ctx, id.Key(), request(id, "req-empty", "[[empty]]"))
	s.start(t, ctx, worker.Deps{})
	got := s.stream(t).untilCompleted(t, ctx, 2)
	txt, st := text(got["req-fail"])
	if txt != "echo #1: a " || st != events.StatusIncomplete {
		t.Fatalf("fail-after:3 streamed %q %s", txt, st)
	}
	var notices int
	for _, e := range got["req-fail"] {
		if e.Type() == events.TypeNotice {
			notices++
		}
	}
	if notices != 1 {
		t.Fatalf("%d notices, want 1", notices)
	}
	if _, st := text(got["req-empty"]); st != events.StatusDiscarded {
		t.Fatalf("empty: %s", st)
	}
	page, err := s.store.List(ctx, id, 0, 10)
	if err != nil || len(page.Messages) != 2 {
		t.Fatalf("history %+v %v: want only the incomplete turn", page, err)
	}
	if m := page.Messages[1]; m.Content != "echo #1: a " || m.Status != events.StatusIncomplete || m.Incomplete() != true {
		t.Fatalf("incomplete message %+v", m)
	}
	if m := page.Messages[0]; m.Content != "a b c d e [[fail-after:3]]" {
		t.Fatalf("user message not verbatim: %q", m.Content)
	}
}

func TestRestartResumesFromTheCommittedOffset(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 90*time.Second)
	s := newStack(t, history.NewMemoryStore())
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "restart"}
	s.produce(t, ctx, id.Key(), request(id, "req-1", "first"))
	reg1 := prometheus.NewRegistry()
	stop := s.start(t, ctx, worker.Deps{Registerer: reg1})
	sr := s.stream(t)
	sr.untilCompleted(t, ctx, 1)
	stop()
	s.produce(t, ctx, id.Key(), request(id, "req-2", "second"))
	reg2 := prometheus.NewRegistry()
	s.start(t, ctx, worker.Deps{Registerer: reg2})
	got := sr.untilCompleted(t, ctx, 1)
	if txt, _ := text(got["req-2"]); txt != "echo #2: second" {
		t.Fatalf("after restart: %q", txt)
	}
	if _, ok := got["req-1"]; ok {
		t.Fatal("the committed record was processed again after a clean restart")
	}
}

func TestTwoWorkersOnTheSameRecordsPersistEachTurnOnceAndInOrder(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 90*time.Second)
	const convs, msgs = 6, 5
	store := history.NewMemoryStore()
	s := newStack(t, store)
	s.cfg.Partitions = 1
	produceAll(t, ctx, s, convs, msgs)
	// Two workers in different groups both own every partition: each
	// behaves as a zombie to the other.
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	s.start(t, ctx, worker.Deps{Model: &probeModel{}, Registerer: regA})
	other := s.cfg
	other.GroupID = testenv.Name(t, "zombie")
	w, err := worker.NewConsumer(other, worker.Deps{Store: store, Model: &probeModel{}, Registerer: regB})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); <-done }()
	// Each request completes twice (once per worker).
	s.stream(t).untilCompleted(t, ctx, 2*convs*msgs)
	checkHistory(t, ctx, store, convs, msgs)
}

// The step journal's owner tokens order the runs of a request: a later
// run in one worker is higher, and the first run of a new owner in a later
// generation is higher than any run of a worker of an earlier one (a
// zombie), however many runs that worker made.
func TestAnOwnerTokenOfALaterGenerationIsHigherThanAnyOfAnEarlierOne(t *testing.T) {
	t.Parallel()
	zombie, owner := worker.NewOwnerTokens(), worker.NewOwnerTokens()
	var last int64
	for range 1000 {
		next := zombie(5)
		if next <= last {
			t.Fatalf("a later run of one worker got token %d after %d", next, last)
		}
		last = next
	}
	if first := owner(6); first <= last {
		t.Fatalf("the new owner's first run in generation 6 got %d, not above the zombie's %d of generation 5", first, last)
	}
}

// A running worker sweeps the expired step journals (of requests that
// never reached a durable end) on a store without a TTL index (FerretDB),
// at each tick of its sweep, and counts them; a journal that has not
// expired stays.
func TestARunningWorkerSweepsExpiredJournalsAndCountsThem(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	db := testenv.MongoDB(t)
	store, err := history.NewMongoStore(ctx, db, history.MongoConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// A journal last written two days ago, with the default TTL (a day).
	then := time.Now().Add(-48 * time.Hour)
	old, err := history.NewMongoStore(ctx, db, history.MongoConfig{Now: func() time.Time { return then }})
	if err != nil {
		t.Fatal(err)
	}
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "sweep"}
	step := history.Step{Key: "m/assistant/1", Data: []byte("{}")}
	if _, err := old.RecordStep(ctx, id, "stale", 1, step, history.JournalLimits{}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.RecordStep(ctx, id, "fresh", 1, step, history.JournalLimits{}); err != nil {
		t.Fatal(err)
	}
	s := newStack(t, store)
	reg := prometheus.NewRegistry()
	w := s.newWorker(t, worker.Deps{Registerer: reg})
	ticks := make(chan time.Time)
	worker.SetJournalSweeps(w, ticks)
	s.run(t, ctx, w)
	select {
	case ticks <- time.Now(): // the sweeper took it
	case <-ctx.Done():
		t.Fatal("the worker's sweeper never took its tick: no sweep runs")
	}
	waitCounter(t, ctx, reg, 1, "turnpike_worker_journal_swept_total")
	if _, found, err := store.Steps(ctx, id, "stale"); found || err != nil {
		t.Errorf("the expired journal is still there (%v)", err)
	}
	if _, found, err := store.Steps(ctx, id, "fresh"); !found || err != nil {
		t.Errorf("the fresh journal was swept (%v)", err)
	}
}

// A consumer group's generations start at 1 again when the group is
// recreated (deleted, renamed, its broker state lost), so a request
// delivered again to the new group (a replay of the requests topic into
// it, a deploy under a new group name) may find a journal an old group's
// run left with an owner token above every one of the new group. Such a
// journal is not the new group's to trust or to write: while it may still
// be written (its last write is less than a run's length old: its run, or
// a newer owner's if this worker is a zombie, may be running) the record
// is retried, never dropped, and the journal is left as it is; once it is
// older than a run, the request runs live without it and completes.
func TestARequestWhoseJournalAnOldGroupLeftIsRetriedThenRunsWithoutIt(t *testing.T) {
	t.Parallel()
	for _, row := range []struct {
		name    string
		written time.Duration // how long ago the old group's run wrote it
	}{
		{"A journal of a later generation written a moment ago is left alone and the record retried, not dropped.", 0},
		{"A journal of a later generation not written for longer than a run is ignored: the request runs and completes.", time.Hour},
	} {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 60*time.Second)
			db := testenv.MongoDB(t)
			store, err := history.NewMongoStore(ctx, db, history.MongoConfig{})
			if err != nil {
				t.Fatal(err)
			}
			then := time.Now().Add(-row.written)
			oldGroup, err := history.NewMongoStore(ctx, db, history.MongoConfig{Now: func() time.Time { return then }})
			if err != nil {
				t.Fatal(err)
			}
			id := events.Identity{Tenant: "acme", User: "ann", Conversation: "regrouped"}
			// The old group's run of req-1, in its generation 50, recorded a
			// step and never ended.
			oldOwner := worker.NewOwnerTokens()(50)
			if _, err := oldGroup.RecordStep(ctx, id, "req-1", oldOwner, history.Step{Key: "m/assistant/1", Data: []byte("{}")}, history.JournalLimits{}); err != nil {
				t.Fatal(err)
			}
			s := newStack(t, store) // a new group: its generations start at 1
			s.cfg.Partitions = 1
			s.ensureTopics(t, ctx, 1)
			s.produce(t, ctx, id.Key(), request(id, "req-1", "hello again"))
			reg := prometheus.NewRegistry()
			s.start(t, ctx, worker.Deps{Registerer: reg})
			// Whichever comes first ends the wait, so that a broken
			// worker fails the test at once: three retries, the record
			// dropped as fenced, or the request decided.
			var retries, fenced float64
			var decided bool
			for {
				retries = counterValue(t, reg, "turnpike_worker_retries_total")
				fenced = counterValue(t, reg, "turnpike_worker_fenced_total")
				if _, decided, err = store.Lookup(ctx, id, "req-1"); err != nil {
					t.Fatal(err)
				}
				if retries >= 3 || fenced > 0 || decided {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("req-1 was neither retried 3 times (%v), dropped as fenced nor decided", retries)
				case <-time.After(10 * time.Millisecond):
				}
			}
			if fenced != 0 {
				t.Fatalf("%v records dropped as fenced, want none", fenced)
			}
			if row.written == 0 {
				// The record is retried (a zombie would retry until it
				// learns it lost the partition), not dropped as fenced.
				if retries < 3 || decided {
					t.Errorf("req-1 retried %v times, decided %v: want it retried, undecided, while the journal may still be written", retries, decided)
				}
				js, found, err := store.Steps(ctx, id, "req-1")
				if err != nil || !found || js.Owner != oldOwner || js.Runs != 1 || len(js.Steps) != 1 {
					t.Errorf("the old group's journal %+v (found %v, %v): want it untouched", js, found, err)
				}
				return
			}
			if !decided {
				t.Fatalf("req-1 was retried %v times, not run: want it run without the stale journal", retries)
			}
			evs := s.stream(t).untilCompleted(t, ctx, 1)["req-1"]
			if answer, st := text(evs); st != events.StatusComplete || answer != "echo #1: hello again" {
				t.Fatalf("req-1 ended %s with %q, want complete", st, answer)
			}
			js, found, err := store.Steps(ctx, id, "req-1")
			if err != nil || !found || js.Owner != oldOwner || len(js.Steps) != 1 {
				t.Errorf("the old group's journal %+v (found %v, %v): want it untouched (it expires)", js, found, err)
			}
		})
	}
}
