package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/components/tool/utils"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/turnpiketest"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// lookupModel calls the lookup tool with the user's message, then answers
// with the tool's result. fail, if set, may fail a call before any content.
type lookupModel struct {
	fail func() error
}

func (m lookupModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return m, nil }

func (m lookupModel) reply(in []*schema.Message) (*schema.Message, error) {
	if m.fail != nil {
		if err := m.fail(); err != nil {
			return nil, err
		}
	}
	last := in[len(in)-1]
	if last.Role == schema.Tool {
		return schema.AssistantMessage("found: "+last.Content, nil), nil
	}
	return schema.AssistantMessage("", []schema.ToolCall{{ID: "call-1", Type: "function",
		Function: schema.FunctionCall{Name: "lookup", Arguments: fmt.Sprintf(`{"key":%q}`, last.Content)}}}), nil
}

func (m lookupModel) Generate(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	return m.reply(in)
}

func (m lookupModel) Stream(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	out, err := m.reply(in)
	if err != nil {
		return nil, err
	}
	if len(out.ToolCalls) > 0 {
		return schema.StreamReaderFromArray([]*schema.Message{out}), nil
	}
	var parts []*schema.Message
	for _, w := range strings.SplitAfter(out.Content, " ") {
		parts = append(parts, schema.AssistantMessage(w, nil))
	}
	return schema.StreamReaderFromArray(parts), nil
}

type lookupArgs struct {
	Key string `json:"key"`
}

