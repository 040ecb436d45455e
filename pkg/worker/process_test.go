package worker_test

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

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
	refused := refuseProduces(k, s.topics.Stream, outage)

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

// RunTimeout bounds one run (README "Configuration": TURNPIKE_RUN_TIMEOUT,
// the longest one generation may run): past it the model's context ends,
// and the run ends as a model failure does (docs/api.md "Stream events",
// "Dead letters"). After some content it completes incomplete, its answer
// so far persisted with incomplete: true and a notice streamed; before any
// content the timeout is a transient model failure, retried up to
// MaxAttempts, then dead-lettered and completed failed. The model here
// never answers on its own: only the timeout ends its runs.
func TestARunLongerThanRunTimeoutEnds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		model      model.ToolCallingChatModel
		runs       func(m model.ToolCallingChatModel) int
		wantStatus events.Status
		wantAnswer string // the turn persisted; "": none
	}{
		{
			name:  "A run that streamed some content ends incomplete, with its answer so far persisted.",
			model: newGatedModel("slow m1"), // "ok ", then waits for a gate never opened
			runs:  func(m model.ToolCallingChatModel) int { return m.(*gatedModel).ran()["slow m1"] },
			// one run: an error after content is not retried
			wantStatus: events.StatusIncomplete, wantAnswer: "ok ",
		},
		{
			name:  "A run without content is retried up to MaxAttempts, then dead-lettered and completed failed.",
			model: &probeModel{hold: make(chan struct{})}, // waits for a hold never released
			runs: func(m model.ToolCallingChatModel) int {
				_, _, order := m.(*probeModel).stats()
				return len(order["slow"])
			},
			wantStatus: events.StatusFailed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 60*time.Second)
			store := history.NewMemoryStore()
			s := newStack(t, store)
			s.cfg.RunTimeout = 200 * time.Millisecond
			s.cfg.MaxAttempts = outageAttempts
			s.cfg.RetryBackoffMin, s.cfg.RetryBackoffMax = time.Millisecond, time.Millisecond
			id := events.Identity{Tenant: "acme", User: "ann", Conversation: "slow"}
			s.produce(t, ctx, id.Key(), request(id, "req-1", "slow m1"))
			s.start(t, ctx, worker.Deps{Model: tt.model})

			evs := s.stream(t).untilCompleted(t, ctx, 1)["req-1"]
			if c := completedOf(t, evs); c.Status != tt.wantStatus {
				t.Fatalf("run.completed %s, want %s", c.Status, tt.wantStatus)
			}
			wantRuns := 1
			if tt.wantStatus == events.StatusFailed {
				wantRuns = outageAttempts
			}
			if n := tt.runs(tt.model); n != wantRuns {
				t.Errorf("the model ran %d times, want %d", n, wantRuns)
			}
			page, err := store.List(ctx, id, 0, 10)
			if tt.wantAnswer == "" {
				if !errors.Is(err, history.ErrNotFound) {
					t.Errorf("history %+v, %v: want nothing persisted", page.Messages, err)
				}
				dlq := kafka.NewReader(kafka.ReaderConfig{Brokers: s.brokers, GroupID: testenv.Name(t, "dlq"), Topic: s.topics.DLQ, StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
				defer dlq.Close()
				rec, err := dlq.ReadMessage(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got := header(rec, worker.HeaderDLQAttempts); got != strconv.Itoa(outageAttempts) {
					t.Errorf("%s %q, want %d", worker.HeaderDLQAttempts, got, outageAttempts)
				}
				if reason := header(rec, worker.HeaderDLQReason); !strings.Contains(reason, context.DeadlineExceeded.Error()) {
					t.Errorf("%s %q does not name the timeout", worker.HeaderDLQReason, reason)
				}
				return
			}
			if err != nil || len(page.Messages) != 2 {
				t.Fatalf("history %+v, %v: want one turn", page.Messages, err)
			}
			if a := page.Messages[1]; a.Content != tt.wantAnswer || a.Status != tt.wantStatus || !a.Incomplete() {
				t.Errorf("answer %+v, want %q %s and incomplete", a, tt.wantAnswer, tt.wantStatus)
			}
			var notices int
			for _, e := range evs {
				if e.Type() == events.TypeNotice {
					notices++
				}
			}
			if notices != 1 {
				t.Errorf("%d notices, want one saying why the answer is cut", notices)
			}
		})
	}
}

