package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

func resumeRequest(id events.Identity, requestID, resumeOf, answer string) []byte {
	b, _ := events.EncodeRequest(events.Request{V: 1, RequestID: requestID, Tenant: id.Tenant, User: id.User, Conversation: id.Conversation,
		Content: answer, ResumeOf: resumeOf, CreatedAt: time.Now().UTC()})
	return b
}

func TestAnAskUserInterruptIsResumedThroughTheRequestsTopic(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store := history.NewMemoryStore()
	s := newStack(t, store)
	m := &scripted{reply: func(in []*schema.Message) *schema.Message {
		if last := lastOf(in); last.Role == schema.Tool && last.ToolName == worker.ToolAskUser {
			return schema.AssistantMessage("The weather in "+last.Content+" is sunny.", nil)
		}
		return call(worker.ToolAskUser, `{"question":"Which city?"}`)
	}}
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "ask"}
	s.produce(t, ctx, id.Key(), request(id, "req-1", "what is the weather?"))
	s.produce(t, ctx, id.Key(), resumeRequest(id, "req-2", "req-1", "Paris"))
	s.produce(t, ctx, id.Key(), resumeRequest(id, "req-3", "req-1", "Rome")) // a second answer: nothing left to resume
	reg := prometheus.NewRegistry()
	s.start(t, ctx, worker.Deps{Model: m, ModelName: "scripted", Registerer: reg,
		Agent: agentConfig(t, `{"agent":{"name":"assistant","tools":["ask_user"]}}`)})
	got := s.stream(t).untilCompleted(t, ctx, 3)

	first := got["req-1"]
	if c := completedOf(t, first); c.Status != events.StatusInterrupted || c.Usage == nil || c.Usage.TotalTokens != 12 {
		t.Fatalf("req-1 completed %+v, want interrupted with the model's usage", c)
	}
	asked, ok := first[len(first)-2].(*events.RunInterruptedEvent)
	if !ok || asked.Interrupt != (events.Interrupt{Agent: "assistant", Tool: worker.ToolAskUser, Question: "Which city?"}) {
		t.Fatalf("req-1 events %v: want run.interrupted asking which city before run.completed", first)
	}
	if txt, st := text(got["req-2"]); txt != "The weather in Paris is sunny." || st != events.StatusComplete {
		t.Fatalf("req-2 (the resume) streamed %q %s", txt, st)
	}
	third := got["req-3"]
	if c := completedOf(t, third); c.Status != events.StatusRejected || len(third) != 2 || third[0].Type() != events.TypeNotice {
		t.Fatalf("req-3 events %v: want a notice and run.completed rejected", third)
	}
	msgs, err := store.Window(ctx, id, 10)
	if err != nil || len(msgs) != 4 {
		t.Fatalf("history %+v %v: want two turns", msgs, err)
	}
	if m := msgs[1]; m.Status != events.StatusInterrupted || m.Interrupt == nil || m.Interrupt.Question != "Which city?" || m.Usage == nil {
		t.Fatalf("interrupted answer %+v", m)
	}
	if msgs[2].Content != "Paris" || msgs[2].RequestID != "req-2" || msgs[3].Content != "The weather in Paris is sunny." || msgs[3].Status != events.StatusComplete {
		t.Fatalf("resumed turn %+v %+v", msgs[2], msgs[3])
	}
	if msgs[3].Usage == nil || msgs[3].Usage.TotalTokens != 12 {
		t.Fatalf("the resumed run's usage %+v, want its one model call", msgs[3].Usage)
	}
	// Two model calls (the question, the answer after the resume), 10+2 each.
	waitCounter(t, ctx, reg, 20, "turnpike_worker_model_tokens_total", "model", "scripted", "kind", "prompt")
	waitCounter(t, ctx, reg, 1, "turnpike_worker_interrupts_total")
	waitCounter(t, ctx, reg, 1, "turnpike_worker_resumes_total", "result", "resumed")
	waitCounter(t, ctx, reg, 1, "turnpike_worker_resumes_total", "result", "rejected")
}