// lookupTool answers "<key> for <request id>": the request id comes from
// the run's context. calls counts its runs by request id.
func lookupTool(t *testing.T, calls *sync.Map) tool.BaseTool {
	tl, err := utils.InferTool("lookup", "looks a key up", func(ctx context.Context, a lookupArgs) (string, error) {
		r, ok := worker.RequestFromContext(ctx)
		if !ok {
			return "", errors.New("no request in the tool's context")
		}
		n, _ := calls.LoadOrStore(r.RequestID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		return a.Key + " for " + r.RequestID, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

func newLookupAgent(ctx context.Context, m model.ToolCallingChatModel, tl tool.BaseTool) (adk.Agent, error) {
	return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{
		Name: "finder", Description: "finds things", Instruction: "Look things up.", Model: m,
		ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{tl}}},
	})
}

// Many runs of one tool-calling agent at once, each on an agent the
// factory built for it: under -race this is where eino's shared
// configuration would race (TestEinoRacesWhenRunsShareAToolCallingAgent).
// Each run sees its own request in ctx (its tool's answer names it),
// streams and persists only the answer, never the tool call or result.
func TestConcurrentRunsOfAToolCallingAgent(t *testing.T) {
	var calls, built sync.Map
	tl := lookupTool(t, &calls)
	stack := turnpiketest.Start(t, worker.WithAgentFactory(func(ctx context.Context, r worker.Request) (adk.Agent, error) {
		built.Store(r.RequestID, r)
		return newLookupAgent(ctx, lookupModel{}, tl)
	}))
	c := stack.Client("alice")
	const n = 8
	var wg sync.WaitGroup
	runs := make([]turnpiketest.Run, n)
	ids := make([]string, n)
	for i := range n {
		conv := fmt.Sprintf("c%d", i)
		f := c.Follow(conv)
		ids[i] = c.Send(conv, fmt.Sprintf("key%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i] = f.Run(ids[i])
		}()
	}
	wg.Wait()
	for i, r := range runs {
		want := fmt.Sprintf("found: key%d for %s", i, ids[i])
		if r.Status != events.StatusComplete || r.Text != want {
			t.Errorf("run %d: %v, want complete %q", i, r, want)
		}
		got, ok := built.Load(ids[i])
		if !ok || got.(worker.Request) != (worker.Request{Tenant: stack.Tenant, User: "alice", Conversation: fmt.Sprintf("c%d", i), RequestID: ids[i]}) {
			t.Errorf("run %d: the factory got %+v", i, got)
		}
		if n, _ := calls.Load(ids[i]); n == nil || n.(*atomic.Int32).Load() != 1 {
			t.Errorf("run %d: the tool ran %v times, want once", i, n)
		}
		h := c.History(fmt.Sprintf("c%d", i))
		if len(h) != 2 || h[0].Content != fmt.Sprintf("key%d", i) || h[1].Content != want || h[1].Agent != "finder" {
			t.Errorf("run %d: history %+v", i, h)
		}
	}
}

// Many runs at once on ONE tool-calling ChatModelAgent (WithAgent), the
// sharing the README and WithAgentFactory advise against. It shows that the
// advice still holds on eino v0.9.21: under -race it fails, with writes in
// eino's TypedChatModelAgent.buildMessageReActRunFunc (adk/chatmodel.go:1145,
// each run stores its cancel context in a config all runs share) racing
// with newReact's reads (adk/react.go:365). It is a demonstration, not a
// guarantee, so it runs only when asked:
//
//	TURNPIKE_EINO_SHARED_AGENT=1 go test -race -run TestEinoRacesWhenRunsShareAToolCallingAgent ./pkg/worker
//
// Without -race the runs still complete, each with its own answer.
func TestEinoRacesWhenRunsShareAToolCallingAgent(t *testing.T) {
	if os.Getenv("TURNPIKE_EINO_SHARED_AGENT") == "" {
		t.Skip("demonstrates a data race in eino; set TURNPIKE_EINO_SHARED_AGENT=1 to run it")
	}
	var calls sync.Map
	tl := lookupTool(t, &calls)
	shared, err := newLookupAgent(t.Context(), lookupModel{}, tl)
	if err != nil {
		t.Fatal(err)
	}
	stack := turnpiketest.Start(t, worker.WithAgent(shared))
	c := stack.Client("bella")
	const n = 8
	runs := make([]turnpiketest.Run, n)
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		conv := fmt.Sprintf("shared%d", i)
		f := c.Follow(conv)
		ids[i] = c.Send(conv, fmt.Sprintf("key%d", i))
		wg.Go(func() { runs[i] = f.Run(ids[i]) })
	}
	wg.Wait()
	for i, r := range runs {
		want := fmt.Sprintf("found: key%d for %s", i, ids[i])
		if r.Status != events.StatusComplete || r.Text != want {
			t.Errorf("run %d: %v, want complete %q", i, r, want)
		}
		if n, _ := calls.Load(ids[i]); n == nil || n.(*atomic.Int32).Load() != 1 {
			t.Errorf("run %d: the tool ran %v times, want once", i, n)
		}
	}
}

// errFlaky is a custom model's transient error, which only the caller can
// recognise.
var errFlaky = errors.New("flaky model: try again")

// A custom model's transient error, classified by WithTransientErrors,
// runs the request again; unclassified, the run ends at once.
func TestTransientErrorsOfACustomModel(t *testing.T) {
	for _, classify := range []bool{true, false} {
		t.Run(fmt.Sprint("classified=", classify), func(t *testing.T) {
			var attempts atomic.Int32
			m := lookupModel{fail: func() error {
				if attempts.Add(1) <= 2 {
					return errFlaky
				}
				return nil
			}}
			var calls sync.Map
			tl := lookupTool(t, &calls)
			opts := []worker.Option{worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
				return newLookupAgent(ctx, m, tl)
			}), worker.WithNotice(func(err error) string { return "sorry: " + err.Error() })}
			if classify {
				opts = append(opts, worker.WithTransientErrors(func(err error) bool { return errors.Is(err, errFlaky) }))
			}
			cfg := turnpiketest.Config()
			cfg.RetryBackoffMin, cfg.RetryBackoffMax = 1, 1 // no waiting between attempts
			stack := turnpiketest.StartConfig(t, cfg, opts...)
			c := stack.Client("bob")
			f := c.Follow("c")
			id := c.Send("c", "k")
			r := f.Run(id)
			if classify {
				if r.Status != events.StatusComplete || r.Text != "found: k for "+id || attempts.Load() != 4 {
					t.Errorf("%v after %d model calls; want complete after 4 (2 failed)", r, attempts.Load())
				}
				return
			}
			if r.Status == events.StatusComplete || attempts.Load() != 1 || len(r.Notices) != 1 || !strings.Contains(r.Notices[0], errFlaky.Error()) {
				t.Errorf("%v (notices %q) after %d model calls; want one failed call and the custom notice", r, r.Notices, attempts.Load())
			}
		})
	}
}