// outcomeAgent is the agent configuration outcomeModel's "ask" needs.
const outcomeAgent = `{"agent":{"name":"assistant","tools":["ask_user"]}}`

// readTopic returns every record of every partition of topic, from each
// partition's first offset to its end at the call.
func (s *stack) readTopic(t *testing.T, ctx context.Context, topic string) []kafka.Message {
	t.Helper()
	conn, err := kafka.DialContext(ctx, "tcp", s.brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	var out []kafka.Message
	for _, p := range parts {
		leader, err := kafka.DialLeader(ctx, "tcp", s.brokers[0], topic, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		first, last, err := leader.ReadOffsets()
		leader.Close()
		if err != nil {
			t.Fatal(err)
		}
		if first == last {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: s.brokers, Topic: topic, Partition: p.ID, MaxWait: 100 * time.Millisecond})
		if err := r.SetOffset(first); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
			if m.Offset >= last-1 {
				break
			}
		}
		r.Close()
	}
	return out
}

// Workers announce every end of a request as a completed control record
// with its status (docs/api.md "Control records"; ingest counts its queue
// limits from them): complete, incomplete, cancelled while running (an
// interrupting request) and before it ran (a recorded cancel),
// interrupted, discarded, rejected, failed, and a duplicate as its
// original ended. The run the interrupt stopped is counted in
// turnpike_worker_cancelled_runs_total (README "Observability").
func TestEveryEndOfARequestIsAnnouncedOnTheControlTopicWithItsStatus(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store := history.NewMemoryStore()
	s := newStack(t, store)
	s.cfg.MaxAttempts = 1 // "fail" is dead-lettered at its first failure
	conv := func(name string) events.Identity {
		return events.Identity{Tenant: "acme", User: "ann", Conversation: name}
	}
	records := []struct {
		id                 events.Identity
		requestID, content string
		strategy           events.Strategy
	}{
		{conv("complete"), "r-complete", "complete m1", events.StrategyEnqueue},
		{conv("complete"), "r-complete", "complete m1", events.StrategyEnqueue}, // a duplicate
		{conv("break"), "r-break", "break m1", events.StrategyEnqueue},
		{conv("break"), "r-break", "break m1", events.StrategyEnqueue}, // a duplicate
		{conv("empty"), "r-empty", "empty m1", events.StrategyEnqueue},
		{conv("fail"), "r-fail", "fail m1", events.StrategyEnqueue},
		{conv("ask"), "r-ask", "ask m1", events.StrategyEnqueue},
		{conv("queued-cancel"), "r-queued-cancel", "complete m1", events.StrategyEnqueue},
		{conv("busy"), "r-hold", "hold m1", events.StrategyEnqueue},
	}
	for _, r := range records {
		s.produce(t, ctx, r.id.Key(), strategyRequest(r.id, r.requestID, r.content, r.strategy))
	}
	s.recordCancelAll(t, ctx, conv("queued-cancel")) // as ingest does: r-queued-cancel is cancelled before it runs
	m := &outcomeModel{}
	reg := prometheus.NewRegistry()
	stop := s.start(t, ctx, worker.Deps{Model: m, Agent: agentConfig(t, outcomeAgent), Registerer: reg})
	testenv.Eventually(t, ctx, "r-hold running", func() bool { return m.ran("hold m1") == 1 })
	// While r-hold runs, a rejecting request of its conversation is
	// rejected; an interrupting one cancels it, then runs.
	busy := conv("busy")
	s.produce(t, ctx, busy.Key(), strategyRequest(busy, "r-reject", "complete m2", events.StrategyReject))
	s.produce(t, ctx, busy.Key(), strategyRequest(busy, "r-interrupt", "complete m3", events.StrategyInterrupt))

	want := map[string][]events.Status{
		"r-complete":      {events.StatusComplete, events.StatusComplete},
		"r-break":         {events.StatusIncomplete, events.StatusIncomplete},
		"r-empty":         {events.StatusDiscarded},
		"r-fail":          {events.StatusFailed},
		"r-ask":           {events.StatusInterrupted},
		"r-queued-cancel": {events.StatusCancelled},
		"r-hold":          {events.StatusCancelled},
		"r-reject":        {events.StatusRejected},
		"r-interrupt":     {events.StatusComplete},
	}
	var ends int
	for _, st := range want {
		ends += len(st)
	}
	// Every end is on the stream; once the worker stopped, its writers
	// have flushed every completion it announced.
	streamed := map[string][]events.Status{}
	for _, e := range s.stream(t).events(t, ctx, ends) {
		if c, ok := e.(*events.RunCompletedEvent); ok {
			streamed[c.RequestID] = append(streamed[c.RequestID], c.Status)
		}
	}
	if !reflect.DeepEqual(streamed, want) {
		t.Fatalf("run.completed by request %v, want %v", streamed, want)
	}
	stop()

	announced := map[string][]events.Status{}
	for _, rec := range s.readTopic(t, ctx, s.topics.Control) {
		c, err := events.DecodeControl(rec.Value)
		if err != nil {
			t.Fatalf("control record %s does not decode: %v", rec.Value, err)
		}
		if c.Type != events.ControlCompleted {
			t.Fatalf("control record %s, want only completions", rec.Value)
		}
		if string(rec.Key) != c.Identity().Key() || c.Conversation == "" {
			t.Errorf("completion %s keyed %q", rec.Value, rec.Key)
		}
		announced[c.RequestID] = append(announced[c.RequestID], c.Status)
	}
	if !reflect.DeepEqual(announced, want) {
		t.Errorf("completed control records by request %v, want %v", announced, want)
	}
	if n := testenv.MetricValue(t, reg, "turnpike_worker_cancelled_runs_total"); n != 1 {
		t.Errorf("cancelled_runs_total %v, want 1: the run the interrupt stopped", n)
	}
}

