package worker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// Under --ordering=partition every record of a partition shares one
// queue, but the send strategies still apply per conversation
// (docs/api.md "Ordering and strategies"): an interrupting request of
// conversation A cancels A's queued request and nothing of B's, neither
// B's running request nor the one queued behind it; a rejecting request
// of conversation C, which has nothing running, runs.
func TestStrategiesUnderPartitionOrderingTouchOnlyTheirOwnConversation(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store := history.NewMemoryStore()
	s := newStack(t, store)
	s.cfg.Partitions = 1
	s.cfg.Ordering = "partition"
	s.ensureTopics(t, ctx, 1)
	a := events.Identity{Tenant: "acme", User: "ann", Conversation: "a"}
	b := events.Identity{Tenant: "acme", User: "ann", Conversation: "b"}
	c := events.Identity{Tenant: "acme", User: "ann", Conversation: "c"}
	records := []struct {
		id                 events.Identity
		requestID, content string
		strategy           events.Strategy
		wantStatus         events.Status
		wantRun            bool // and its answer streamed
	}{
		{b, "b1", "b m1", events.StrategyEnqueue, events.StatusComplete, true},
		{a, "a1", "a m1", events.StrategyEnqueue, events.StatusCancelled, false},
		{b, "b2", "b m2", events.StrategyEnqueue, events.StatusComplete, true},
		{a, "a2", "a m2", events.StrategyInterrupt, events.StatusComplete, true},
		{c, "c1", "c m1", events.StrategyReject, events.StatusComplete, true},
	}
	produce := func(which ...int) {
		t.Helper()
		var batch []kafka.Message
		for _, i := range which {
			r := records[i]
			batch = append(batch, kafka.Message{Key: []byte(r.id.Key()), Value: strategyRequest(r.id, r.requestID, r.content, r.strategy)})
		}
		testenv.Produce(t, ctx, s.brokers, s.topics.Requests, batch...)
	}

	m := newGatedModel("b m1")
	gate := m.gate("b m1")
	reg := prometheus.NewRegistry()
	produce(0, 1, 2)
	s.start(t, ctx, worker.Deps{Model: m, Registerer: reg})
	// B's first request is running (its model was called, so the run is
	// registered for cancels) before the strategies' records arrive.
	testenv.Eventually(t, ctx, "b m1 running", func() bool { return m.ran()["b m1"] == 1 })
	produce(3, 4)
	// It holds the partition's queue until every record is dispatched
	// behind it: a record is counted in flight once its strategy was
	// applied at dispatch.
	testenv.Eventually(t, ctx, "every record dispatched", func() bool {
		return testenv.MetricValue(t, reg, "turnpike_worker_inflight_records") == float64(len(records))
	})
	close(gate)

	got := s.stream(t).untilCompleted(t, ctx, len(records))
	ran := m.ran()
	for _, r := range records {
		txt, st := text(got[r.requestID])
		if st != r.wantStatus {
			t.Errorf("%s (%s, %s) completed %s, want %s", r.requestID, r.content, r.strategy, st, r.wantStatus)
		}
		if want := map[bool]string{true: "ok " + r.content, false: ""}[r.wantRun]; txt != want {
			t.Errorf("%s streamed %q, want %q", r.requestID, txt, want)
		}
		if (ran[r.content] == 1) != r.wantRun || ran[r.content] > 1 {
			t.Errorf("%s ran %d times, want it run: %v", r.requestID, ran[r.content], r.wantRun)
		}
	}
	for _, id := range []events.Identity{a, b, c} {
		page, err := store.List(ctx, id, 0, 10)
		if err != nil {
			t.Fatalf("history of %s: %v", id.Conversation, err)
		}
		var turns int
		for _, msg := range page.Messages {
			if msg.Role == history.RoleAssistant {
				turns++
				if msg.Status != events.StatusComplete {
					t.Errorf("%s: a turn persisted %s: %+v", id.Conversation, msg.Status, msg)
				}
			}
		}
		if want := map[string]int{"a": 1, "b": 2, "c": 1}[id.Conversation]; turns != want {
			t.Errorf("%s holds %d turns, want %d", id.Conversation, turns, want)
		}
	}
	// a1 was cancelled while queued, not while running.
	if n := testenv.MetricValue(t, reg, "turnpike_worker_cancelled_runs_total"); n != 0 {
		t.Errorf("cancelled_runs_total %v, want 0: no run was running when its interrupt came", n)
	}
}