// Options that make no sense together fail New.
func TestNewRejectsBadOptions(t *testing.T) {
	cfg := worker.DefaultConfig()
	cfg.Brokers, cfg.MongoURI = []string{"127.0.0.1:1"}, "mongodb://127.0.0.1:1"
	agent := func(context.Context, worker.Request) (adk.Agent, error) { return nil, nil }
	shared, err := adk.NewChatModelAgent(context.Background(), &adk.ChatModelAgentConfig{Name: "a", Description: "a", Model: lookupModel{}})
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]worker.Option{
		"hooks without an agent": {worker.WithStream(nil)},
		"two agents":             {worker.WithAgentFactory(agent), worker.WithAgent(shared)},
	} {
		if _, err := worker.New(cfg, opts...); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	cfg.AgentFile = "agents.json"
	if _, err := worker.New(cfg, worker.WithAgentFactory(agent)); err == nil || !strings.Contains(err.Error(), "agent written in Go") {
		t.Errorf("an agent file and a Go agent: %v", err)
	}
	if _, err := worker.New(worker.Config{}, worker.WithAgentFactory(agent)); err == nil || !strings.Contains(err.Error(), "TURNPIKE_KAFKA_BROKERS") {
		t.Errorf("no brokers: %v", err)
	}
}

func wait(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(turnpiketest.Timeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// usageModel answers "hello there" and reports its token usage.
type usageModel struct{}

func (m usageModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return m, nil }

func (usageModel) Generate(context.Context, []*schema.Message, ...model.Option) (*schema.Message, error) {
	return nil, errors.New("stream only")
}

func (usageModel) Stream(context.Context, []*schema.Message, ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	last := schema.AssistantMessage("there", nil)
	last.ResponseMeta = &schema.ResponseMeta{Usage: &schema.TokenUsage{PromptTokens: 7, CompletionTokens: 2, TotalTokens: 9}}
	return schema.StreamReaderFromArray([]*schema.Message{schema.AssistantMessage("hello ", nil), last}), nil
}

// A Go agent's token usage reaches run.completed, the persisted turn and
// the metrics, under the label WithModelLabel gives.
//
// The worker bumps a run's counters after its run.completed is written
// (they count runs whose record is done), so run.completed says nothing
// about /metrics. What orders them is the conversation's queue: the next
// request of the conversation starts (its agent is built) only after the
// previous one's record is done, counters included. So the test holds the
// next request in its agent factory, and reads /metrics then: exactly the
// first run's counts, with nothing of the second yet.
func TestUsageAndMetricsOfACustomAgent(t *testing.T) {
	var (
		mu      sync.Mutex
		firstID string // the request of the first build
		next    sync.Once
	)
	nextBuilding, release := make(chan struct{}), make(chan struct{})
	stack := turnpiketest.Start(t, worker.WithAgentFactory(func(ctx context.Context, r worker.Request) (adk.Agent, error) {
		mu.Lock()
		if firstID == "" {
			firstID = r.RequestID
		}
		isNext := r.RequestID != firstID
		mu.Unlock()
		if isNext {
			next.Do(func() { close(nextBuilding) })
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "greeter", Description: "greets", Model: usageModel{}})
	}), worker.WithModelLabel(func(agent string) string { return "scripted-" + agent }))
	c := stack.Client("frank")
	f := c.Follow("c")
	r := f.Run(c.Send("c", "hi"))
	want := events.Usage{PromptTokens: 7, CompletionTokens: 2, TotalTokens: 9}
	done, _ := r.Events[len(r.Events)-1].(*events.RunCompletedEvent)
	if r.Text != "hello there" || done == nil || done.Usage == nil || *done.Usage != want {
		t.Fatalf("%v, usage %+v", r, done)
	}
	if h := c.History("c"); len(h) != 2 || h[1].Usage == nil || *h[1].Usage != want {
		t.Errorf("history %+v", h)
	}
	again := c.Send("c", "again")
	wait(t, nextBuilding, "the next request of the conversation to start")
	metrics := scrape(t, stack.IngestURL+"/metrics")
	for _, line := range []string{
		`turnpike_worker_model_tokens_total{kind="prompt",model="scripted-greeter"} 7`,
		`turnpike_worker_model_tokens_total{kind="completion",model="scripted-greeter"} 2`,
		`turnpike_worker_runs_total{status="complete"} 1`,
	} {
		if !strings.Contains(metrics, line+"\n") {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	close(release)
	if r := f.Run(again); r.Status != events.StatusComplete {
		t.Errorf("the next request: %v", r)
	}
}

// scrape returns the body of a GET of url.
func scrape(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), turnpiketest.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// A Go agent's requests of one conversation run one at a time, in topic
// order, and a duplicate record (the same request id produced twice)
// completes as the first did without running the agent again.
func TestOrderAndIdempotencyOfACustomAgent(t *testing.T) {
	var mu sync.Mutex
	var order []string
	running, overlap := 0, false
	var calls sync.Map
	tl := lookupTool(t, &calls)
	stack := turnpiketest.Start(t, worker.WithAgentFactory(func(ctx context.Context, r worker.Request) (adk.Agent, error) {
		mu.Lock()
		order = append(order, r.RequestID)
		running++
		overlap = overlap || running > 1
		mu.Unlock()
		return newLookupAgent(ctx, countingModel{lookupModel{}, func() {
			mu.Lock()
			running--
			mu.Unlock()
		}}, tl)
	}))
	p := client.NewProducer(stack.Brokers, stack.RequestsTopic)
	defer p.Close()
	id := events.Identity{Tenant: stack.Tenant, User: "gina", Conversation: "c"}
	c := stack.Client("gina")
	f := c.Follow("c")
	ctx := context.Background()
	for i, rid := range []string{"r-1", "r-2", "r-1", "r-3"} {
		if _, err := p.Produce(ctx, id, fmt.Sprintf("k%d", i), client.ProduceOptions{RequestID: rid}); err != nil {
			t.Fatal(err)
		}
	}
	for _, rid := range []string{"r-1", "r-2", "r-1", "r-3"} {
		if r := f.Run(rid); r.Status != events.StatusComplete {
			t.Errorf("%s: %v", rid, r)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(order, " ") != "r-1 r-2 r-3" || overlap {
		t.Errorf("the agent ran for %v (overlapping: %v), want r-1 r-2 r-3 one at a time", order, overlap)
	}
	if h := c.History("c"); len(h) != 6 {
		t.Errorf("history of %d messages, want 3 turns: %+v", len(h), h)
	}
}

// countingModel calls done when its final answer has been streamed.
type countingModel struct {
	lookupModel
	done func()
}

func (m countingModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	return m, nil
}

func (m countingModel) Stream(ctx context.Context, in []*schema.Message, opts ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	if in[len(in)-1].Role == schema.Tool {
		defer m.done()
	}
	return m.lookupModel.Stream(ctx, in, opts...)
}

// AskUser interrupts a Go agent's run with its question; the resume hands
// it the answer (a string, by default) as its result.
func TestAskUserInterruptsAndResumes(t *testing.T) {
	m := scriptModel(func(in []*schema.Message) *schema.Message {
		if last := in[len(in)-1]; last.Role == schema.Tool {
			return schema.AssistantMessage("Booked for "+last.Content+".", nil)
		}
		return schema.AssistantMessage("", []schema.ToolCall{{ID: "ask", Type: "function",
			Function: schema.FunctionCall{Name: "ask_user", Arguments: `{"question":"Which day?"}`}}})
	})
	// The resume hook fails once (a transient error: retried), then
	// hands the tool the answer with the resume's request id.
	var hookCalls atomic.Int32
	resume := worker.WithResume(func(ctx context.Context, r worker.Resume) (any, error) {
		if hookCalls.Add(1) == 1 {
			return nil, errors.New("answer store unreachable")
		}
		if c, ok := worker.RequestFromContext(ctx); !ok || c != r.Request || r.Tool != "ask_user" || r.Question != "Which day?" {
			return nil, fmt.Errorf("resume %+v in the context of %+v", r, c)
		}
		return r.Answer, nil
	})
	cfg := turnpiketest.Config()
	cfg.RetryBackoffMin, cfg.RetryBackoffMax = 1, 1
	stack := turnpiketest.StartConfig(t, cfg, worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "booker", Description: "books", Model: m,
			ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{worker.AskUser()}}}})
	}), resume)
	c := stack.Client("hana")
	f := c.Follow("c")
	asked := f.Run(c.Send("c", "book a table"))
	if asked.Status != events.StatusInterrupted || asked.Interrupt == nil || asked.Interrupt.Question != "Which day?" || asked.Interrupt.Tool != "ask_user" {
		t.Fatalf("%v, interrupt %+v", asked, asked.Interrupt)
	}
	if r := f.Run(c.Resume("c", asked.RequestID, "Friday")); r.Status != events.StatusComplete || r.Text != "Booked for Friday." || hookCalls.Load() != 2 {
		t.Errorf("resumed: %v after %d calls of the hook, want 2", r, hookCalls.Load())
	}
}

