package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/schema"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/turnpiketest"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// gate is one request's run of a gateModel: started when its first token
// is streamed, stopped when its context ended, release to let it finish.
type gate struct{ started, stopped, release chan struct{} }

// gates hands out the gate of each request id, to the model and the test
// alike, whichever asks first.
type gates struct{ m sync.Map }

func (g *gates) of(requestID string) *gate {
	v, _ := g.m.LoadOrStore(requestID, &gate{started: make(chan struct{}), stopped: make(chan struct{}), release: make(chan struct{})})
	return v.(*gate)
}

// gateModel answers "hold" with "partial " and then waits: for its gate's
// release ("done"), or for its context to end (a cancel, an interrupt).
// Any other message it answers at once with "ok: <message>".
type gateModel struct{ g *gates }

func (m gateModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return m, nil }

func (m gateModel) Generate(context.Context, []*schema.Message, ...model.Option) (*schema.Message, error) {
	return nil, errors.New("stream only")
}

func (m gateModel) Stream(ctx context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	last := in[len(in)-1].Content
	if last != "hold" {
		return schema.StreamReaderFromArray([]*schema.Message{schema.AssistantMessage("ok: "+last, nil)}), nil
	}
	r, ok := worker.RequestFromContext(ctx)
	if !ok {
		return nil, errors.New("no request in the model's context")
	}
	g := m.g.of(r.RequestID)
	sr, sw := schema.Pipe[*schema.Message](1)
	go func() {
		defer sw.Close()
		sw.Send(schema.AssistantMessage("partial ", nil), nil)
		close(g.started)
		select {
		case <-ctx.Done():
			close(g.stopped)
			sw.Send(nil, ctx.Err())
		case <-g.release:
			sw.Send(schema.AssistantMessage("done", nil), nil)
		}
	}()
	return sr, nil
}

// startGated starts a stack whose Go agent runs a gateModel; built counts
// the factory's calls by request id.
func startGated(t *testing.T, g *gates, built *sync.Map) *turnpiketest.Stack {
	return turnpiketest.Start(t, worker.WithAgentFactory(func(ctx context.Context, r worker.Request) (adk.Agent, error) {
		countBuild(built, r.RequestID)
		return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "gated", Description: "waits", Model: gateModel{g}})
	}))
}

// sendWith posts content to conversation with strategy and returns its
// request id.
func sendWith(t *testing.T, c *turnpiketest.Client, conversation, content, strategy string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), turnpiketest.Timeout)
	defer cancel()
	a, err := c.API.Send(ctx, conversation, content, client.SendOptions{Strategy: strategy})
	if err != nil {
		t.Fatal(err)
	}
	return a.RequestID
}

// countBuild counts one of the factory's calls for id.
func countBuild(built *sync.Map, id string) {
	n, _ := built.LoadOrStore(id, new(atomic.Int32))
	n.(*atomic.Int32).Add(1)
}

// ranAgent reports how many times the factory built an agent for id.
func ranAgent(built *sync.Map, id string) int32 {
	if n, ok := built.Load(id); ok {
		return n.(*atomic.Int32).Load()
	}
	return 0
}

// neverStarted checks that a run completed with status without a run of
// its own: no run.started, no token, and the agent never built for it.
func neverStarted(t *testing.T, built *sync.Map, r turnpiketest.Run, status events.Status) {
	t.Helper()
	for _, e := range r.Events {
		if e.Type() == events.TypeRunStarted || e.Type() == events.TypeToken {
			t.Errorf("%v: want %s without running", r, status)
			break
		}
	}
	if r.Status != status || ranAgent(built, r.RequestID) != 0 {
		t.Errorf("%v, the agent built %d times for it: want %s, never built", r, ranAgent(built, r.RequestID), status)
	}
}