// runsOf groups a request's events by run_id, in the order the runs
// started; every event must belong to a run that started.
func runsOf(t *testing.T, evs []events.Event) (ids []string, byRun map[string][]events.Event) {
	t.Helper()
	byRun = map[string][]events.Event{}
	for _, e := range evs {
		id := e.Header().RunID
		if e.Type() == events.TypeRunStarted {
			if _, seen := byRun[id]; seen {
				t.Fatalf("run %s started twice", id)
			}
			ids = append(ids, id)
		} else if _, started := byRun[id]; !started {
			t.Fatalf("%s of run %s, which never started", e.Type(), id)
		}
		byRun[id] = append(byRun[id], e)
	}
	return ids, byRun
}

// A re-run of a request has a new run_id, and the superseded run is never
// persisted (docs/api.md "Runs and completions"): a run retried after a
// transient model error, and one aborted when its worker stopped and run
// again by the next, each start again under a fresh run_id; only the last
// run completes, and its answer alone is the turn.
func TestEveryRunOfARequestHasItsOwnRunIDAndOnlyTheLastIsPersisted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// run runs req-1 ("rerun m1") on s, running it twice, and returns its
		// events.
		run func(t *testing.T, ctx context.Context, s *stack) []events.Event
	}{
		{
			name: "A retry after a transient model error is a new run.",
			run: func(t *testing.T, ctx context.Context, s *stack) []events.Event {
				s.start(t, ctx, worker.Deps{Model: &probeModel{failFirst: 1}})
				return s.stream(t).untilCompleted(t, ctx, 1)["req-1"]
			},
		},
		{
			name: "A record run again after its run was aborted is a new run.",
			run: func(t *testing.T, ctx context.Context, s *stack) []events.Event {
				s.cfg.DrainTimeout = 100 * time.Millisecond // then the run is aborted
				m := newGatedModel("rerun m1")              // "ok ", then waits until aborted
				stop := s.start(t, ctx, worker.Deps{Model: m})
				sr := s.stream(t)
				var evs []events.Event
				for len(evs) == 0 || evs[len(evs)-1].Type() != events.TypeToken {
					evs = append(evs, sr.next(t, ctx))
				}
				stop() // the first run has streamed "ok ": abort it
				s.start(t, ctx, worker.Deps{Model: m})
				return append(evs, sr.events(t, ctx, 1)...)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 60*time.Second)
			store := history.NewMemoryStore()
			s := newStack(t, store)
			id := events.Identity{Tenant: "acme", User: "ann", Conversation: "rerun"}
			s.produce(t, ctx, id.Key(), request(id, "req-1", "rerun m1"))
			evs := tt.run(t, ctx, s)

			ids, byRun := runsOf(t, evs)
			if len(ids) != 2 || ids[0] == ids[1] {
				t.Fatalf("runs %q, want two with different run_ids", ids)
			}
			for _, e := range byRun[ids[0]] {
				if e.Type() == events.TypeRunCompleted {
					t.Fatalf("the superseded run %s completed", ids[0])
				}
			}
			if txt, st := text(byRun[ids[1]]); txt != "ok rerun m1" || st != events.StatusComplete {
				t.Errorf("the last run streamed %q %s, want the whole answer, complete", txt, st)
			}
			page, err := store.List(ctx, id, 0, 10)
			if err != nil || len(page.Messages) != 2 || page.Messages[1].Content != "ok rerun m1" || page.Messages[1].Status != events.StatusComplete {
				t.Fatalf("history %+v, %v: want the last run's turn alone", page.Messages, err)
			}
		})
	}
}

