package worker_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// outageAttempts is MaxAttempts in the outage tests: every outage there
// lasts several times as many attempts.
const outageAttempts = 2

// outageStore refuses the first lookups (the first read of every
// attempt, in Pending.Start) and, once those are used up, the first
// commits, as a MongoDB outage would.
type outageStore struct {
	history.Store
	lookups, commits atomic.Int32 // refusals left
}

func (s *outageStore) Lookup(ctx context.Context, id events.Identity, requestID string) (history.Committed, bool, error) {
	if s.lookups.Add(-1) >= 0 {
		return history.Committed{}, false, errors.New("mongo unavailable")
	}
	return s.Store.Lookup(ctx, id, requestID)
}

func (s *outageStore) Commit(ctx context.Context, id events.Identity, t history.Turn) (history.Committed, error) {
	if s.commits.Add(-1) >= 0 {
		return history.Committed{}, errors.New("mongo unavailable")
	}
	return s.Store.Commit(ctx, id, t)
}

// An infrastructure outage never uses up a request's model attempts nor
// dead-letters it (DESIGN.md "Worker": infrastructure is retried for as
// long as the partition is ours; only a transient model error counts
// against MaxAttempts). With MaxAttempts 2: the store is down for three
// times MaxAttempts attempts before the model is ever called; then a
// transient model error takes the first of the request's two attempts;
// then the store refuses the turn's commit three times MaxAttempts in a
// row. When it is back, the request completes with its answer, nothing is
// dead-lettered, and every failure was retried.
func TestAStoreOutageLongerThanMaxAttemptsNeitherUsesUpAttemptsNorDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	const outage = 3 * outageAttempts
	store := &outageStore{Store: history.NewMemoryStore()}
	store.lookups.Store(outage)
	store.commits.Store(outage)
	s := newStack(t, store)
	s.cfg.MaxAttempts = outageAttempts
	s.cfg.RetryBackoffMin, s.cfg.RetryBackoffMax = time.Millisecond, time.Millisecond
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "outage"}
	s.produce(t, ctx, id.Key(), request(id, "req-1", "outage m1"))
	reg := prometheus.NewRegistry()
	model := &probeModel{failFirst: outageAttempts - 1}
	s.start(t, ctx, worker.Deps{Model: model, Registerer: reg})

	evs := s.stream(t).untilCompleted(t, ctx, 1)["req-1"]
	if c := completedOf(t, evs); c.Status != events.StatusComplete {
		t.Errorf("run.completed %s, want complete", c.Status)
	}
	page, err := store.List(ctx, id, 0, 10)
	if err != nil || len(page.Messages) != 2 || page.Messages[1].Content != "ok outage m1" || page.Messages[1].Status != events.StatusComplete {
		t.Fatalf("history %+v, %v: want the one turn, complete", page.Messages, err)
	}
	if l, c := store.lookups.Load(), store.commits.Load(); l >= 0 || c >= 0 {
		t.Fatalf("%d lookup and %d commit refusals left: the outage was not exercised", l+1, c+1)
	}
	if n := testenv.MetricValue(t, reg, "turnpike_worker_dlq_total"); n != 0 {
		t.Errorf("%v records dead-lettered, want none", n)
	}
	// One retry for each refused read and commit, one for the model error.
	if got, want := testenv.MetricValue(t, reg, "turnpike_worker_retries_total"), float64(outage+outageAttempts-1+outage); got != want {
		t.Errorf("%v retries, want %v", got, want)
	}
}