// The send strategies apply to a Go agent's conversation: reject
// completes a request sent while another runs without running it (and
// runs one sent when nothing runs), its run.completed in the request's
// trace; interrupt stops the running request's
// model, cancels the one queued behind it, then runs; and a cancel stops
// the running request's model.
func TestSendStrategiesOfACustomAgent(t *testing.T) {
	g := &gates{}
	var built sync.Map
	stack := startGated(t, g, &built)
	c := stack.Client("ivan")

	// The first request of each case holds its run until the test lets it
	// go: a strategy that is not applied leaves the next request queued
	// behind it, and the test fails when Follower.Run times out.
	t.Run("reject", func(t *testing.T) {
		f := c.Follow("r")
		first := c.Send("r", "hold")
		wait(t, g.of(first).started, "the first run to start")
		// The rejected request comes with a trace, which its run.completed
		// continues.
		traced := stack.Client("ivan")
		traced.API.HTTP = &http.Client{Transport: traceHeader("00-" + testTraceID + "-00f067aa0ba902b7-01"), Timeout: 30 * time.Second}
		rejected := sendWith(t, traced, "r", "not now", "reject")
		neverStarted(t, &built, f.Run(rejected), events.StatusRejected)
		readTopic(t, stack.Brokers, stack.StreamTopic, func(m kafka.Message) bool {
			e, err := events.DecodeEvent(m.Value)
			if err != nil || e.Header().RequestID != rejected {
				return true
			}
			if tp := headers(m)["traceparent"]; !strings.HasPrefix(tp, "00-"+testTraceID+"-") {
				t.Errorf("the rejected request's %s with traceparent %q, not of its trace", e.Type(), tp)
			}
			return e.Type() != events.TypeRunCompleted
		})
		close(g.of(first).release)
		if r := f.Run(first); r.Status != events.StatusComplete || r.Text != "partial done" {
			t.Errorf("the running request: %v", r)
		}
		if r := f.Run(sendWith(t, c, "r", "now", "reject")); r.Status != events.StatusComplete || r.Text != "ok: now" {
			t.Errorf("reject with nothing running: %v", r)
		}
		if h := c.History("r"); len(h) != 4 || h[1].Content != "partial done" || h[2].Content != "now" {
			t.Errorf("history %+v: want the two turns that ran", h)
		}
	})

	t.Run("interrupt", func(t *testing.T) {
		f := c.Follow("i")
		first := c.Send("i", "hold")
		wait(t, g.of(first).started, "the first run to start")
		queued := c.Send("i", "queued")
		instead := sendWith(t, c, "i", "instead", "interrupt")
		r := f.Run(first)
		wait(t, g.of(first).stopped, "the interrupted model's context to end")
		if r.Status != events.StatusCancelled || r.Text != "partial " {
			t.Errorf("the interrupted request: %v", r)
		}
		neverStarted(t, &built, f.Run(queued), events.StatusCancelled)
		if r := f.Run(instead); r.Status != events.StatusComplete || r.Text != "ok: instead" {
			t.Errorf("the interrupting request: %v", r)
		}
		h := c.History("i")
		if len(h) != 4 || h[1].Content != "partial " || h[1].Status != string(events.StatusCancelled) || h[3].Content != "ok: instead" {
			t.Errorf("history %+v: want the cancelled turn and the interrupting one", h)
		}
	})

	// A cancel stops a Go agent's model (its context ends) and persists
	// the partial answer as cancelled.
	t.Run("cancel", func(t *testing.T) {
		f := c.Follow("c")
		id := c.Send("c", "hold")
		wait(t, g.of(id).started, "the model to start")
		c.Cancel("c", id)
		r := f.Run(id)
		wait(t, g.of(id).stopped, "the model's context to end")
		if r.Status != events.StatusCancelled || r.Text != "partial " {
			t.Errorf("%v, want cancelled after %q", r, "partial ")
		}
		if h := c.History("c"); len(h) != 2 || h[1].Content != "partial " || h[1].Status != string(events.StatusCancelled) {
			t.Errorf("history %+v", h)
		}
	})
}

