package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// waitQueued waits until c1 m1 (offset 0 of produceAll(…, 2, 3)) is
// running and c2 is done: c2 m3, at offset 5, was fetched after c1 m2 and
// c1 m3, so those two are queued behind c1 m1.
func waitQueued(t *testing.T, ctx context.Context, store history.Store, m *gatedModel) {
	t.Helper()
	c2 := events.Identity{Tenant: "acme", User: "ann", Conversation: "c2"}
	testenv.Eventually(t, ctx, "c1 m1 running, c1 m2 and m3 queued behind it, c2 done", func() bool {
		p, err := store.List(ctx, c2, 0, 10)
		return m.ran()["c1 m1"] == 1 && err == nil && len(p.Messages) == 6
	})
}

// waitCommitted waits until the stack's group has committed every record
// of the requests topic: nothing more will run or be redelivered. A record
// marked done before it was (at-most-once) shows here at once, as history
// missing what the commit claims.
func (s *stack) waitCommitted(t *testing.T, ctx context.Context) {
	t.Helper()
	c := &kafka.Client{Addr: kafka.TCP(s.brokers...), Timeout: 5 * time.Second}
	testenv.Eventually(t, ctx, "every request record committed", func() bool {
		ends, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{s.topics.Requests: {kafka.LastOffsetOf(0)}}})
		if err != nil {
			return false
		}
		got, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: s.cfg.GroupID, Topics: map[string][]int{s.topics.Requests: {0}}})
		if err != nil || got.Error != nil || len(got.Topics[s.topics.Requests]) != 1 || len(ends.Topics[s.topics.Requests]) != 1 {
			return false
		}
		return got.Topics[s.topics.Requests][0].CommittedOffset == ends.Topics[s.topics.Requests][0].LastOffset
	})
}

// logSignal is a slog handler that closes a channel the first time a
// record with message msg is logged.
type logSignal struct {
	msg  string
	once *sync.Once
	ch   chan struct{}
}

func newLogSignal(msg string) logSignal {
	return logSignal{msg: msg, once: &sync.Once{}, ch: make(chan struct{})}
}

func (l logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (l logSignal) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, l.msg) {
		l.once.Do(func() { close(l.ch) })
	}
	return nil
}
func (l logSignal) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logSignal) WithGroup(string) slog.Handler      { return l }

// A partition revoked while a conversation has a record running and two
// queued: the running one outlives the drain deadline and is aborted,
// nothing of the three is committed, and the partition's next owner runs
// exactly those three, in order, once each; the other conversation's
// records, done before, are recognised as duplicates and not run again.
func TestARebalanceAbortsTheRunningRecordAndTheNextOwnerRunsWhatWasLeft(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 90*time.Second)
	s, store, m := queuedStack(t, ctx, 300*time.Millisecond)
	s.start(t, ctx, worker.Deps{Model: m, Registerer: prometheus.NewRegistry()})
	waitQueued(t, ctx, store, m)
	// A second member joins: the group rebalances, the first worker's
	// generation ends while c1 m1 holds on past the drain deadline.
	s.start(t, ctx, worker.Deps{Model: m, Registerer: prometheus.NewRegistry()})
	s.waitCommitted(t, ctx)
	checkHistory(t, ctx, store, 2, 3)
	if got, want := m.ran(), map[string]int{"c1 m1": 2, "c1 m2": 1, "c1 m3": 1, "c2 m1": 1, "c2 m2": 1, "c2 m3": 1}; !maps.Equal(got, want) {
		t.Fatalf("runs %v, want %v: the aborted record re-run, the queued ones run once", got, want)
	}
}

// queuedStack is a one-partition stack holding produceAll(…, 2, 3) — c1 m1,
// c2 m1, c1 m2, c2 m2, c1 m3, c2 m3 — and a model whose first run of c1 m1
// waits for its gate.
func queuedStack(t *testing.T, ctx context.Context, drain time.Duration) (*stack, history.Store, *gatedModel) {
	t.Helper()
	store := history.NewMemoryStore()
	s := newStack(t, store)
	s.cfg.Partitions = 1
	s.cfg.DrainTimeout = drain
	s.cfg.CommitInterval = 20 * time.Millisecond
	produceAll(t, ctx, s, 2, 3)
	return s, store, newGatedModel("c1 m1")
}