// scriptModel answers with reply's message, whole.
type scriptModel func(in []*schema.Message) *schema.Message

func (m scriptModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return m, nil }

func (m scriptModel) Generate(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	return m(in), nil
}

func (m scriptModel) Stream(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	return schema.StreamReaderFromArray([]*schema.Message{m(in)}), nil
}

// A resume hook that refuses the answer rejects the resume with its own
// error as the notice; the interrupt stays pending, and another answer
// resumes it.
func TestRefusedAnswerRejectsTheResume(t *testing.T) {
	m := scriptModel(func(in []*schema.Message) *schema.Message {
		if last := in[len(in)-1]; last.Role == schema.Tool {
			return schema.AssistantMessage("Booked for "+last.Content+".", nil)
		}
		return schema.AssistantMessage("", []schema.ToolCall{{ID: "ask", Type: "function",
			Function: schema.FunctionCall{Name: "ask_user", Arguments: `{"question":"Which day?"}`}}})
	})
	day := worker.WithResumeAs("ask_user", func(answer string) (string, error) {
		if answer != "Friday" {
			return "", errors.New("we are open on Fridays only")
		}
		return answer, nil
	})
	stack := turnpiketest.Start(t, worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "booker", Description: "books", Model: m,
			ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{worker.AskUser()}}}})
	}), day)
	c := stack.Client("hana")
	f := c.Follow("c")
	asked := f.Run(c.Send("c", "book a table"))
	if asked.Status != events.StatusInterrupted {
		t.Fatalf("%v, want interrupted", asked)
	}
	r := f.Run(c.Resume("c", asked.RequestID, "Monday"))
	if want := "Answer rejected: we are open on Fridays only"; r.Status != events.StatusRejected || len(r.Notices) != 1 || r.Notices[0] != want {
		t.Errorf("resumed with a refused answer: %v, notices %q; want rejected with the notice %q", r, r.Notices, want)
	}
	if r := f.Run(c.Resume("c", asked.RequestID, "Friday")); r.Status != events.StatusComplete || r.Text != "Booked for Friday." {
		t.Errorf("resumed again: %v", r)
	}
}

