package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
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
	prefix := testenv.Name(t, "tp") + "."
	s := &stack{
		brokers: testenv.Kafka(t),
		topics:  topic.NewNames(prefix),
		store:   store,
	}
	s.cfg = worker.Config{
		Brokers:         s.brokers,
		TopicPrefix:     prefix,
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
func (s *stack) newWorker(t *testing.T, d worker.Deps) *worker.Consumer {
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
	w, err := worker.NewConsumer(s.cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// run runs w until the returned stop is called (or the test ends).
func (s *stack) run(t *testing.T, ctx context.Context, w *worker.Consumer) (stop func()) {
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
	testenv.Produce(t, ctx, s.brokers, s.topics.Requests, kafka.Message{Key: []byte(key), Value: value})
}

// request is the value of testenv.Request.
func request(id events.Identity, requestID, content string) []byte {
	return testenv.Request(id, requestID, content).Value
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

func (status503) Error() string { return "model server: 503 service unavailable" }

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
	var batch []kafka.Message
	for j := 1; j <= msgs; j++ {
		for i := 1; i <= convs; i++ {
			id := events.Identity{Tenant: "acme", User: "ann", Conversation: fmt.Sprintf("c%d", i)}
			batch = append(batch, testenv.Request(id, fmt.Sprintf("c%d-m%d", i, j), fmt.Sprintf("c%d m%d", i, j)))
		}
	}
	testenv.Produce(t, ctx, s.brokers, s.topics.Requests, batch...)
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

// scripted is a tool-calling chat model whose reply is a function of its
// input, so that a re-run or a resume gets the same answer. It streams a
// text reply word by word, a tool call in one chunk, and reports usage in
// a last chunk (as OpenAI does with include_usage). It records every input.
type scripted struct {
	reply func(in []*schema.Message) *schema.Message
	// usage is what each call reports; nil: 10 prompt and 2 completion
	// tokens.
	usage *schema.TokenUsage

	mu     sync.Mutex
	inputs [][]*schema.Message
}

func (m *scripted) record(in []*schema.Message) *schema.Message {
	m.mu.Lock()
	m.inputs = append(m.inputs, in)
	m.mu.Unlock()
	return m.reply(in)
}

func (m *scripted) seen() [][]*schema.Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]*schema.Message(nil), m.inputs...)
}

func (m *scripted) usageOf() *schema.TokenUsage {
	if m.usage != nil {
		u := *m.usage
		return &u
	}
	return &schema.TokenUsage{PromptTokens: 10, CompletionTokens: 2, TotalTokens: 12}
}

func (m *scripted) Generate(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	out := m.record(in)
	out.ResponseMeta = &schema.ResponseMeta{FinishReason: "stop", Usage: m.usageOf()}
	return out, nil
}

func (m *scripted) Stream(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	out := m.record(in)
	var chunks []*schema.Message
	if len(out.ToolCalls) > 0 {
		chunks = append(chunks, out)
	} else {
		for _, w := range strings.SplitAfter(out.Content, " ") {
			chunks = append(chunks, schema.AssistantMessage(w, nil))
		}
	}
	last := schema.AssistantMessage("", nil)
	last.ResponseMeta = &schema.ResponseMeta{FinishReason: "stop", Usage: m.usageOf()}
	return schema.StreamReaderFromArray(append(chunks, last)), nil
}

func (m *scripted) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return m, nil }

func call(name, args string) *schema.Message {
	return schema.AssistantMessage("", []schema.ToolCall{{ID: "call-" + name, Type: "function", Function: schema.FunctionCall{Name: name, Arguments: args}}})
}

// lastOf is the last message of in.
func lastOf(in []*schema.Message) *schema.Message { return in[len(in)-1] }

func agentConfig(t *testing.T, js string) *worker.AgentConfig {
	t.Helper()
	c, err := worker.ParseAgentConfig([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func completedOf(t *testing.T, evs []events.Event) *events.RunCompletedEvent {
	t.Helper()
	c, ok := evs[len(evs)-1].(*events.RunCompletedEvent)
	if !ok {
		t.Fatalf("last event %T, want run.completed", evs[len(evs)-1])
	}
	return c
}

// waitCounter waits until the counter name with labels (name=value
// pairs) reaches want: a run's metrics are counted right after its
// run.completed is written.
func waitCounter(t *testing.T, ctx context.Context, reg *prometheus.Registry, want float64, name string, labels ...string) {
	t.Helper()
	for {
		got := counterValue(t, reg, name, labels...)
		if got == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s%v = %v, want %v", name, labels, got, want)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// counterValue is the sum of the counter name's series that carry labels
// (name=value pairs).
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			match := true
			for k := 0; k+1 < len(labels); k += 2 {
				match = match && have[labels[k]] == labels[k+1]
			}
			if match {
				got += m.GetCounter().GetValue()
			}
		}
	}
	return got
}

// gatedModel answers "ok <content>"; the first run of a gated content
// waits until its gate is closed or its context ends (an aborted run).
// It records every run, in start order.
type gatedModel struct {
	mu    sync.Mutex
	gates map[string]chan struct{}
	runs  []string
}

func newGatedModel(gated ...string) *gatedModel {
	m := &gatedModel{gates: map[string]chan struct{}{}}
	for _, c := range gated {
		m.gates[c] = make(chan struct{})
	}
	return m
}

func (m *gatedModel) Generate(context.Context, []*schema.Message, ...model.Option) (*schema.Message, error) {
	return nil, fmt.Errorf("gatedModel streams only")
}

func (m *gatedModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return m, nil }

func (m *gatedModel) Stream(ctx context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	content := in[len(in)-1].Content
	m.mu.Lock()
	gate := m.gates[content]
	delete(m.gates, content) // only the first run waits
	m.runs = append(m.runs, content)
	m.mu.Unlock()
	sr, sw := schema.Pipe[*schema.Message](1)
	go func() {
		defer sw.Close()
		sw.Send(schema.AssistantMessage("ok ", nil), nil)
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				sw.Send(nil, ctx.Err())
				return
			}
		}
		sw.Send(schema.AssistantMessage(content, nil), nil)
	}()
	return sr, nil
}