func TestAMessageAfterAnInterruptLeavesItUnresumable(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store := history.NewMemoryStore()
	s := newStack(t, store)
	m := &scripted{reply: func(in []*schema.Message) *schema.Message {
		switch last := lastOf(in); {
		case last.Role == schema.User && strings.Contains(last.Content, "book"):
			return call(worker.ToolAskUser, `{"question":"Which day?"}`)
		case last.Role == schema.Tool:
			return schema.AssistantMessage("Booked for "+last.Content+".", nil)
		}
		// The window shows the question the assistant asked.
		return schema.AssistantMessage(fmt.Sprintf("Seen %d messages, the last assistant one %q.", len(in), in[len(in)-2].Content), nil)
	}}
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "ignored"}
	s.produce(t, ctx, id.Key(), request(id, "req-1", "book a table"))
	s.produce(t, ctx, id.Key(), request(id, "req-2", "never mind"))
	s.produce(t, ctx, id.Key(), resumeRequest(id, "req-3", "req-1", "Friday"))
	s.start(t, ctx, worker.Deps{Model: m, Agent: agentConfig(t, `{"agent":{"name":"assistant","tools":["ask_user"]}}`)})
	got := s.stream(t).untilCompleted(t, ctx, 3)
	if txt, _ := text(got["req-2"]); txt != `Seen 3 messages, the last assistant one "Which day?".` {
		t.Fatalf("req-2 streamed %q", txt)
	}
	if c := completedOf(t, got["req-3"]); c.Status != events.StatusRejected {
		t.Fatalf("a resume after another message completed %s, want rejected", c.Status)
	}
}

func TestBuiltInToolsAndASupervisorWithSubAgents(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store := history.NewMemoryStore()
	s := newStack(t, store)
	clock := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	supervisor := &scripted{reply: func(in []*schema.Message) *schema.Message {
		for _, msg := range in {
			if strings.Contains(msg.Content, "[researcher] said:") {
				return schema.AssistantMessage("Final answer, checked by the researcher.", nil)
			}
		}
		return call("transfer_to_agent", `{"agent_name":"researcher"}`)
	}}
	researcher := &scripted{reply: func(in []*schema.Message) *schema.Message {
		if last := lastOf(in); last.Role == schema.Tool && last.ToolName == worker.ToolCurrentTime {
			return schema.AssistantMessage("It is "+last.Content, nil)
		}
		return call(worker.ToolCurrentTime, `{"timezone":"Europe/Paris"}`)
	}}
	cfg := agentConfig(t, `{
		"models": {"research": {"provider": "openai", "model": "research-model"}},
		"agent": {"name": "supervisor", "instruction": "Delegate.",
			"sub_agents": [{"name": "researcher", "description": "Looks things up.", "model": "research", "tools": ["current_time"]}]}
	}`)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "team"}
	s.produce(t, ctx, id.Key(), request(id, "req-1", "what time is it in Paris?"))
	reg := prometheus.NewRegistry()
	s.start(t, ctx, worker.Deps{Model: supervisor, ModelName: "supervisor-model", Agent: cfg, Registerer: reg,
		Models: map[string]model.ToolCallingChatModel{"research": researcher}, Now: func() time.Time { return clock }})
	evs := s.stream(t).untilCompleted(t, ctx, 1)["req-1"]
	// By default every agent's text is streamed, each token with its agent.
	var trail []string
	for _, e := range evs {
		switch e := e.(type) {
		case *events.AgentTransferEvent:
			trail = append(trail, e.From+"->"+e.To)
		case *events.TokenEvent:
			if len(trail) == 0 || trail[len(trail)-1] != e.Agent+":" {
				trail = append(trail, e.Agent+":")
			}
		}
	}
	if got := strings.Join(trail, " "); got != "supervisor->researcher researcher: researcher->supervisor supervisor:" {
		t.Fatalf("transfers and token agents %q", got)
	}
	const researcherSaid = "It is 2026-11-30T13:00:00+01:00"
	if txt, st := text(evs); txt != researcherSaid+"Final answer, checked by the researcher." || st != events.StatusComplete {
		t.Fatalf("streamed %q %s", txt, st)
	}
	// The researcher saw the time in Paris (12:00 UTC is 13:00 CET) from the tool.
	var sawTime bool
	for _, in := range researcher.seen() {
		if l := lastOf(in); l.Role == schema.Tool && l.Content == "2026-11-30T13:00:00+01:00" {
			sawTime = true
		}
	}
	if !sawTime {
		t.Fatal("the researcher never got current_time's result for Europe/Paris")
	}
	// Two supervisor calls and two researcher calls, 12 tokens each.
	if c := completedOf(t, evs); c.Usage == nil || c.Usage.TotalTokens != 48 {
		t.Fatalf("run usage %+v, want 48 tokens over four model calls", c.Usage)
	}
	waitCounter(t, ctx, reg, 4, "turnpike_worker_model_tokens_total", "model", "research-model", "kind", "completion")
	waitCounter(t, ctx, reg, 24, "turnpike_worker_model_tokens_total", "model", "supervisor-model") // prompt and completion of two calls
	waitCounter(t, ctx, reg, 2, "turnpike_worker_agent_transfers_total")
	// By default both agents' text is persisted, each as its own message.
	page, err := store.List(ctx, id, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range page.Messages {
		got = append(got, fmt.Sprintf("%d %s %s: %s", m.Seq, m.Role, m.Agent, m.Content))
	}
	want := []string{"1 user : what time is it in Paris?", "2 assistant researcher: " + researcherSaid,
		"3 assistant supervisor: Final answer, checked by the researcher."}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("history %q, want %q", got, want)
	}
	if m := page.Messages; m[1].Usage != nil || m[2].Usage == nil || m[2].Usage.TotalTokens != 48 || m[1].Status != events.StatusComplete {
		t.Errorf("usage %+v then %+v, status %s: want the run's usage on the last message only, the status on both", m[1].Usage, m[2].Usage, m[1].Status)
	}
}