// readTopic reads topic from its start, handing each record to keep until
// it returns false.
func readTopic(t *testing.T, brokers []string, topic string, keep func(kafka.Message) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), turnpiketest.Timeout)
	defer cancel()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: "test-" + topic, Topic: topic,
		StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("reading %s: %v", topic, err)
		}
		if !keep(m) {
			return
		}
	}
}

func headers(m kafka.Message) map[string]string {
	h := map[string]string{}
	for _, x := range m.Headers {
		h[x.Key] = string(x.Value)
	}
	return h
}

// A Go agent's request that cannot succeed is dead-lettered and completes
// failed: its record, byte for byte, goes to the DLQ topic with the
// reason, the attempts and where it came from, at once for the factory's
// Permanent error, after Config.MaxAttempts runs for any other factory
// error and for a model error the caller's classifier calls transient.
// The factory's context carries the request, and the conversation goes on.
func TestDeadLettersOfACustomAgent(t *testing.T) {
	var modelCalls atomic.Int32
	flaky := lookupModel{fail: func() error { modelCalls.Add(1); return errFlaky }}
	var built sync.Map
	cfg := turnpiketest.Config()
	cfg.MaxAttempts, cfg.RetryBackoffMin, cfg.RetryBackoffMax = 2, 1, 1
	stack := turnpiketest.StartConfig(t, cfg, worker.WithAgentFactory(func(ctx context.Context, r worker.Request) (adk.Agent, error) {
		countBuild(&built, r.RequestID)
		if c, _ := worker.RequestFromContext(ctx); c != r {
			return nil, fmt.Errorf("the factory's context carries %+v, not %+v", c, r)
		}
		m := lookupModel{}
		switch r.Conversation {
		case "bad":
			return nil, worker.Permanent(errors.New("no agent for this tenant"))
		case "unreachable":
			return nil, errors.New("tenant config unreachable")
		case "flaky":
			m = flaky
		}
		return newLookupAgent(ctx, m, lookupTool(t, &sync.Map{}))
	}), worker.WithTransientErrors(func(err error) bool { return errors.Is(err, errFlaky) }))
	c := stack.Client("judy")
	want := map[string]struct{ reason, attempts string }{}
	for conv, w := range map[string]struct{ reason, attempts string }{
		"bad":         {"build agent: no agent for this tenant", "1"},
		"unreachable": {"build agent: tenant config unreachable", "2"},
		"flaky":       {errFlaky.Error(), "2"},
	} {
		f := c.Follow(conv)
		id := c.Send(conv, "k")
		if r := f.Run(id); r.Status != events.StatusFailed {
			t.Errorf("%s: %v, want failed", conv, r)
		}
		if n := ranAgent(&built, id); strconv.Itoa(int(n)) != w.attempts {
			t.Errorf("%s: the agent was built %d times, want %s", conv, n, w.attempts)
		}
		want[id] = w
	}
	if n := modelCalls.Load(); n != 2 {
		t.Errorf("the flaky model was called %d times, want 2", n)
	}
	readTopic(t, stack.Brokers, stack.DLQTopic, func(m kafka.Message) bool {
		req, err := events.DecodeRequest(m.Value, 0)
		if err != nil {
			t.Fatalf("the DLQ record is not the request's: %v: %q", err, m.Value)
		}
		w, ok := want[req.RequestID]
		if !ok {
			t.Fatalf("dead-lettered %s, which should not be", req.RequestID)
		}
		delete(want, req.RequestID)
		h := headers(m)
		if string(m.Key) != req.Identity().Key() || !strings.Contains(h["turnpike-dlq-reason"], w.reason) || h["turnpike-dlq-attempts"] != w.attempts {
			t.Errorf("%s (%s): key %q, headers %v: want reason %q after %s attempts", req.RequestID, req.Conversation, m.Key, h, w.reason, w.attempts)
		}
		if _, err := strconv.ParseInt(h["turnpike-source-offset"], 10, 64); h["turnpike-source-topic"] != stack.RequestsTopic || h["turnpike-source-partition"] == "" || err != nil {
			t.Errorf("%s: source headers %v", req.RequestID, h)
		}
		return len(want) > 0
	})
	f := c.Follow("fine")
	if r := f.Run(c.Send("fine", "k")); r.Status != events.StatusComplete {
		t.Errorf("after the failures: %v", r)
	}
}