func TestATransientModelFailureIsRetriedThenDeadLetteredAndCompletedFailed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		failFirst int
		want      events.Status
	}{
		{name: "two transient failures, then the run succeeds", failFirst: 2, want: events.StatusComplete},
		{name: "failing beyond MaxAttempts dead-letters the record and completes it failed", failFirst: 100, want: events.StatusFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The deadline starts when the subtest runs: a parallel subtest may
			// wait for a slot long after its parent returned.
			ctx := testenv.Context(t, 60*time.Second)
			store := history.NewMemoryStore()
			s := newStack(t, store)
			s.cfg.MaxAttempts = 3
			id := events.Identity{Tenant: "acme", User: "ann", Conversation: "c1"}
			s.produce(t, ctx, id.Key(), request(id, "req-1", "c1 m1"))
			s.produce(t, ctx, id.Key(), request(id, "req-2", "c1 m2"))
			s.start(t, ctx, worker.Deps{Model: &probeModel{failFirst: tt.failFirst}})
			got := s.stream(t).untilCompleted(t, ctx, 2)
			if _, st := text(got["req-1"]); st != tt.want {
				t.Fatalf("req-1 completed %s, want %s", st, tt.want)
			}
			if tt.want != events.StatusFailed {
				return
			}
			c, found, err := store.Lookup(ctx, id, "req-1")
			if err != nil || !found || c.Status != events.StatusFailed {
				t.Fatalf("outcome of req-1: %+v %v %v", c, found, err)
			}
			dlq := kafka.NewReader(kafka.ReaderConfig{Brokers: s.brokers, GroupID: testenv.Name(t, "dlq"), Topic: s.topics.DLQ, StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
			defer dlq.Close()
			rec, err := dlq.ReadMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			h := map[string]string{}
			for _, x := range rec.Headers {
				h[x.Key] = string(x.Value)
			}
			if h[worker.HeaderDLQAttempts] != "3" || !strings.Contains(h[worker.HeaderDLQReason], "503") {
				t.Fatalf("DLQ headers %v", h)
			}
		})
	}
}

// timeThenFail asks for current_time, then fails with a transient error
// (503) before any content, on every run.
type timeThenFail struct{}

func (timeThenFail) Generate(context.Context, []*schema.Message, ...model.Option) (*schema.Message, error) {
	return nil, errors.New("timeThenFail streams only")
}

func (m timeThenFail) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	return m, nil
}

func (timeThenFail) Stream(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	if lastOf(in).Role != schema.Tool {
		return schema.StreamReaderFromArray([]*schema.Message{call("current_time", `{}`)}), nil
	}
	return nil, status503{}
}