func TestCompactionCondensesOldTurnsIntoASummary(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store := history.NewMemoryStore()
	s := newStack(t, store)
	s.cfg.CompactTokens, s.cfg.CompactKeep = 60, 2
	main := &scripted{reply: func(in []*schema.Message) *schema.Message {
		users := 0
		for _, m := range in {
			if m.Role == schema.User {
				users++
			}
		}
		return schema.AssistantMessage(fmt.Sprintf("reply %d with %d user messages: %s", len(in), users, lastOf(in).Content), nil)
	}}
	var summaries int
	var mu sync.Mutex
	// The summarizer reports other numbers than the model (10 and 2 a
	// call), so that its tokens cannot pass for the model's.
	summarizer := &scripted{usage: &schema.TokenUsage{PromptTokens: 100, CompletionTokens: 7, TotalTokens: 107}, reply: func(in []*schema.Message) *schema.Message {
		mu.Lock()
		defer mu.Unlock()
		summaries++
		return schema.AssistantMessage(fmt.Sprintf("summary %d of %d bytes", summaries, len(lastOf(in).Content)), nil)
	}}
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "long"}
	filler := strings.Repeat("x", 80) // 20 tokens: one turn of it fits the budget, three do not
	for i := 1; i <= 4; i++ {
		s.produce(t, ctx, id.Key(), request(id, fmt.Sprintf("req-%d", i), fmt.Sprintf("message %d %s", i, filler)))
	}
	reg := prometheus.NewRegistry()
	s.start(t, ctx, worker.Deps{Model: main, ModelName: "main-model", Summarizer: summarizer, Registerer: reg})
	got := s.stream(t).untilCompleted(t, ctx, 4)

	// README "Token usage": a run's usage is its model calls' (one here),
	// the summarizer excluded, on run.completed and in history; the token
	// counter counts every model, summaries included.
	for i := 1; i <= 4; i++ {
		if c := completedOf(t, got[fmt.Sprintf("req-%d", i)]); c.Usage == nil || *c.Usage != (events.Usage{PromptTokens: 10, CompletionTokens: 2, TotalTokens: 12}) {
			t.Errorf("req-%d completed with usage %+v, want the model's one call alone", i, c.Usage)
		}
	}
	mu.Lock()
	summarized := float64(summaries)
	mu.Unlock()
	for _, c := range []struct {
		model, kind string
		want        float64
	}{
		{"main-model", "prompt", 4 * 10}, {"main-model", "completion", 4 * 2},
		{"summarizer", "prompt", summarized * 100}, {"summarizer", "completion", summarized * 7},
	} {
		// The summaries are counted before their runs start, the runs'
		// tokens right after their run.completed.
		waitCounter(t, ctx, reg, c.want, "turnpike_worker_model_tokens_total", "model", c.model, "kind", c.kind)
	}
	if n := counterValue(t, reg, "turnpike_worker_compactions_total", "result", "summarized"); n != summarized {
		t.Errorf("%v compactions counted summarized, want %v", n, summarized)
	}

	sum, found, err := store.Summary(ctx, id)
	if err != nil || !found || sum.Through%2 != 0 || sum.Through < 2 || !strings.HasPrefix(sum.Text, "summary ") {
		t.Fatalf("summary %+v %v %v", sum, found, err)
	}
	// Messages are never deleted.
	page, err := store.List(ctx, id, 0, 50)
	if err != nil || len(page.Messages) != 8 {
		t.Fatalf("history %d messages, %v: want all 8", len(page.Messages), err)
	}
	for _, m := range page.Messages {
		if m.Role == history.RoleAssistant && (m.Usage == nil || m.Usage.TotalTokens != 12) {
			t.Errorf("answer %d stored with usage %+v, want the model's 12 tokens alone", m.Seq, m.Usage)
		}
	}
	// The last run saw the summary as a system message first, then only
	// messages after it.
	inputs := main.seen()
	last := inputs[len(inputs)-1]
	if last[0].Role != schema.System || !strings.HasPrefix(last[0].Content, "Summary of the earlier conversation:\nsummary ") {
		t.Fatalf("the last window starts with %s %q, want the summary", last[0].Role, last[0].Content)
	}
	for _, m := range last[1:] {
		if strings.Contains(m.Content, "message 1 ") {
			t.Fatalf("the last window still holds the condensed first message: %q", m.Content)
		}
	}
	if lastOf(last).Content != "message 4 "+filler {
		t.Fatalf("the last window ends with %q", lastOf(last).Content)
	}
	// The summary is a system message: the user messages the model gets
	// (the echo model's K) are the kept turn's and the new one.
	users := 0
	for _, m := range last {
		if m.Role == schema.User {
			users++
		}
	}
	if users != 2 || len(last) != 4 {
		t.Fatalf("the last window holds %d messages, %d from the user: want the summary, turn 3 and the new message", len(last), users)
	}
	if summaries == 0 {
		t.Fatal("the summarizer was never called")
	}
}