// A record repeating the request id of one running is a duplicate, never
// rejected nor interrupting (docs/api.md "Ordering and strategies"):
// whatever its strategy, it completes as the original did, and the
// original runs on undisturbed, once.
func TestADuplicateOfARunningRequestIsNeitherRejectedNorInterrupting(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store := history.NewMemoryStore()
	s := newStack(t, store)
	s.cfg.Partitions = 1
	s.ensureTopics(t, ctx, 1)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "dup"}
	m := newGatedModel("dup m1")
	gate := m.gate("dup m1")
	reg := prometheus.NewRegistry()
	s.produce(t, ctx, id.Key(), strategyRequest(id, "r1", "dup m1", events.StrategyEnqueue))
	s.start(t, ctx, worker.Deps{Model: m, Registerer: reg})
	testenv.Eventually(t, ctx, "r1 running", func() bool { return m.ran()["dup m1"] == 1 })
	for _, strategy := range []events.Strategy{events.StrategyReject, events.StrategyInterrupt} {
		s.produce(t, ctx, id.Key(), strategyRequest(id, "r1", "dup m1", strategy))
	}
	// Both duplicates dispatched (strategies apply at dispatch, and a
	// record counts in flight once its strategy was applied): three
	// records in flight; or, if a strategy was wrongly applied, r1
	// already decided (rejected, or its run cancelled) while its model
	// still holds.
	testenv.Eventually(t, ctx, "the duplicates dispatched", func() bool {
		_, decided, err := store.Lookup(ctx, id, "r1")
		return testenv.MetricValue(t, reg, "turnpike_worker_inflight_records") == 3 || err == nil && decided
	})
	close(gate)

	evs := s.stream(t).untilCompleted(t, ctx, 3)["r1"]
	var statuses []events.Status
	for _, e := range evs {
		if c, ok := e.(*events.RunCompletedEvent); ok {
			statuses = append(statuses, c.Status)
		}
	}
	if len(statuses) != 3 || statuses[0] != events.StatusComplete || statuses[1] != events.StatusComplete || statuses[2] != events.StatusComplete {
		t.Errorf("r1 completed %v, want complete three times: the run, then both duplicates as it did", statuses)
	}
	if n := startedCount(evs)["r1"]; n != 1 || m.ran()["dup m1"] != 1 {
		t.Errorf("r1 started %d runs, the model ran %d times; want once", n, m.ran()["dup m1"])
	}
	page, err := store.List(ctx, id, 0, 10)
	if err != nil || len(page.Messages) != 2 || page.Messages[1].Content != "ok dup m1" || page.Messages[1].Status != events.StatusComplete {
		t.Fatalf("history %+v, %v: want the one turn, complete", page.Messages, err)
	}
}

func TestConversationsOfOnePartitionRunConcurrentlyEachInOrder(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	const convs, msgs = 8, 3
	store := history.NewMemoryStore()
	s := newStack(t, store)
	s.cfg.Partitions = 1
	produceAll(t, ctx, s, convs, msgs)
	m := &probeModel{hold: make(chan struct{})}
	reg := prometheus.NewRegistry()
	s.start(t, ctx, worker.Deps{Model: m, Registerer: reg})
	// Every conversation's first run is in flight at once, although they
	// all sit in one partition.
	testenv.Eventually(t, ctx, "all conversations running at once", func() bool { return m.inFlight() == convs })
	close(m.hold)
	sr := s.stream(t)
	sr.untilCompleted(t, ctx, convs*msgs)
	maxAll, maxConv, order := m.stats()
	if maxAll < convs || maxConv != 1 {
		t.Fatalf("max in flight %d overall (want >= %d) and %d per conversation (want 1)", maxAll, convs, maxConv)
	}
	for conv, got := range order {
		for j, c := range got {
			if want := fmt.Sprintf("%s m%d", conv, j+1); c != want {
				t.Fatalf("%s ran %v: out of order", conv, got)
			}
		}
	}
	checkHistory(t, ctx, store, convs, msgs)
}