// A request dead-lettered after its runs journaled a tool round (the
// model fails after it, MaxAttempts times) has reached its durable end:
// its journal is deleted with the failed outcome.
func TestADeadLetteredRequestsJournalIsDeleted(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store := history.NewMemoryStore()
	s := newStack(t, store)
	s.cfg.Partitions = 1
	s.cfg.MaxAttempts = 2
	reg := prometheus.NewRegistry()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "dead"}
	s.ensureTopics(t, ctx, 1)
	s.produce(t, ctx, id.Key(), request(id, "req-1", "what time is it?"))
	s.start(t, ctx, worker.Deps{Model: timeThenFail{}, Registerer: reg,
		Agent: agentConfig(t, `{"agent": {"name": "assistant", "tools": ["current_time"]}}`)})
	if c := completedOf(t, s.stream(t).untilCompleted(t, ctx, 1)["req-1"]); c.Status != events.StatusFailed {
		t.Fatalf("req-1 completed %s, want failed (dead-lettered)", c.Status)
	}
	// The first run recorded the tool round, the second replayed it: the
	// journal was there until the end.
	if rec, rep := counterValue(t, reg, "turnpike_worker_journal_steps_total", "result", "recorded"),
		counterValue(t, reg, "turnpike_worker_journal_steps_total", "result", "replayed"); rec != 2 || rep != 2 {
		t.Fatalf("journal steps recorded %v, replayed %v: want the tool round recorded once and replayed once", rec, rep)
	}
	if js, found, err := store.Steps(ctx, id, "req-1"); found || err != nil {
		t.Errorf("the journal of the dead-lettered request is still there: %d steps (%v)", len(js.Steps), err)
	}
}

// A request whose run journaled its tool round and was aborted (the
// worker stopped), and which a cancel recorded meanwhile covers, completes
// cancelled when it is delivered again, without running, and its journal
// is deleted: cancelled is a durable end.
func TestACancelledRequestsJournalIsDeletedWhenItIsDeliveredAgain(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 90*time.Second)
	store := history.NewMemoryStore()
	s := newStack(t, store)
	s.cfg.Partitions = 1
	s.cfg.DrainTimeout = 200 * time.Millisecond
	m := &timeThenAnswer{answering: make(chan struct{})}
	d := worker.Deps{Model: m, Agent: agentConfig(t, `{"agent": {"name": "assistant", "tools": ["current_time"]}}`)}
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "cancelled"}
	s.ensureTopics(t, ctx, 1)
	s.produce(t, ctx, id.Key(), request(id, "req-1", "what time is it?"))
	d.Registerer = prometheus.NewRegistry()
	stop := s.start(t, ctx, d)
	select {
	case <-m.answering: // the tool round is journaled; the answer is held
	case <-ctx.Done():
		t.Fatal("the first run never reached its answer")
	}
	stop() // the run is aborted after the drain: the record stays uncommitted
	if js, found, err := store.Steps(ctx, id, "req-1"); !found || err != nil || len(js.Steps) == 0 {
		t.Fatalf("the aborted run left no journal (%d steps, %v): the test needs one", len(js.Steps), err)
	}
	if err := store.RecordCancel(ctx, id, history.Cancel{Topic: s.topics.Requests, Partition: 0, RequestID: "req-1", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	d.Registerer = prometheus.NewRegistry()
	s.start(t, ctx, d)
	if c := completedOf(t, s.stream(t).untilCompleted(t, ctx, 1)["req-1"]); c.Status != events.StatusCancelled {
		t.Fatalf("req-1 completed %s, want cancelled", c.Status)
	}
	if js, found, err := store.Steps(ctx, id, "req-1"); found || err != nil {
		t.Errorf("the journal of the cancelled request is still there: %d steps (%v)", len(js.Steps), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.calls != 1 || m.answers != 1 {
		t.Errorf("the model was asked for the tool call %d times and for the answer %d times: want once each (the cancel wins over the re-run)", m.calls, m.answers)
	}
}