// The worker says it is ready only once its topics exist: the devstack
// reports ready when every service has, and ingest's first produce fails
// with "unknown topic" if the worker is still creating the requests topic.
// The broker holds CreateTopics back, so a worker that reports ready
// before its topics exist is seen doing so.
func TestTheWorkerIsReadyOnlyOnceItsTopicsExist(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	var held, created atomic.Bool
	k.Cluster().ControlKey(int16(kmsg.CreateTopics), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster().KeepControl()
		if !held.Swap(true) {
			time.Sleep(300 * time.Millisecond)
		}
		created.Store(true) // the broker creates them right after this returns
		return nil, nil, false
	})
	prefix := testenv.Name(t, "ready") + "."
	c := worker.DefaultConfig()
	c.Brokers, c.MongoURI, c.MongoDB, c.TopicPrefix, c.Partitions, c.Addr = []string{k.Addr()}, testenv.MongoURI(t), testenv.Name(t, "ready"), prefix, 2, ""
	c.StreamPartitions = 3 // the stream topic's own count (TURNPIKE_STREAM_PARTITIONS)
	ready := make(chan bool, 1)
	w, err := worker.New(c, worker.WithReady(func() { ready <- created.Load() }), worker.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	select {
	case ok := <-ready:
		if !ok {
			t.Error("the worker reported ready before the broker had created its topics")
		}
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-ctx.Done():
		t.Fatal("the worker never reported ready")
	}
	for _, tp := range []struct {
		name string
		want int
	}{{"requests", 2}, {"requests.dlq", 2}, {"control", 2}, {"stream", 3}} {
		if ids, err := topic.Partitions(ctx, []string{k.Addr()}, prefix+tp.name); err != nil || len(ids) != tp.want {
			t.Errorf("the %s topic after ready: partitions %v, err %v; want %d", tp.name, ids, err, tp.want)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// Run listens first (docs/style.md: a long-running part owns and waits
// for every goroutine it starts): with Config.Addr or Config.PprofAddr
// taken, it returns the listen error, and nothing of the worker ran or is
// left running when it returns. Every goroutine Run starts, and every one
// those start, carries the pprof label of the goroutine that called it;
// none may be left. (Before the fix, the consumer was started before the
// ops listener, and left consuming, with its store and tracer closed
// under it, when the listen failed.)
func TestATakenAddressStopsRunBeforeAnyPartStarts(t *testing.T) {
	t.Parallel()
	brokers := testenv.Kafka(t)
	for _, tt := range []struct {
		name string
		set  func(c *worker.Config, taken string)
	}{
		{"A taken ops address stops Run.", func(c *worker.Config, taken string) { c.Addr = taken }},
		{"A taken pprof address stops Run.", func(c *worker.Config, taken string) { c.Addr, c.PprofAddr = "127.0.0.1:0", taken }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 30*time.Second)
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer taken.Close()
			c := worker.DefaultConfig()
			c.Brokers, c.TopicPrefix, c.Partitions = brokers, testenv.Name(t, "taken")+".", 2
			tt.set(&c, taken.Addr().String())
			var built, readied atomic.Int32
			w, err := worker.New(c, worker.WithStore(history.NewMemoryStore()), worker.WithLogger(slog.New(slog.DiscardHandler)),
				worker.WithReady(func() { readied.Add(1) }),
				worker.WithAgentFactory(func(context.Context, worker.Request) (adk.Agent, error) {
					built.Add(1)
					return nil, errors.New("no agent")
				}))
			if err != nil {
				t.Fatal(err)
			}
			label := testenv.Name(t, "run")
			var runErr error
			pprof.Do(ctx, pprof.Labels("turnpike-test", label), func(ctx context.Context) { runErr = w.Run(ctx) })
			if runErr == nil || !strings.Contains(runErr.Error(), "address already in use") {
				t.Fatalf("Run = %v, want the listen error", runErr)
			}
			if left := labelled(t, label); left != "" {
				t.Fatalf("goroutines of Run outlive it:\n%s", left)
			}
			if built.Load() != 0 || readied.Load() != 0 {
				t.Errorf("the agent factory ran %d times and the worker was ready %d times; want neither", built.Load(), readied.Load())
			}
		})
	}
}

// labelled returns the stacks of the goroutines carrying the pprof label
// turnpike-test=label.
func labelled(t *testing.T, label string) string {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rec := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(rec, `"turnpike-test":"`+label+`"`) {
			out = append(out, rec)
		}
	}
	return strings.Join(out, "\n\n")
}