// failingSummarizer is a summarizer whose every call fails.
type failingSummarizer struct{ calls atomic.Int32 }

func (f *failingSummarizer) Generate(context.Context, []*schema.Message, ...model.Option) (*schema.Message, error) {
	f.calls.Add(1)
	return nil, errors.New("summarizer unreachable")
}

func (f *failingSummarizer) Stream(context.Context, []*schema.Message, ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	return nil, errors.New("the summarizer is only asked to generate")
}

// A summarizer failure keeps the plain window (logged, counted) and never
// fails the run (README "Context compaction"): every request completes
// with the model seeing every stored message, nothing is summarized, and
// each failure is a warning naming the conversation and one count of
// compactions_total{result="failed"}.
func TestASummarizerFailureKeepsThePlainWindowAndNeverFailsTheRun(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store := history.NewMemoryStore()
	s := newStack(t, store)
	s.cfg.CompactTokens, s.cfg.CompactKeep = 60, 2
	main := &scripted{reply: func(in []*schema.Message) *schema.Message {
		return schema.AssistantMessage(fmt.Sprintf("reply to %d messages", len(in)), nil)
	}}
	summarizer := &failingSummarizer{}
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "unsummarized"}
	filler := strings.Repeat("x", 80) // 20 tokens: over the budget from the second turn on
	for i := 1; i <= 4; i++ {
		s.produce(t, ctx, id.Key(), request(id, fmt.Sprintf("req-%d", i), fmt.Sprintf("message %d %s", i, filler)))
	}
	reg := prometheus.NewRegistry()
	logs := &lockedBuffer{}
	s.start(t, ctx, worker.Deps{Model: main, Summarizer: summarizer, Registerer: reg, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	got := s.stream(t).untilCompleted(t, ctx, 4)

	for i := 1; i <= 4; i++ {
		// Each run's window: the 2(i-1) stored messages and the new one.
		want := fmt.Sprintf("reply to %d messages", 2*i-1)
		if txt, st := text(got[fmt.Sprintf("req-%d", i)]); txt != want || st != events.StatusComplete {
			t.Errorf("req-%d streamed %q %s, want %q complete", i, txt, st, want)
		}
	}
	for _, in := range main.seen() {
		if in[0].Role == schema.System {
			t.Fatalf("a window starts with the system message %q, want the plain window", in[0].Content)
		}
	}
	if _, found, err := store.Summary(ctx, id); err != nil || found {
		t.Errorf("a summary was saved (%v, %v)", found, err)
	}
	// The second run has one turn stored: nothing old enough to condense
	// (kept). The third and fourth ask the summarizer, which fails.
	if n := summarizer.calls.Load(); n != 2 {
		t.Errorf("the summarizer was asked %d times, want 2", n)
	}
	for result, want := range map[string]float64{"failed": 2, "kept": 1, "summarized": 0} {
		if n := counterValue(t, reg, "turnpike_worker_compactions_total", "result", result); n != want {
			t.Errorf("compactions_total{result=%q} = %v, want %v", result, n, want)
		}
	}
	var warned int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if rec["msg"] == "compaction: summarizer failed; the window is kept as it is" {
			warned++
			if rec["level"] != "WARN" || rec["conversation"] != id.Conversation || rec["error"] != "summarizer unreachable" {
				t.Errorf("summarizer failure logged as %v", rec)
			}
		}
	}
	if warned != 2 {
		t.Errorf("%d summarizer failures logged, want 2", warned)
	}
}