// A worker told to stop while a conversation has a record running and two
// queued: the running one finishes within the drain deadline and is done;
// the queued ones were never started and stay uncommitted, so the next
// worker runs exactly those two (the other conversation's, done before,
// are recognised as duplicates).
func TestARunFinishingWithinTheDrainLeavesTheQueuedRecordsToTheNextOwner(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 90*time.Second)
	s, store, m := queuedStack(t, ctx, 5*time.Second)
	gate := m.gate("c1 m1")
	reg := prometheus.NewRegistry()
	draining := newLogSignal("partition revoked or worker stopping")
	stop := s.start(t, ctx, worker.Deps{Model: m, Registerer: reg, Logger: slog.New(draining)})
	waitQueued(t, ctx, store, m)
	stopped := make(chan struct{})
	go func() { defer close(stopped); stop() }()
	select {
	case <-draining.ch: // the generation ended: nothing more is started
	case <-ctx.Done():
		t.Fatal("the worker never began draining")
	}
	close(gate) // c1 m1 finishes within the drain
	<-stopped
	if got := m.ran(); got["c1 m2"] != 0 || got["c1 m3"] != 0 {
		t.Fatalf("runs %v: a queued record started after the generation ended", got)
	}
	s.start(t, ctx, worker.Deps{Model: m, Registerer: prometheus.NewRegistry()})
	s.waitCommitted(t, ctx)
	checkHistory(t, ctx, store, 2, 3)
	if got, want := m.ran(), map[string]int{"c1 m1": 1, "c1 m2": 1, "c1 m3": 1, "c2 m1": 1, "c2 m2": 1, "c2 m3": 1}; !maps.Equal(got, want) {
		t.Fatalf("runs %v, want %v", got, want)
	}
}

// A zombie — a worker whose record's conversation already has a turn from
// a newer record — really gets ErrFenced on commit: nothing is persisted,
// the record is done (committed, never redelivered), and it is neither
// dead-lettered nor completed failed; its stream shows no run.completed
// (the partition's real owner completes the request).
func TestAZombieCommitIsFencedPersistsNothingAndIsDropped(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store := history.NewMemoryStore()
	s := newStack(t, store)
	s.cfg.Partitions = 1
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "c1"}
	// The real owner already committed a turn from a later record.
	newer := &history.Source{Topic: s.topics.Requests, Partition: 0, Offset: 1000, Time: time.Now().Add(time.Hour)}
	if _, err := store.Commit(ctx, id, history.Turn{RequestID: "newer", User: "later", Answer: "done", Status: events.StatusComplete, Source: newer}); err != nil {
		t.Fatal(err)
	}
	produceAll(t, ctx, s, 1, 1) // c1-m1 at offset 0
	reg := prometheus.NewRegistry()
	s.start(t, ctx, worker.Deps{Model: newGatedModel(), Registerer: reg})
	s.waitCommitted(t, ctx)

	if n := testenv.MetricValue(t, reg, "turnpike_worker_fenced_total"); n != 1 {
		t.Fatalf("fenced %v times, want 1", n)
	}
	page, err := store.List(ctx, id, 0, 10)
	if err != nil || len(page.Messages) != 2 || page.Messages[0].RequestID != "newer" {
		t.Fatalf("history %+v, %v: want only the newer turn", page.Messages, err)
	}
	if c, found, err := store.Lookup(ctx, id, "c1-m1"); err != nil || found {
		t.Fatalf("outcome of the fenced request: %+v %v %v, want none (not failed)", c, found, err)
	}
	if n := testenv.MetricValue(t, reg, "turnpike_worker_dlq_total"); n != 0 {
		t.Fatalf("%v records dead-lettered", n)
	}
	conn, err := kafka.DialLeader(ctx, "tcp", s.brokers[0], s.topics.DLQ, 0)
	if err != nil {
		t.Fatal(err)
	}
	first, last, err := conn.ReadOffsets()
	conn.Close()
	if err != nil || last != first {
		t.Fatalf("DLQ offsets %d..%d, %v: want it empty", first, last, err)
	}
	// Every stream event of the record was flushed before it was done.
	evs := s.streamEvents(t, ctx)
	var types []events.Type
	for _, e := range evs["c1-m1"] {
		types = append(types, e.Type())
	}
	if len(types) == 0 || types[0] != events.TypeRunStarted || slices.Contains(types, events.TypeRunCompleted) {
		t.Fatalf("the fenced run streamed %v: want it started and never completed", types)
	}
}

// streamEvents reads the stream topic (one partition) from its start to
// its end as of the call, by request id.
func (s *stack) streamEvents(t *testing.T, ctx context.Context) map[string][]events.Event {
	t.Helper()
	conn, err := kafka.DialLeader(ctx, "tcp", s.brokers[0], s.topics.Stream, 0)
	if err != nil {
		t.Fatal(err)
	}
	first, last, err := conn.ReadOffsets()
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	byReq := map[string][]events.Event{}
	if first == last {
		return byReq
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: s.brokers, Topic: s.topics.Stream, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	if err := r.SetOffset(first); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e, err := events.DecodeEvent(m.Value)
		if err != nil {
			t.Fatalf("stream event does not decode: %v", err)
		}
		byReq[e.Header().RequestID] = append(byReq[e.Header().RequestID], e)
		if m.Offset >= last-1 {
			return byReq
		}
	}
}

// timeThenAnswer is a model that asks for current_time, then answers with
// it; its first answer waits for its run's end (a run aborted at a
// rebalance). It counts its calls of each kind.
type timeThenAnswer struct {
	mu             sync.Mutex
	calls, answers int
	answering      chan struct{} // closed when the first answer starts
}

func (m *timeThenAnswer) Generate(context.Context, []*schema.Message, ...model.Option) (*schema.Message, error) {
	return nil, errors.New("timeThenAnswer streams only")
}

func (m *timeThenAnswer) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	return m, nil
}