// testTraceID is the trace of the requests the tests send with one.
const testTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"

// traceHeader adds a traceparent to every request it carries.
type traceHeader string

func (tp traceHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("traceparent", string(tp))
	return http.DefaultTransport.RoundTrip(r)
}

// A request's trace reaches a Go agent: its factory, model and tools run
// in a context of the caller's trace, and every stream event of the
// request carries it in its traceparent header, the run.completed of a
// request dead-lettered (the factory's Permanent error) included.
func TestTraceOfACustomAgentsRun(t *testing.T) {
	const traceID = testTraceID
	var traced sync.Map // where the trace was seen: "factory", "tool"
	see := func(where string, ctx context.Context) {
		if sc := trace.SpanContextFromContext(ctx); sc.TraceID().String() == traceID {
			traced.Store(where, true)
		}
	}
	tl := tracedTool{lookupTool(t, &sync.Map{}), see}
	stack := turnpiketest.Start(t, worker.WithAgentFactory(func(ctx context.Context, r worker.Request) (adk.Agent, error) {
		see("factory", ctx)
		if r.Conversation == "bad" {
			return nil, worker.Permanent(errors.New("no agent for this tenant"))
		}
		return newLookupAgent(ctx, lookupModel{}, tl)
	}))
	c := stack.Client("kim")
	c.API.HTTP = &http.Client{Transport: traceHeader("00-" + traceID + "-00f067aa0ba902b7-01"), Timeout: 30 * time.Second}
	f := c.Follow("c")
	id := c.Send("c", "k")
	if r := f.Run(id); r.Status != events.StatusComplete || r.Text != "found: k for "+id {
		t.Fatalf("%v", r)
	}
	bad := c.Send("bad", "k")
	if r := c.Follow("bad").Run(bad); r.Status != events.StatusFailed {
		t.Fatalf("%v, want failed", r)
	}
	seen := map[string][]events.Type{}
	readTopic(t, stack.Brokers, stack.StreamTopic, func(m kafka.Message) bool {
		e, err := events.DecodeEvent(m.Value)
		if rid := e.Header().RequestID; err != nil || (rid != id && rid != bad) {
			return true
		}
		seen[e.Header().RequestID] = append(seen[e.Header().RequestID], e.Type())
		if tp := headers(m)["traceparent"]; !strings.HasPrefix(tp, "00-"+traceID+"-") {
			t.Errorf("%s event of %s with traceparent %q, not of the request's trace", e.Type(), e.Header().Conversation, tp)
		}
		return !slices.Contains(seen[id], events.TypeRunCompleted) || !slices.Contains(seen[bad], events.TypeRunCompleted)
	})
	if len(seen[id]) < 3 {
		t.Errorf("read only %v of the request's events", seen[id])
	}
	for _, where := range []string{"factory", "tool"} {
		if _, ok := traced.Load(where); !ok {
			t.Errorf("the %s's context is not of the request's trace", where)
		}
	}
}

// tracedTool reports the context each call of its tool runs in.
type tracedTool struct {
	tool.BaseTool
	see func(where string, ctx context.Context)
}

func (t tracedTool) InvokableRun(ctx context.Context, args string, opts ...tool.Option) (string, error) {
	t.see("tool", ctx)
	return t.BaseTool.(tool.InvokableTool).InvokableRun(ctx, args, opts...)
}