func TestASubAgentsInterruptIsResumedThroughTheSupervisor(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store := history.NewMemoryStore()
	s := newStack(t, store)
	supervisor := &scripted{reply: func(in []*schema.Message) *schema.Message {
		for _, msg := range in {
			if strings.Contains(msg.Content, "[booker] said:") {
				return schema.AssistantMessage("All set.", nil)
			}
		}
		return call("transfer_to_agent", `{"agent_name":"booker"}`)
	}}
	booker := &scripted{reply: func(in []*schema.Message) *schema.Message {
		if last := lastOf(in); last.Role == schema.Tool && last.ToolName == worker.ToolAskUser {
			return schema.AssistantMessage("Booked for "+last.Content+".", nil)
		}
		return call(worker.ToolAskUser, `{"question":"Which day?"}`)
	}}
	cfg := agentConfig(t, `{"models":{"b":{"provider":"echo"}},
		"agent":{"name":"concierge","sub_agents":[{"name":"booker","description":"Books.","model":"b","tools":["ask_user"]}]},
		"stream":["*"],"persist":["concierge"]}`)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "team-ask"}
	s.produce(t, ctx, id.Key(), request(id, "req-1", "book a table"))
	s.produce(t, ctx, id.Key(), resumeRequest(id, "req-2", "req-1", "Friday"))
	s.start(t, ctx, worker.Deps{Model: supervisor, Agent: cfg, Models: map[string]model.ToolCallingChatModel{"b": booker}})
	got := s.stream(t).untilCompleted(t, ctx, 2)
	first := got["req-1"]
	if c := completedOf(t, first); c.Status != events.StatusInterrupted {
		t.Fatalf("req-1 completed %s, want interrupted", c.Status)
	}
	if asked, ok := first[len(first)-2].(*events.RunInterruptedEvent); !ok || asked.Interrupt.Agent != "booker" || asked.Interrupt.Question != "Which day?" {
		t.Fatalf("req-1 events %v: want the booker's question", first)
	}
	second := got["req-2"]
	// Each agent's text, whichever way its deltas happen to coalesce.
	streamed := map[string]string{}
	var order []string
	for _, e := range second {
		if tok, ok := e.(*events.TokenEvent); ok {
			if len(order) == 0 || order[len(order)-1] != tok.Agent {
				order = append(order, tok.Agent)
			}
			streamed[tok.Agent] += tok.Delta
		}
	}
	if c := completedOf(t, second); c.Status != events.StatusComplete || streamed["booker"] != "Booked for Friday." ||
		streamed["concierge"] != "All set." || strings.Join(order, ",") != "booker,concierge" {
		t.Fatalf("req-2 completed %s streaming %q in the order %v: want the booker's confirmation, then the concierge's answer", c.Status, streamed, order)
	}
	msgs, err := store.Window(ctx, id, 2)
	if err != nil || len(msgs) != 2 || msgs[1].Content != "All set." || msgs[1].Agent != "concierge" {
		t.Fatalf("history %+v %v: want the concierge's answer persisted alone", msgs, err)
	}
}

