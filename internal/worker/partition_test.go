package worker_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/internal/worker"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// strategyRequest is request with a send strategy.
func strategyRequest(id events.Identity, requestID, content string, strategy events.Strategy) []byte {
	b, _ := events.EncodeRequest(events.Request{V: 1, RequestID: requestID, Tenant: id.Tenant, User: id.User, Conversation: id.Conversation,
		Content: content, Strategy: strategy, CreatedAt: time.Now().UTC()})
	return b
}

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
	s.cfg.Ordering = worker.OrderingPartition
	if err := topic.Ensure(ctx, s.brokers, 1, s.topics.All()...); err != nil {
		t.Fatal(err)
	}
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
		w := &kafka.Writer{Addr: kafka.TCP(s.brokers...), Topic: s.topics.Requests, Balancer: &kafka.Murmur2Balancer{}, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
		defer w.Close()
		if err := w.WriteMessages(ctx, batch...); err != nil {
			t.Fatal(err)
		}
	}

	m := newGatedModel("b m1")
	gate := m.gate("b m1")
	reg := prometheus.NewRegistry()
	produce(0, 1, 2)
	s.start(t, ctx, worker.Deps{Model: m, Registerer: reg})
	// B's first request is running (its model was called, so the run is
	// registered for cancels) before the strategies' records arrive.
	waitFor(t, ctx, "b m1 running", func() bool { return m.ran()["b m1"] == 1 })
	produce(3, 4)
	// It holds the partition's queue until every record is dispatched
	// behind it: the fetch loop takes an in-flight slot before each
	// fetch, so one more slot than records means the last record was
	// dispatched (the strategies are applied at dispatch).
	waitFor(t, ctx, "every record dispatched", func() bool {
		return testenv.MetricValue(t, reg, "turnpike_worker_inflight_records") == float64(len(records)+1)
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
	if err := topic.Ensure(ctx, s.brokers, 1, s.topics.All()...); err != nil {
		t.Fatal(err)
	}
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "dup"}
	m := newGatedModel("dup m1")
	gate := m.gate("dup m1")
	reg := prometheus.NewRegistry()
	s.produce(t, ctx, id.Key(), strategyRequest(id, "r1", "dup m1", events.StrategyEnqueue))
	s.start(t, ctx, worker.Deps{Model: m, Registerer: reg})
	waitFor(t, ctx, "r1 running", func() bool { return m.ran()["dup m1"] == 1 })
	for _, strategy := range []events.Strategy{events.StrategyReject, events.StrategyInterrupt} {
		s.produce(t, ctx, id.Key(), strategyRequest(id, "r1", "dup m1", strategy))
	}
	// Both duplicates dispatched (strategies apply at dispatch): three
	// records in flight and the fetch loop's slot for the next; or, if a
	// strategy was wrongly applied, r1 already decided (rejected, or its
	// run cancelled) while its model still holds.
	waitFor(t, ctx, "the duplicates dispatched", func() bool {
		_, decided, err := store.Lookup(ctx, id, "r1")
		return testenv.MetricValue(t, reg, "turnpike_worker_inflight_records") == 4 || err == nil && decided
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