func (m *timeThenAnswer) Stream(ctx context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	last := in[len(in)-1]
	m.mu.Lock()
	defer m.mu.Unlock()
	if last.Role != schema.Tool {
		m.calls++
		return schema.StreamReaderFromArray([]*schema.Message{call("current_time", `{}`)}), nil
	}
	m.answers++
	first := m.answers == 1
	sr, sw := schema.Pipe[*schema.Message](1)
	go func() {
		defer sw.Close()
		sw.Send(schema.AssistantMessage("It is ", nil), nil)
		if first {
			close(m.answering)
			<-ctx.Done() // held until the rebalance aborts the run
			sw.Send(nil, ctx.Err())
			return
		}
		sw.Send(schema.AssistantMessage(last.Content, nil), nil)
	}()
	return sr, nil
}

// A run of an agent-file agent aborted at a rebalance after its tool round
// is replayed by the partition's next owner, in a later generation: the
// model's tool call is not made again, only the answer the abort cut.
func TestTheNextOwnerOfAPartitionReplaysTheJournalOfARunAbortedAtARebalance(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 90*time.Second)
	store := history.NewMemoryStore()
	s := newStack(t, store)
	s.cfg.Partitions = 1
	s.cfg.DrainTimeout = 200 * time.Millisecond
	m := &timeThenAnswer{answering: make(chan struct{})}
	d := worker.Deps{Model: m, Agent: agentConfig(t, `{"agent": {"name": "assistant", "tools": ["current_time"]}}`)}
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "time"}
	s.ensureTopics(t, ctx, 1)
	s.produce(t, ctx, id.Key(), request(id, "req-1", "what time is it?"))
	d.Registerer = prometheus.NewRegistry()
	s.start(t, ctx, d)
	select {
	case <-m.answering: // the tool round is journaled; the answer is held
	case <-ctx.Done():
		t.Fatal("the first run never reached its answer")
	}
	reg := prometheus.NewRegistry()
	d.Registerer = reg
	s.start(t, ctx, d) // a second member: the group rebalances
	s.waitCommitted(t, ctx)
	p, err := store.List(ctx, id, 0, 10)
	if err != nil || len(p.Messages) != 2 || !strings.HasPrefix(p.Messages[1].Content, "It is 20") {
		t.Fatalf("history %+v (%v), want the answer with the time", p, err)
	}
	m.mu.Lock()
	calls, answers := m.calls, m.answers
	m.mu.Unlock()
	if calls != 1 || answers != 2 {
		t.Fatalf("the model was asked for the tool call %d times and for the answer %d times: want 1 and 2", calls, answers)
	}
	if _, found, err := store.Steps(ctx, id, "req-1"); found || err != nil {
		t.Errorf("the journal of the committed request is still there (%v)", err)
	}
}

// outcomesDown fails RecordOutcome while down is set, as a MongoDB outage
// would for the endings without a turn (rejected, cancelled while queued),
// and counts the failures.
type outcomesDown struct {
	history.Store
	down   atomic.Bool
	failed atomic.Int32
}

func (o *outcomesDown) RecordOutcome(ctx context.Context, id events.Identity, requestID string, status events.Status) (history.Committed, error) {
	if o.down.Load() {
		o.failed.Add(1)
		return history.Committed{}, errors.New("mongo unavailable")
	}
	return o.Store.RecordOutcome(ctx, id, requestID, status)
}

// A rejecting request whose rejection cannot be recorded (the store is
// down) when the worker stops is abandoned, not marked done: its offset is
// not committed, and the next owner takes it up (its conversation idle by
// then, it runs). Were it committed, its run.completed would never be
// written.
func TestARejectionAbandonedAtShutdownIsLeftToTheNextOwner(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store := &outcomesDown{Store: history.NewMemoryStore()}
	s := newStack(t, store)
	s.cfg.Partitions = 1
	s.ensureTopics(t, ctx, 1)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "abandoned-reject"}
	m := newGatedModel("abandon m1")
	gate := m.gate("abandon m1")
	s.produce(t, ctx, id.Key(), strategyRequest(id, "r1", "abandon m1", events.StrategyEnqueue))
	stop := s.start(t, ctx, worker.Deps{Model: m})
	testenv.Eventually(t, ctx, "r1 running", func() bool { return m.ran()["abandon m1"] == 1 })
	store.down.Store(true)
	s.produce(t, ctx, id.Key(), strategyRequest(id, "r2", "abandon m2", events.StrategyReject))
	testenv.Eventually(t, ctx, "r2's rejection failing to be recorded", func() bool { return store.failed.Load() >= 1 })
	close(gate)
	st := s.stream(t)
	if got := st.untilCompleted(t, ctx, 1); len(got["r1"]) == 0 {
		t.Fatalf("first completion %v, want r1's", got)
	}
	stop() // r2's rejection is still being retried: abandoned

	store.down.Store(false)
	s.start(t, ctx, worker.Deps{Model: m})
	got := st.untilCompleted(t, ctx, 1)
	if txt, status := text(got["r2"]); status != events.StatusComplete || txt != "ok abandon m2" {
		t.Fatalf("next completion %v, want r2 run by the next owner", got)
	}
}