// A sub-agent of an agent file marked sticky keeps the conversation: the
// desk transfers a question to "orders" in turn 1, and turn 2 runs from
// orders (run.started names it; the desk's model is not called). Without
// sticky, orders hands the conversation back and turn 2 runs from the
// desk.
func TestAStickySubAgentOfAnAgentFileAnswersTheNextTurn(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		sticky    bool
		wantAgent string // run.started's agent of turn 2
	}{
		{"A sticky sub-agent answers turn 2 without the desk.", true, "orders"},
		{"A sub-agent that is not sticky hands back: turn 2 starts at the desk.", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 60*time.Second)
			store := history.NewMemoryStore()
			s := newStack(t, store)
			desk := &scripted{reply: func(in []*schema.Message) *schema.Message {
				for _, m := range in {
					if strings.Contains(m.Content, "[orders] said:") {
						return schema.AssistantMessage("desk done", nil)
					}
				}
				if strings.Contains(lastOf(in).Content, "order") {
					return call(adk.TransferToAgentToolName, `{"agent_name":"orders"}`)
				}
				return schema.AssistantMessage("desk here", nil)
			}}
			orders := &scripted{reply: func([]*schema.Message) *schema.Message { return schema.AssistantMessage("orders here", nil) }}
			cfg := agentConfig(t, fmt.Sprintf(`{
				"models": {"orders": {"provider": "openai", "model": "orders-model"}},
				"agent": {"name": "desk", "instruction": "Route.",
					"sub_agents": [{"name": "orders", "description": "Knows orders.", "model": "orders", "sticky": %t}]}
			}`, tt.sticky))
			id := events.Identity{Tenant: "acme", User: "ann", Conversation: testenv.Name(t, "sticky")}
			s.produce(t, ctx, id.Key(), request(id, "req-1", "where is my order?"))
			s.produce(t, ctx, id.Key(), request(id, "req-2", "and the invoice?"))
			s.start(t, ctx, worker.Deps{Model: desk, ModelName: "desk-model", Agent: cfg,
				Models: map[string]model.ToolCallingChatModel{"orders": orders}})
			got := s.stream(t).untilCompleted(t, ctx, 2)
			if txt, st := text(got["req-1"]); !strings.HasPrefix(txt, "orders here") || st != events.StatusComplete {
				t.Fatalf("turn 1 streamed %q %s, want orders' answer first", txt, st)
			}
			var started *events.RunStartedEvent
			for _, e := range got["req-2"] {
				if e, ok := e.(*events.RunStartedEvent); ok {
					started = e
				}
			}
			if started == nil || started.Agent != tt.wantAgent {
				t.Fatalf("turn 2's run.started %+v, want agent %q", started, tt.wantAgent)
			}
			n := 0 // the desk's calls in turn 2
			for _, in := range desk.seen() {
				if slices.ContainsFunc(in, func(m *schema.Message) bool { return strings.Contains(m.Content, "invoice") }) {
					n++
				}
			}
			if tt.sticky && n != 0 {
				t.Errorf("the desk's model was called %d times in turn 2, want none", n)
			} else if !tt.sticky && n == 0 {
				t.Error("the desk's model was not called in turn 2")
			}
			if txt, _ := text(got["req-2"]); tt.sticky && txt != "orders here" {
				t.Errorf("turn 2 streamed %q, want orders' answer", txt)
			}
		})
	}
}
