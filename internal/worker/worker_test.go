package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/internal/worker"
	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// stack is one worker on its own topics.
type stack struct {
	brokers []string
	topics  topic.Names
	store   history.Store
	cfg     worker.Config
}

func newStack(t *testing.T, store history.Store) *stack {
	t.Helper()
	s := &stack{
		brokers: testenv.Kafka(t),
		topics:  topic.NewNames(testenv.Name(t, "tp") + "."),
		store:   store,
	}
	s.cfg = worker.Config{
		Brokers:         s.brokers,
		Topics:          s.topics,
		GroupID:         testenv.Name(t, "g"),
		Partitions:      3,
		RetryBackoffMin: 10 * time.Millisecond,
		RetryBackoffMax: 100 * time.Millisecond,
		SessionTimeout:  6 * time.Second,
		DrainTimeout:    5 * time.Second,
	}
	return s
}

// start runs a worker until the returned stop is called (or the test ends).
func (s *stack) start(t *testing.T, ctx context.Context, d worker.Deps) (stop func()) {
	t.Helper()
	return s.run(t, ctx, s.newWorker(t, d))
}

// newWorker makes a worker of s's config, on s's store and the echo model
// unless d names others.
func (s *stack) newWorker(t *testing.T, d worker.Deps) *worker.Worker {
	t.Helper()
	if d.Store == nil {
		d.Store = s.store
	}
	if d.Model == nil {
		m, err := echo.New(echo.Config{})
		if err != nil {
			t.Fatal(err)
		}
		d.Model = m
	}
	w, err := worker.New(s.cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// run runs w until the returned stop is called (or the test ends).
func (s *stack) run(t *testing.T, ctx context.Context, w *worker.Worker) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// ensureTopics creates the stack's topics with partitions partitions, if
// they are not there yet.
func (s *stack) ensureTopics(t *testing.T, ctx context.Context, partitions int) {
	t.Helper()
	if err := topic.Ensure(ctx, s.brokers, partitions, s.topics.All()...); err != nil {
		t.Fatal(err)
	}
}

func (s *stack) produce(t *testing.T, ctx context.Context, key string, value []byte) {
	t.Helper()
	s.ensureTopics(t, ctx, 3)
	w := &kafka.Writer{Addr: kafka.TCP(s.brokers...), Topic: s.topics.Requests, Balancer: &kafka.Murmur2Balancer{}, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(key), Value: value}); err != nil {
		t.Fatal(err)
	}
}

func request(id events.Identity, requestID, content string) []byte {
	b, _ := events.EncodeRequest(events.Request{V: 1, RequestID: requestID, Tenant: id.Tenant, User: id.User, Conversation: id.Conversation,
		Content: content, Strategy: events.StrategyEnqueue, CreatedAt: time.Now().UTC()})
	return b
}

// streamReader reads the stream topic from the start.
type streamReader struct {
	r *kafka.Reader
}

func (s *stack) stream(t *testing.T) *streamReader {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: s.brokers, GroupID: testenv.Name(t, "reader"), Topic: s.topics.Stream,
		StartOffset: kafka.FirstOffset, MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond})
	t.Cleanup(func() { r.Close() })
	return &streamReader{r: r}
}

// events reads stream events until n run.completed arrived, in stream
// order. Each must decode and be keyed by its conversation.
func (s *streamReader) events(t *testing.T, ctx context.Context, n int) []events.Event {
	t.Helper()
	var out []events.Event
	for done := 0; done < n; {
		e := s.next(t, ctx)
		out = append(out, e)
		if e.Type() == events.TypeRunCompleted {
			done++
		}
	}
	return out
}

// next reads the next stream event, which must decode and be keyed by its
// conversation.
func (s *streamReader) next(t *testing.T, ctx context.Context) events.Event {
	t.Helper()
	m, err := s.r.ReadMessage(ctx)
	if err != nil {
		t.Fatalf("read stream: %v", err)
	}
	e, err := events.DecodeEvent(m.Value)
	if err != nil {
		t.Fatalf("stream event does not decode: %v: %s", err, m.Value)
	}
	id, err := events.ParseKey(string(m.Key))
	if err != nil || id.Conversation != e.Header().Conversation {
		t.Fatalf("stream key %q does not match event %+v", m.Key, e.Header())
	}
	return e
}

// untilCompleted is events grouped by request id.
func (s *streamReader) untilCompleted(t *testing.T, ctx context.Context, n int) map[string][]events.Event {
	t.Helper()
	byReq := map[string][]events.Event{}
	for _, e := range s.events(t, ctx, n) {
		byReq[e.Header().RequestID] = append(byReq[e.Header().RequestID], e)
	}
	return byReq
}

func text(evs []events.Event) (string, events.Status) {
	var b strings.Builder
	var st events.Status
	for _, e := range evs {
		switch e := e.(type) {
		case *events.TokenEvent:
			b.WriteString(e.Delta)
		case *events.RunCompletedEvent:
			st = e.Status
		}
	}
	return b.String(), st
}

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