// A broker outage of the stream topic, longer than MaxAttempts attempts,
// neither uses up the request's attempts nor dead-letters it: the turn is
// committed once (the model runs once; every later attempt finds it
// decided and only writes run.completed again) and, when the broker takes
// writes again, the request completes.
func TestAStreamOutageLongerThanMaxAttemptsNeitherUsesUpAttemptsNorDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	store := history.NewMemoryStore()
	s := newStack(t, store)
	s.brokers = []string{k.Addr()}
	s.cfg.Brokers = s.brokers
	s.cfg.MaxAttempts = outageAttempts
	s.cfg.RetryBackoffMin, s.cfg.RetryBackoffMax = time.Millisecond, time.Millisecond
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "outage"}
	s.produce(t, ctx, id.Key(), request(id, "req-1", "outage m1"))

	// The broker refuses the first writes to the stream topic. Each
	// attempt makes at most two (run.started and a token in flight
	// before the first refusal is known), so this outage outlasts at
	// least three times MaxAttempts attempts.
	const outage = 6 * outageAttempts
	var refused atomic.Int32
	cluster := k.Cluster()
	cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := r.(*kmsg.ProduceRequest)
		if len(req.Topics) == 0 || req.Topics[0].Topic != s.topics.Stream || refused.Load() >= outage {
			return nil, nil, false
		}
		refused.Add(1)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, tp := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = tp.Topic
			for _, pp := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = pp.Partition
				rp.ErrorCode = kerr.PolicyViolation.Code // not retried by the writer itself
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})

	reg := prometheus.NewRegistry()
	model := &probeModel{}
	s.start(t, ctx, worker.Deps{Model: model, Registerer: reg})

	evs := s.stream(t).untilCompleted(t, ctx, 1)["req-1"]
	if c := completedOf(t, evs); c.Status != events.StatusComplete {
		t.Errorf("run.completed %s, want complete", c.Status)
	}
	if n := refused.Load(); n != outage {
		t.Fatalf("the broker refused %d stream writes, want %d: the outage was not exercised", n, outage)
	}
	if n := testenv.MetricValue(t, reg, "turnpike_worker_dlq_total"); n != 0 {
		t.Errorf("%v records dead-lettered, want none", n)
	}
	if n := testenv.MetricValue(t, reg, "turnpike_worker_retries_total"); n < outage/2 {
		t.Errorf("%v retries, want at least %d: one per attempt the outage failed", n, outage/2)
	}
	if _, _, order := model.stats(); len(order["outage"]) != 1 {
		t.Errorf("the model ran %v, want once: the committed turn is a duplicate on every later attempt", order["outage"])
	}
	page, err := store.List(ctx, id, 0, 10)
	if err != nil || len(page.Messages) != 2 || page.Messages[1].Content != "ok outage m1" || page.Messages[1].Status != events.StatusComplete {
		t.Fatalf("history %+v, %v: want the one turn, complete", page.Messages, err)
	}
}

// A run that persists nothing still decides its request (docs/api.md
// "Ordering and strategies": every way a request can end without a turn
// is recorded per request id, and the first decision wins): a duplicate
// record of a discarded request completes discarded without running.
func TestADuplicateOfARequestThatPersistedNothingCompletesTheSameWithoutRunning(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store := history.NewMemoryStore()
	s := newStack(t, store)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "empty"}
	s.produce(t, ctx, id.Key(), request(id, "req-1", "[[empty]]"))
	s.produce(t, ctx, id.Key(), request(id, "req-1", "[[empty]]"))
	s.start(t, ctx, worker.Deps{})
	evs := s.stream(t).untilCompleted(t, ctx, 2)["req-1"]
	var statuses []events.Status
	for _, e := range evs {
		if c, ok := e.(*events.RunCompletedEvent); ok {
			statuses = append(statuses, c.Status)
		}
	}
	if len(statuses) != 2 || statuses[0] != events.StatusDiscarded || statuses[1] != events.StatusDiscarded {
		t.Errorf("req-1 completed %v, want discarded twice", statuses)
	}
	if n := startedCount(evs)["req-1"]; n != 1 {
		t.Errorf("req-1 started %d runs, want 1: the duplicate must not run", n)
	}
	if c, found, err := store.Lookup(ctx, id, "req-1"); err != nil || !found || c.Status != events.StatusDiscarded || c.N != 0 {
		t.Errorf("Lookup(req-1) = %+v, %v, %v; want an outcome discarded without a turn", c, found, err)
	}
}

// A request dead-lettered after a store outage reports, in
// turnpike-dlq-attempts, how many times the model ran (docs/api.md, the
// DLQ headers): MaxAttempts, not the attempts the outage failed too.
func TestADeadLetterAfterAStoreOutageCountsOnlyTheModelsRuns(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	const outage = 3 * outageAttempts
	store := &outageStore{Store: history.NewMemoryStore()}
	store.lookups.Store(outage)
	s := newStack(t, store)
	s.cfg.MaxAttempts = outageAttempts
	s.cfg.RetryBackoffMin, s.cfg.RetryBackoffMax = time.Millisecond, time.Millisecond
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "outage"}
	s.produce(t, ctx, id.Key(), request(id, "req-1", "outage m1"))
	model := &probeModel{failFirst: 100}
	s.start(t, ctx, worker.Deps{Model: model})

	if c := completedOf(t, s.stream(t).untilCompleted(t, ctx, 1)["req-1"]); c.Status != events.StatusFailed {
		t.Fatalf("run.completed %s, want failed", c.Status)
	}
	dlq := kafka.NewReader(kafka.ReaderConfig{Brokers: s.brokers, GroupID: testenv.Name(t, "dlq"), Topic: s.topics.DLQ, StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
	defer dlq.Close()
	rec, err := dlq.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := header(rec, worker.HeaderDLQAttempts), strconv.Itoa(outageAttempts); got != want {
		t.Errorf("%s %q, want %q: the model ran %d times", worker.HeaderDLQAttempts, got, want, outageAttempts)
	}
	if n := store.lookups.Load(); n >= 0 {
		t.Fatalf("%d lookup refusals left: the outage was not exercised", n+1)
	}
}