// gate returns the gate of content's first run (nil once it started).
func (m *gatedModel) gate(content string) chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gates[content]
}

// ran returns how many runs each content had.
func (m *gatedModel) ran() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := map[string]int{}
	for _, c := range m.runs {
		n[c]++
	}
	return n
}

// strategyRequest is request with a send strategy.
func strategyRequest(id events.Identity, requestID, content string, strategy events.Strategy) []byte {
	return testenv.Record(events.Request{V: 1, RequestID: requestID, Tenant: id.Tenant, User: id.User, Conversation: id.Conversation,
		Content: content, Strategy: strategy, CreatedAt: time.Now().UTC()}).Value
}

// outcomeModel ends each run as the first word of the request's content
// says, so that one worker can end requests every way there is:
//
//   - "fail": a transient error (503) before any content;
//   - "ask": a call of the ask_user tool (the agent must have it);
//   - "empty": an answer without content;
//   - "break": "answer to ", then the stream breaks off with an error;
//   - "hold": "answer to ", then nothing until the run's context ends;
//   - anything else: "answer to <content>".
//
// It counts the runs of each content.
type outcomeModel struct {
	mu   sync.Mutex
	runs map[string]int
}

func (m *outcomeModel) Generate(context.Context, []*schema.Message, ...model.Option) (*schema.Message, error) {
	return nil, errors.New("outcomeModel streams only")
}

func (m *outcomeModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	return m, nil
}

func (m *outcomeModel) ran(content string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runs[content]
}

func (m *outcomeModel) Stream(ctx context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	content := in[len(in)-1].Content
	kind, _, _ := strings.Cut(content, " ")
	m.mu.Lock()
	if m.runs == nil {
		m.runs = map[string]int{}
	}
	m.runs[content]++
	m.mu.Unlock()
	switch kind {
	case "fail":
		return nil, status503{}
	case "ask":
		return schema.StreamReaderFromArray([]*schema.Message{call(worker.ToolAskUser, `{"question":"Which one?"}`)}), nil
	case "empty":
		return schema.StreamReaderFromArray([]*schema.Message{schema.AssistantMessage("", nil)}), nil
	}
	sr, sw := schema.Pipe[*schema.Message](1)
	go func() {
		defer sw.Close()
		if sw.Send(schema.AssistantMessage("answer to ", nil), nil) {
			return
		}
		switch kind {
		case "break":
			sw.Send(nil, errors.New("the model's stream broke off"))
		case "hold":
			<-ctx.Done()
			sw.Send(nil, ctx.Err())
		default:
			sw.Send(schema.AssistantMessage(content, nil), nil)
		}
	}()
	return sr, nil
}

// refuseProduces makes k's broker refuse the first n produce requests to
// topicName (a policy violation: an error kafka-go's writer does not retry
// itself) and returns the count of those refused so far.
func refuseProduces(k *embedded.Kafka, topicName string, n int32) *atomic.Int32 {
	refused := &atomic.Int32{}
	cluster := k.Cluster()
	cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := r.(*kmsg.ProduceRequest)
		if len(req.Topics) == 0 || req.Topics[0].Topic != topicName || refused.Load() >= n {
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
				rp.ErrorCode = kerr.PolicyViolation.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	return refused
}

// failFirstRunOf fails the first run of one content with a transient
// error (status 503) before any content; every other run is the wrapped
// model's.
type failFirstRunOf struct {
	*gatedModel
	content string
	failed  atomic.Int32
}

func (f *failFirstRunOf) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	return f, nil
}

func (f *failFirstRunOf) Stream(ctx context.Context, in []*schema.Message, opts ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	if in[len(in)-1].Content == f.content && f.failed.Add(1) == 1 {
		return nil, status503{}
	}
	return f.gatedModel.Stream(ctx, in, opts...)
}