func TestPartitionOrderingRunsOneRecordAtATime(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	const convs, msgs = 4, 2
	store := history.NewMemoryStore()
	s := newStack(t, store)
	s.cfg.Partitions = 1
	s.cfg.Ordering = "partition"
	produceAll(t, ctx, s, convs, msgs)
	m := &probeModel{}
	s.start(t, ctx, worker.Deps{Model: m})
	s.stream(t).untilCompleted(t, ctx, convs*msgs)
	if maxAll, _, _ := m.stats(); maxAll != 1 {
		t.Fatalf("%d runs at once under partition ordering, want 1", maxAll)
	}
	checkHistory(t, ctx, store, convs, msgs)
}

// The records fetched and not yet done are bounded worker-wide by
// MaxInflight and per partition by ReadAhead (DESIGN.md "Worker":
// "Bounds"): with either at 3, ten conversations of one partition never
// have more than three runs at once.
func TestInFlightIsBoundedByMaxInflightAndReadAhead(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		set  func(c *worker.Config)
	}{
		{"MaxInflight 3 bounds the worker.", func(c *worker.Config) { c.MaxInflight = 3 }},
		{"ReadAhead 3 bounds the partition.", func(c *worker.Config) { c.ReadAhead = 3 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The deadline starts when the subtest runs: a parallel subtest may
			// wait for a slot long after its parent returned.
			ctx := testenv.Context(t, 60*time.Second)
			const convs = 10
			store := history.NewMemoryStore()
			s := newStack(t, store)
			s.cfg.Partitions = 1
			tt.set(&s.cfg)
			produceAll(t, ctx, s, convs, 1)
			m := &probeModel{hold: make(chan struct{})}
			s.start(t, ctx, worker.Deps{Model: m})
			testenv.Eventually(t, ctx, "three runs", func() bool { return m.inFlight() == 3 })
			close(m.hold)
			s.stream(t).untilCompleted(t, ctx, convs)
			checkHistory(t, ctx, store, convs, 1)
			// The model saw every run, so its peak is the bound held throughout.
			if maxAll, _, _ := m.stats(); maxAll != 3 {
				t.Fatalf("%d runs in flight at once, want 3", maxAll)
			}
		})
	}
}

// The worker's reader of a requests partition (partition.go) takes an
// idle poll answered after its MaxWait as an empty fetch (DESIGN.md
// "Fetching without stalls", issue 25): no error, so no backoff and no
// second dial, and the next request is fetched on the same connection.
// (internal/topic's test of topic.ReaderDialer shows the mechanism; this
// one that the worker's reader uses it.)
func TestAWorkersIdleRequestsReaderAnsweredLateMakesNoSecondDial(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	s.cfg.Partitions = 1
	s.ensureTopics(t, ctx, 1)
	reg := prometheus.NewRegistry()
	w := s.newWorker(t, worker.Deps{Registerer: reg})
	h := &testenv.HeldConns{}
	worker.SetRequestsDial(w, h.Dial)
	s.run(t, ctx, w)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "idle"}
	s.produce(t, ctx, id.Key(), request(id, "req-1", "first"))
	waitCounter(t, ctx, reg, 1, "turnpike_worker_runs_total", "status", string(events.StatusComplete))
	dials := h.Dials()
	if dials == 0 {
		t.Fatal("the requests reader dialed no connection through the worker's dialer")
	}

	// The partition is idle now. Hold the answer of its reader's next long
	// poll past the poll's deadline: the held read began after its fetch
	// was sent, so an answer 1.5 times the deadline (MaxWait, 500 ms) after
	// the read began is late. HeldConns applies the connection's read
	// deadline to that instant: nothing waits for it.
	held, release := h.Arm(750 * time.Millisecond)
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("no read of the requests reader held")
	}
	close(release)
	s.produce(t, ctx, id.Key(), request(id, "req-2", "second"))
	waitCounter(t, ctx, reg, 2, "turnpike_worker_runs_total", "status", string(events.StatusComplete))
	if n := h.Dials(); n != dials {
		t.Fatalf("the requests reader dialed %d connections after the late answer, want none (a late empty answer taken as a broken connection is an error, a backoff and a second dial)", n-dials)
	}
}

