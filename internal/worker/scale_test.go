package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/internal/worker"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// probeModel answers "ok <content>" after hold (if set) releases it, and
// records how many runs are in flight, overall and per conversation (the
// first word of the content names the conversation).
type probeModel struct {
	hold chan struct{} // runs wait for it when non-nil

	mu      sync.Mutex
	running map[string]int
	total   int
	maxAll  int
	maxConv int
	order   map[string][]string // conversation -> contents in run order
	// failFirst makes the first n runs of each content fail with a
	// transient (status 503) error before any content.
	failFirst int
	failed    map[string]int
}

type status503 struct{}

func (status503) Error() string   { return "model server: 503 service unavailable" }
func (status503) StatusCode() int { return 503 }

func (m *probeModel) Generate(ctx context.Context, in []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	return nil, errors.New("probeModel streams only")
}

func (m *probeModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return m, nil }

func (m *probeModel) Stream(ctx context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	content := in[len(in)-1].Content
	conv, _, _ := strings.Cut(content, " ")
	m.mu.Lock()
	if m.failed == nil {
		m.failed = map[string]int{}
	}
	if m.failed[content] < m.failFirst {
		m.failed[content]++
		m.mu.Unlock()
		return nil, status503{}
	}
	if m.running == nil {
		m.running, m.order = map[string]int{}, map[string][]string{}
	}
	m.running[conv]++
	m.total++
	m.maxAll = max(m.maxAll, m.total)
	m.maxConv = max(m.maxConv, m.running[conv])
	m.order[conv] = append(m.order[conv], content)
	m.mu.Unlock()
	sr, sw := schema.Pipe[*schema.Message](1)
	go func() {
		defer sw.Close()
		defer func() {
			m.mu.Lock()
			m.running[conv]--
			m.total--
			m.mu.Unlock()
		}()
		if m.hold != nil {
			select {
			case <-m.hold:
			case <-ctx.Done():
				sw.Send(nil, ctx.Err())
				return
			}
		}
		sw.Send(schema.AssistantMessage("ok "+content, nil), nil)
	}()
	return sr, nil
}

func (m *probeModel) stats() (maxAll, maxConv int, order map[string][]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := map[string][]string{}
	for k, v := range m.order {
		o[k] = append([]string(nil), v...)
	}
	return m.maxAll, m.maxConv, o
}

func (m *probeModel) inFlight() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.total
}

// produceAll writes the requests (conversation i, message j) into a
// single-partition topic so that ordering inside a partition is what is
// tested.
func produceAll(t *testing.T, ctx context.Context, s *stack, convs, msgs int) {
	t.Helper()
	if err := topic.Ensure(ctx, s.brokers, 1, s.topics.All()...); err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(s.brokers...), Topic: s.topics.Requests, Balancer: &kafka.Murmur2Balancer{}, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	var batch []kafka.Message
	for j := 1; j <= msgs; j++ {
		for i := 1; i <= convs; i++ {
			id := events.Identity{Tenant: "acme", User: "ann", Conversation: fmt.Sprintf("c%d", i)}
			batch = append(batch, kafka.Message{Key: []byte(id.Key()), Value: request(id, fmt.Sprintf("c%d-m%d", i, j), fmt.Sprintf("c%d m%d", i, j))})
		}
	}
	if err := w.WriteMessages(ctx, batch...); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkHistory asserts every conversation holds its msgs turns in order,
// once each.
func checkHistory(t *testing.T, ctx context.Context, store history.Store, convs, msgs int) {
	t.Helper()
	for i := 1; i <= convs; i++ {
		id := events.Identity{Tenant: "acme", User: "ann", Conversation: fmt.Sprintf("c%d", i)}
		page, err := store.List(ctx, id, 0, 200)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if len(page.Messages) != 2*msgs {
			t.Fatalf("%s holds %d messages, want %d: %+v", id, len(page.Messages), 2*msgs, page.Messages)
		}
		for j := 1; j <= msgs; j++ {
			u, a := page.Messages[2*j-2], page.Messages[2*j-1]
			want := fmt.Sprintf("c%d m%d", i, j)
			if u.Content != want || a.Content != "ok "+want {
				t.Fatalf("%s turn %d is %q/%q, want %q in order", id, j, u.Content, a.Content, want)
			}
		}
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
	waitFor(t, ctx, "all conversations running at once", func() bool { return m.inFlight() == convs })
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
	s.cfg.Ordering = worker.OrderingPartition
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
	ctx := testenv.Context(t, 60*time.Second)
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
			const convs = 10
			store := history.NewMemoryStore()
			s := newStack(t, store)
			s.cfg.Partitions = 1
			tt.set(&s.cfg)
			produceAll(t, ctx, s, convs, 1)
			m := &probeModel{hold: make(chan struct{})}
			s.start(t, ctx, worker.Deps{Model: m})
			waitFor(t, ctx, "three runs", func() bool { return m.inFlight() == 3 })
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
	w, err := worker.New(other, worker.Deps{Store: store, Model: &probeModel{}, Registerer: regB})
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

func TestATransientModelFailureIsRetriedThenDeadLetteredAndCompletedFailed(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
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