// An interrupting request cancels its conversation's request between two
// attempts too (docs/api.md "Ordering and strategies"): the request's
// first attempt failed transiently and it waits out its retry backoff,
// with no run registered to cancel. The interrupt cuts the backoff short:
// the request completes cancelled, its model never called again, counted
// once in cancelled_runs_total; then the interrupting request runs.
func TestAnInterruptCancelsARequestWaitingBetweenTwoAttempts(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	s.cfg.Partitions = 1
	// The test ends long before a backoff passes: only the interrupt
	// ends it.
	s.cfg.RetryBackoffMin, s.cfg.RetryBackoffMax = time.Hour, time.Hour
	s.ensureTopics(t, ctx, 1)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "backoff"}
	m := &failFirstRunOf{gatedModel: newGatedModel(), content: "backoff m1"}
	reg := prometheus.NewRegistry()
	s.produce(t, ctx, id.Key(), strategyRequest(id, "r1", "backoff m1", events.StrategyEnqueue))
	s.start(t, ctx, worker.Deps{Model: m, Registerer: reg})
	waitCounter(t, ctx, reg, 1, "turnpike_worker_retries_total") // r1 failed once and waits
	s.produce(t, ctx, id.Key(), strategyRequest(id, "r2", "backoff m2", events.StrategyInterrupt))

	got := s.stream(t).untilCompleted(t, ctx, 2)
	if _, st := text(got["r1"]); st != events.StatusCancelled {
		t.Errorf("r1 completed %s, want cancelled by the interrupt during its backoff", st)
	}
	if txt, st := text(got["r2"]); st != events.StatusComplete || txt != "ok backoff m2" {
		t.Errorf("r2 streamed %q and completed %s, want its answer, complete", txt, st)
	}
	if n := m.failed.Load(); n != 1 || m.ran()["backoff m1"] != 0 {
		t.Errorf("r1's model called %d times, then ran %d times; want its one failed attempt only", n, m.ran()["backoff m1"])
	}
	// The cancelled attempt ends before its agent starts: no second run.
	if n := startedCount(got["r1"])["r1"]; n != 1 {
		t.Errorf("r1 started %d runs, want 1: the failed attempt's", n)
	}
	if n := testenv.MetricValue(t, reg, "turnpike_worker_cancelled_runs_total"); n != 1 {
		t.Errorf("cancelled_runs_total %v, want 1", n)
	}
}

// A conversation is busy for as long as any of its records is queued or
// running (docs/api.md "Ordering and strategies"): once its first request
// ended, with one running and one queued behind it, a rejecting request is
// still rejected. The completed records' offsets are committed and the
// commits counted (turnpike_worker_offset_commits_total).
func TestAConversationStaysBusyWhileAnyOfItsRecordsIsQueuedOrRunning(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	s.cfg.Partitions = 1
	s.ensureTopics(t, ctx, 1)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "busy"}
	m := newGatedModel("busy m1", "busy m2")
	first, second := m.gate("busy m1"), m.gate("busy m2")
	reg := prometheus.NewRegistry()
	for i := 1; i <= 3; i++ {
		s.produce(t, ctx, id.Key(), strategyRequest(id, fmt.Sprintf("r%d", i), fmt.Sprintf("busy m%d", i), events.StrategyEnqueue))
	}
	s.start(t, ctx, worker.Deps{Model: m, Registerer: reg})
	st := s.stream(t)
	testenv.Eventually(t, ctx, "r1 running", func() bool { return m.ran()["busy m1"] == 1 })
	close(first)
	if got := st.untilCompleted(t, ctx, 1); len(got["r1"]) == 0 {
		t.Fatalf("first completion %v, want r1's", got)
	}
	testenv.Eventually(t, ctx, "r2 running", func() bool { return m.ran()["busy m2"] == 1 })
	s.produce(t, ctx, id.Key(), strategyRequest(id, "r4", "busy m4", events.StrategyReject))
	got := st.untilCompleted(t, ctx, 1)
	if _, status := text(got["r4"]); status != events.StatusRejected {
		t.Fatalf("next completion %v, want r4 rejected: r2 runs and r3 is queued", got)
	}
	close(second)
	got = st.untilCompleted(t, ctx, 2)
	for _, r := range []string{"r2", "r3"} {
		if _, status := text(got[r]); status != events.StatusComplete {
			t.Errorf("%s completed %s, want complete", r, status)
		}
	}
	testenv.Eventually(t, ctx, "an offset commit counted", func() bool {
		return testenv.MetricValue(t, reg, "turnpike_worker_offset_commits_total") > 0
	})
}
