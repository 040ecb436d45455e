package bridge_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// answerTurn is a fakeTurn that also takes usage and interrupts, as
// *history.Pending does.
type answerTurn struct {
	fakeTurn
	answers []history.Answer
}

func (t *answerTurn) CommitAnswer(ctx context.Context, a history.Answer) (history.Committed, error) {
	t.mu.Lock()
	t.answers = append(t.answers, a)
	t.mu.Unlock()
	return t.Commit(ctx, a.Text, a.Agent, a.Status, a.At)
}

func withUsage(m *schema.Message, prompt, completion int) *schema.Message {
	m.ResponseMeta = &schema.ResponseMeta{Usage: &schema.TokenUsage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}}
	return m
}

func transfer(to string) *adk.AgentAction { return adk.NewTransferToAgentAction(to) }

func askUser(agent, question string) *adk.AgentAction {
	return &adk.AgentAction{Interrupted: &adk.InterruptInfo{InterruptContexts: []*adk.InterruptCtx{
		{ID: "agent:" + agent, Address: adk.Address{{Type: adk.AddressSegmentAgent, ID: agent}}, Info: "composite"},
		{ID: "agent:" + agent + ";tool:ask_user:call-1", Address: adk.Address{{Type: adk.AddressSegmentAgent, ID: agent},
			{Type: adk.AddressSegmentTool, ID: "ask_user", SubID: "call-1"}}, Info: question, IsRootCause: true},
	}}}
}

func TestTransfersAreStreamedInOrderAndPredicatesPickTheSupervisor(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	sink := &recordingSink{}
	supervisor := bridge.AgentRole("supervisor", schema.Assistant)
	b := newBridge(t, sink, func(c *bridge.Config) { c.Stream, c.Persist = supervisor, supervisor })
	iter, done := script(ctx,
		step{agent: "supervisor", chunks: []*schema.Message{text("Asking the researcher. "), toolCall()}},
		step{agent: "supervisor", role: schema.Tool, whole: schema.ToolMessage("transferred", "call-1"), action: transfer("researcher")},
		step{agent: "researcher", chunks: []*schema.Message{text("raw notes"), withUsage(text(""), 7, 3)}},
		step{agent: "researcher", role: schema.Tool, whole: schema.ToolMessage("transferred", "call-2"), action: transfer("supervisor")},
		step{agent: "supervisor", chunks: []*schema.Message{text("Paris."), withUsage(text(""), 20, 2)}},
	)
	turn := &answerTurn{}
	res, err := b.Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range sink.snapshot() {
		switch e := e.(type) {
		case *events.TokenEvent:
			got = append(got, e.Agent+": "+e.Delta)
		case *events.AgentTransferEvent:
			got = append(got, e.From+" -> "+e.To)
		case *events.RunCompletedEvent:
			got = append(got, string(e.Status))
		}
	}
	want := []string{"supervisor: Asking the researcher. ", "supervisor -> researcher", "researcher -> supervisor", "supervisor: Paris.", "complete"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("stream %q, want %q", got, want)
	}
	summarize(t, sink.snapshot(), "run-1") // contiguous seqs, every event survives the wire
	if len(turn.answers) != 1 || turn.answers[0].Text != "Paris." || turn.answers[0].Agent != "supervisor" {
		t.Fatalf("persisted %+v, want the supervisor's answer only", turn.answers)
	}
	// The researcher's usage counts although its text was not selected.
	if u := turn.answers[0].Usage; u == nil || *u != (events.Usage{PromptTokens: 27, CompletionTokens: 5, TotalTokens: 32}) {
		t.Fatalf("persisted usage %+v, want 27/5/32", u)
	}
	if res.Transfers != 2 || res.UsageByAgent["researcher"].TotalTokens != 10 || res.UsageByAgent["supervisor"].TotalTokens != 22 {
		t.Fatalf("result transfers %d usage by agent %+v", res.Transfers, res.UsageByAgent)
	}
}

func TestUsageIsSummedOverModelCallsIncludingToolCalls(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	sink := &recordingSink{}
	iter, done := script(ctx,
		// A tool-call message reports its usage in a chunk after the call.
		step{agent: "a", chunks: []*schema.Message{toolCall(), withUsage(text(""), 10, 1)}},
		step{agent: "a", role: schema.Tool, whole: schema.ToolMessage("12:00", "call-1")},
		// A model reporting cumulative usage in several chunks counts once.
		step{agent: "a", chunks: []*schema.Message{withUsage(text("It is "), 11, 2), withUsage(text("noon"), 11, 3)}},
	)
	turn := &answerTurn{}
	res, err := newBridge(t, sink, nil).Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	want := events.Usage{PromptTokens: 21, CompletionTokens: 4, TotalTokens: 25}
	if res.Usage == nil || res.Usage.TotalTokens != 25 || turn.answers[0].Usage == nil || *turn.answers[0].Usage != want {
		t.Fatalf("usage %+v persisted %+v, want %+v", res.Usage, turn.answers[0].Usage, want)
	}
	evs := sink.snapshot()
	done2, ok := evs[len(evs)-1].(*events.RunCompletedEvent)
	if !ok || done2.Usage == nil || *done2.Usage != want {
		t.Fatalf("run.completed %+v, want usage %+v", evs[len(evs)-1], want)
	}
}

// Messages neither streamed nor persisted (another agent's, a tool
// result) count with the usage they report, streamed or whole; a message
// whose metadata reports no usage adds none.
func TestUsageOfMessagesLeftOutCounts(t *testing.T) {
	t.Parallel()
	noUsage := func(m *schema.Message) *schema.Message {
		m.ResponseMeta = &schema.ResponseMeta{FinishReason: "stop"}
		return m
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "A whole message of an agent not selected counts with its usage.", steps: []step{
			{agent: "researcher", whole: withUsage(text("raw notes"), 7, 3)},
			{agent: "researcher", whole: noUsage(text("more notes"))},
			{agent: "supervisor", whole: withUsage(text("Paris."), 20, 2)},
		}},
		{name: "A streamed message of an agent not selected counts with its usage.", steps: []step{
			{agent: "researcher", chunks: []*schema.Message{text("raw notes"), withUsage(text(""), 7, 3)}},
			{agent: "researcher", chunks: []*schema.Message{noUsage(text("more notes"))}},
			{agent: "supervisor", chunks: []*schema.Message{text("Paris."), withUsage(text(""), 20, 2)}},
		}},
		{name: "A tool result counts with its usage.", steps: []step{
			{agent: "researcher", role: schema.Tool, whole: withUsage(schema.ToolMessage("raw notes", "call-1"), 7, 3)},
			{agent: "researcher", role: schema.Tool, whole: noUsage(schema.ToolMessage("more notes", "call-2"))},
			{agent: "supervisor", whole: withUsage(text("Paris."), 20, 2)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			sink := &recordingSink{}
			supervisor := bridge.AgentRole("supervisor", schema.Assistant)
			b := newBridge(t, sink, func(c *bridge.Config) { c.Stream, c.Persist = supervisor, supervisor })
			iter, done := script(ctx, tt.steps...)
			turn := &answerTurn{}
			res, err := b.Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter)
			<-done
			if err != nil || res.Answer != "Paris." {
				t.Fatalf("got %+v, %v; want the supervisor's answer", res, err)
			}
			want := events.Usage{PromptTokens: 27, CompletionTokens: 5, TotalTokens: 32}
			if u := turn.answers[0].Usage; u == nil || *u != want {
				t.Fatalf("persisted usage %+v, want %+v", u, want)
			}
			if res.UsageByAgent["researcher"].TotalTokens != 10 || res.UsageByAgent["supervisor"].TotalTokens != 22 {
				t.Fatalf("usage by agent %+v, want researcher 10 and supervisor 22", res.UsageByAgent)
			}
		})
	}
}

func TestARunWithoutUsageCompletesWithoutUsage(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	sink := &recordingSink{}
	iter, done := script(ctx, step{agent: "a", chunks: []*schema.Message{text("hi")}})
	turn := &answerTurn{}
	if _, err := newBridge(t, sink, nil).Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter); err != nil {
		t.Fatal(err)
	}
	<-done
	evs := sink.snapshot()
	if c := evs[len(evs)-1].(*events.RunCompletedEvent); c.Usage != nil || turn.answers[0].Usage != nil {
		t.Fatalf("usage %+v / %+v without any reported", c.Usage, turn.answers[0].Usage)
	}
}

func TestAnInterruptPersistsThePartialAnswerWithTheQuestion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		steps      []step
		plain      bool // the turn has no CommitAnswer
		cancel     bool
		wantStatus events.Status
		wantText   string // persisted; "" with wantStatus discarded means nothing
		wantAgent  string // persisted with the text
		wantAsked  bool   // run.interrupted streamed and the interrupt persisted
	}{
		{
			name: "an interrupt after some text persists that text as interrupted with the question",
			steps: []step{
				{agent: "a", chunks: []*schema.Message{text("Let me check. ")}},
				{agent: "a", chunks: []*schema.Message{toolCall()}},
				{agent: "a", action: askUser("a", "Which city?")},
			},
			wantStatus: events.StatusInterrupted, wantText: "Let me check. ", wantAgent: "a", wantAsked: true,
		},
		{
			name:       "an interrupt before any text persists the question alone, by the agent that asked",
			steps:      []step{{agent: "a", chunks: []*schema.Message{toolCall()}}, {agent: "a", action: askUser("a", "Which city?")}},
			wantStatus: events.StatusInterrupted, wantAgent: "a", wantAsked: true,
		},
		{
			name: "an interrupt raised by another agent persists the text by the agent that wrote it",
			steps: []step{
				{agent: "writer", chunks: []*schema.Message{text("Let me check. ")}},
				{agent: "writer", role: schema.Tool, whole: schema.ToolMessage("transferred", "call-1"), action: transfer("a")},
				{agent: "a", chunks: []*schema.Message{toolCall()}},
				{agent: "a", action: askUser("a", "Which city?")},
			},
			wantStatus: events.StatusInterrupted, wantText: "Let me check. ", wantAgent: "writer", wantAsked: true,
		},
		{
			name:       "an error with the interrupt makes the run incomplete and not resumable",
			steps:      []step{{agent: "a", chunks: []*schema.Message{text("Let me check. ")}}, {agent: "a", err: context.DeadlineExceeded}, {agent: "a", action: askUser("a", "Which city?")}},
			wantStatus: events.StatusIncomplete, wantText: "Let me check. ", wantAgent: "a",
		},
		{
			name:       "a turn that cannot hold an interrupt persists the text as incomplete",
			steps:      []step{{agent: "a", chunks: []*schema.Message{text("Let me check. ")}}, {agent: "a", action: askUser("a", "Which city?")}},
			plain:      true,
			wantStatus: events.StatusIncomplete, wantText: "Let me check. ", wantAgent: "a",
		},
		{
			name:       "a turn that cannot hold an interrupt without text persists nothing",
			steps:      []step{{agent: "a", action: askUser("a", "Which city?")}},
			plain:      true,
			wantStatus: events.StatusDiscarded,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			sink := &recordingSink{}
			iter, done := script(ctx, tt.steps...)
			at := &answerTurn{}
			var turn bridge.Turn = at
			if tt.plain {
				turn = &at.fakeTurn
			}
			res, err := newBridge(t, sink, nil).Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter)
			<-done
			if err != nil {
				t.Fatal(err)
			}
			evs := sink.snapshot()
			summarize(t, evs, "run-1")
			var asked *events.RunInterruptedEvent
			for i, e := range evs {
				if e, ok := e.(*events.RunInterruptedEvent); ok {
					asked = e
					if i != len(evs)-2 {
						t.Errorf("run.interrupted at %d of %d events, want right before run.completed", i, len(evs))
					}
				}
			}
			if res.Status != tt.wantStatus || evs[len(evs)-1].(*events.RunCompletedEvent).Status != tt.wantStatus {
				t.Fatalf("status %s, want %s", res.Status, tt.wantStatus)
			}
			if (asked != nil) != tt.wantAsked {
				t.Fatalf("run.interrupted %+v, want one: %v", asked, tt.wantAsked)
			}
			if tt.wantAsked {
				want := events.Interrupt{Agent: "a", Tool: "ask_user", Question: "Which city?"}
				if asked.Interrupt != want {
					t.Fatalf("run.interrupted %+v, want %+v", asked.Interrupt, want)
				}
				a := at.answers[0]
				if a.Interrupt == nil || a.Interrupt.Question != "Which city?" || !reflect.DeepEqual(a.Interrupt.Targets, []string{"agent:a;tool:ask_user:call-1"}) {
					t.Fatalf("persisted interrupt %+v", a.Interrupt)
				}
			}
			if tt.wantStatus == events.StatusDiscarded {
				if len(at.committed) != 0 || at.discarded != 1 {
					t.Fatalf("committed %q, discarded %d; want nothing persisted", at.committed, at.discarded)
				}
				return
			}
			if len(at.committed) != 1 || at.committed[0] != tt.wantText || at.statuses[0] != tt.wantStatus || at.agents[0] != tt.wantAgent {
				t.Fatalf("committed %q %v by %q, want %q %s by %q", at.committed, at.statuses, at.agents, tt.wantText, tt.wantStatus, tt.wantAgent)
			}
			if res.Agent != tt.wantAgent {
				t.Fatalf("result agent %q, want %q", res.Agent, tt.wantAgent)
			}
		})
	}
}

func TestACancelBeforeTheInterruptWinsOverIt(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	sink := &recordingSink{}
	hold := make(chan struct{})
	iter, done := script(ctx,
		step{agent: "a", chunks: []*schema.Message{text("Let me check. ")}},
		step{agent: "a", chunks: []*schema.Message{toolCall()}, hold: hold},
		step{agent: "a", action: askUser("a", "Which city?")},
	)
	turn := &answerTurn{}
	h := newBridge(t, sink, nil).Start(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter)
	sink.waitEvents(t, ctx, 2) // run.started and the first token
	h.Cancel()
	close(hold)
	res, err := h.Wait()
	<-done
	if err != nil || res.Status != events.StatusCancelled || res.Interrupt != nil {
		t.Fatalf("result %+v %v, want cancelled without an interrupt", res, err)
	}
}

// The question of an interrupt is the info of its root causes; only when
// none has any is it the interrupt's Data (what an agent that interrupts by
// itself, without a tool, sets).
func TestTheQuestionIsTheRootCausesInfoElseTheInterruptsData(t *testing.T) {
	t.Parallel()
	rootCause := func(info any) *adk.InterruptCtx {
		return &adk.InterruptCtx{ID: "agent:a", Address: adk.Address{{Type: adk.AddressSegmentAgent, ID: "a"}}, Info: info, IsRootCause: true}
	}
	tests := []struct {
		name string
		info *adk.InterruptInfo
		want string
	}{
		{name: "A root cause's info is the question.", info: &adk.InterruptInfo{InterruptContexts: []*adk.InterruptCtx{rootCause("Which city?")}}, want: "Which city?"},
		{name: "Without any root cause info, the interrupt's data is the question.", info: &adk.InterruptInfo{Data: "Which city?", InterruptContexts: []*adk.InterruptCtx{rootCause(nil)}}, want: "Which city?"},
		{name: "With a root cause's info, the interrupt's data is left out.", info: &adk.InterruptInfo{Data: "internal state", InterruptContexts: []*adk.InterruptCtx{rootCause("Which city?")}}, want: "Which city?"},
		{name: "The info of every root cause is asked, one per line.", info: &adk.InterruptInfo{Data: "internal state", InterruptContexts: []*adk.InterruptCtx{rootCause("Which city?"), rootCause("Which day?")}}, want: "Which city?\nWhich day?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			sink := &recordingSink{}
			iter, done := script(ctx, step{agent: "a", action: &adk.AgentAction{Interrupted: tt.info}})
			turn := &answerTurn{}
			res, err := newBridge(t, sink, nil).Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter)
			<-done
			if err != nil || res.Status != events.StatusInterrupted {
				t.Fatalf("got %+v, %v; want interrupted", res, err)
			}
			if len(turn.answers) != 1 || turn.answers[0].Interrupt == nil || turn.answers[0].Interrupt.Question != tt.want {
				t.Fatalf("persisted %d answers (the first's interrupt: %+v), want one asking %q", len(turn.answers), turn.answers[0].Interrupt, tt.want)
			}
			var asked string
			for _, e := range sink.snapshot() {
				if e, ok := e.(*events.RunInterruptedEvent); ok {
					asked = e.Interrupt.Question
				}
			}
			if asked != tt.want {
				t.Fatalf("run.interrupted asked %q, want %q", asked, tt.want)
			}
		})
	}
}

// Usage counts wherever a model reports it: on the tool-call chunk itself,
// on a whole tool-call message, in a trailing chunk. A run whose every
// model call ended in a tool call still has the usage of those calls.
func TestUsageCountsWhereverTheModelReportsIt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		steps []step
		want  events.Usage
	}{
		{"Usage on the tool-call chunk itself counts.", []step{
			{agent: "a", chunks: []*schema.Message{text("Let me check. "), withUsage(toolCall(), 10, 1)}},
			{agent: "a", role: schema.Tool, whole: schema.ToolMessage("12:00", "call-1")},
			{agent: "a", chunks: []*schema.Message{text("noon"), withUsage(text(""), 20, 8)}},
		}, events.Usage{PromptTokens: 30, CompletionTokens: 9, TotalTokens: 39}},
		{"Usage on a whole tool-call message counts.", []step{
			{agent: "a", whole: withUsage(toolCall(), 10, 1)},
			{agent: "a", role: schema.Tool, whole: schema.ToolMessage("12:00", "call-1")},
			{agent: "a", whole: withUsage(text("noon"), 20, 8)},
		}, events.Usage{PromptTokens: 30, CompletionTokens: 9, TotalTokens: 39}},
		{"Usage on the tool-call chunk and again, cumulative, after it counts once.", []step{
			{agent: "a", chunks: []*schema.Message{withUsage(toolCall(), 10, 1), withUsage(text(""), 10, 2)}},
			{agent: "a", role: schema.Tool, whole: schema.ToolMessage("12:00", "call-1")},
			{agent: "a", chunks: []*schema.Message{withUsage(text("noon"), 20, 8)}},
		}, events.Usage{PromptTokens: 30, CompletionTokens: 10, TotalTokens: 40}},
		{"An interrupted run whose only model call ended in the tool call keeps that call's usage.", []step{
			{agent: "a", chunks: []*schema.Message{text("Let me ask. "), withUsage(toolCall(), 12, 3)}},
			{agent: "a", action: askUser("a", "Which city?")},
		}, events.Usage{PromptTokens: 12, CompletionTokens: 3, TotalTokens: 15}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			sink := &recordingSink{}
			iter, done := script(ctx, tt.steps...)
			turn := &answerTurn{}
			res, err := newBridge(t, sink, nil).Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter)
			<-done
			if err != nil {
				t.Fatal(err)
			}
			if res.Usage == nil || res.Usage.TotalTokens != int(tt.want.TotalTokens) || len(turn.answers) != 1 || turn.answers[0].Usage == nil || *turn.answers[0].Usage != tt.want {
				t.Fatalf("usage %+v, persisted %+v; want %+v", res.Usage, turn.answers, tt.want)
			}
		})
	}
}

// streamedStretches joins the token events of a run into one stretch per
// run of consecutive tokens of one agent ("agent: text"): what was
// streamed, whatever the deltas' coalescing.
func streamedStretches(evs []events.Event) []string {
	var out []string
	last := ""
	for _, e := range evs {
		tok, ok := e.(*events.TokenEvent)
		if !ok {
			continue
		}
		if len(out) > 0 && tok.Agent == last {
			out[len(out)-1] += tok.Delta
			continue
		}
		out = append(out, tok.Agent+": "+tok.Delta)
		last = tok.Agent
	}
	return out
}

func partsOf(ps []history.Part) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Agent+": "+p.Text)
	}
	return out
}

func TestAnswersOfSeveralAgentsArePersistedOnePartPerAgent(t *testing.T) {
	t.Parallel()
	orders := bridge.AgentRole("orders", schema.Assistant)
	tests := []struct {
		name    string
		persist bridge.Predicate
		steps   []step
		// parts is what is committed (history.Answer.Parts, or Text and
		// Agent for one part); streamed what the stream holds.
		parts, streamed []string
	}{
		{
			name: "A sub-agent's answer, then the supervisor's, with the default predicates, are two parts under their own agents.",
			steps: []step{
				{agent: "desk", chunks: []*schema.Message{toolCall()}},
				{agent: "desk", role: schema.Tool, whole: schema.ToolMessage("transferred", "call-1"), action: transfer("orders")},
				{agent: "orders", chunks: []*schema.Message{text("ORD-7 left "), text("warehouse B yesterday")}},
				{agent: "orders", role: schema.Tool, whole: schema.ToolMessage("transferred", "call-2"), action: transfer("desk")},
				{agent: "desk", chunks: []*schema.Message{text("The orders desk says: it is on its way.")}},
			},
			parts:    []string{"orders: ORD-7 left warehouse B yesterday", "desk: The orders desk says: it is on its way."},
			streamed: []string{"orders: ORD-7 left warehouse B yesterday", "desk: The orders desk says: it is on its way."},
		},
		{
			name: "A, then B, then A again are three parts.",
			steps: []step{
				{agent: "desk", chunks: []*schema.Message{text("Let me ask. ")}},
				{agent: "orders", chunks: []*schema.Message{text("Shipped.")}},
				{agent: "desk", chunks: []*schema.Message{text(" It shipped.")}},
			},
			parts:    []string{"desk: Let me ask. ", "orders: Shipped.", "desk:  It shipped."},
			streamed: []string{"desk: Let me ask. ", "orders: Shipped.", "desk:  It shipped."},
		},
		{
			name:    "A predicate selecting one agent persists one part, while the stream keeps every agent's text.",
			persist: orders,
			steps: []step{
				{agent: "desk", chunks: []*schema.Message{text("Let me ask. ")}},
				{agent: "orders", chunks: []*schema.Message{text("Shipped.")}},
				{agent: "desk", chunks: []*schema.Message{text(" It shipped.")}},
			},
			parts:    []string{"orders: Shipped."},
			streamed: []string{"desk: Let me ask. ", "orders: Shipped.", "desk:  It shipped."},
		},
		{
			name: "Two messages of one agent in a row, a tool round between them, are one part.",
			steps: []step{
				{agent: "orders", chunks: []*schema.Message{text("Looking. "), toolCall()}},
				{agent: "orders", role: schema.Tool, whole: schema.ToolMessage("ok", "call-1")},
				{agent: "orders", chunks: []*schema.Message{text("Found it.")}},
				{agent: "orders", chunks: []*schema.Message{text(" ORD-7.")}},
			},
			parts:    []string{"orders: Found it. ORD-7."},
			streamed: []string{"orders: Looking. Found it. ORD-7."},
		},
		{
			name: "Another agent's text cut by its tool call leaves no part, and the first agent's text goes on in its part.",
			steps: []step{
				{agent: "desk", chunks: []*schema.Message{text("One. ")}},
				{agent: "orders", chunks: []*schema.Message{text("checking"), toolCall()}},
				{agent: "desk", chunks: []*schema.Message{text("Two.")}},
			},
			parts:    []string{"desk: One. Two."},
			streamed: []string{"desk: One. ", "orders: checking", "desk: Two."},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			sink := &recordingSink{}
			b := newBridge(t, sink, func(c *bridge.Config) { c.Persist = tc.persist })
			iter, done := script(ctx, tc.steps...)
			turn := &answerTurn{}
			res, err := b.Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter)
			<-done
			if err != nil || res.Status != events.StatusComplete {
				t.Fatalf("Run = %+v, %v", res, err)
			}
			if len(turn.answers) != 1 {
				t.Fatalf("%d commits, want 1", len(turn.answers))
			}
			a := turn.answers[0]
			got := partsOf(a.Parts)
			if len(a.Parts) == 0 {
				got = []string{a.Agent + ": " + a.Text}
			} else if a.Text != "" || a.Agent != "" {
				t.Errorf("committed both parts and text %q of %q", a.Text, a.Agent)
			}
			if !reflect.DeepEqual(got, tc.parts) {
				t.Errorf("committed parts %q, want %q", got, tc.parts)
			}
			if !reflect.DeepEqual(partsOf(res.Parts), tc.parts) {
				t.Errorf("Result.Parts %q, want %q", partsOf(res.Parts), tc.parts)
			}
			if s := streamedStretches(sink.snapshot()); !reflect.DeepEqual(s, tc.streamed) {
				t.Errorf("streamed %q, want %q", s, tc.streamed)
			}
			summarize(t, sink.snapshot(), "run-1")
		})
	}
}

func TestAnAnswerOfMoreThanMaxPartsEndsIncompleteAtTheCap(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	sink := &recordingSink{}
	b := newBridge(t, sink, nil)
	var steps []step
	for i := range history.MaxParts + 2 {
		agent := []string{"desk", "orders"}[i%2]
		steps = append(steps, step{agent: agent, chunks: []*schema.Message{text(fmt.Sprintf("%d.", i+1))}})
	}
	iter, done := script(ctx, steps...)
	turn := &answerTurn{}
	res, err := b.Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != events.StatusIncomplete || len(turn.answers) != 1 || turn.answers[0].Status != events.StatusIncomplete {
		t.Fatalf("status %s (committed %+v), want incomplete", res.Status, turn.answers)
	}
	parts := turn.answers[0].Parts
	if len(parts) != history.MaxParts || parts[len(parts)-1].Text != fmt.Sprintf("%d.", history.MaxParts) {
		t.Fatalf("committed %d parts ending %+v, want the first %d", len(parts), parts[len(parts)-1], history.MaxParts)
	}
	if s := streamedStretches(sink.snapshot()); len(s) != history.MaxParts+2 {
		t.Errorf("streamed %d stretches, want all %d: the cap is the persisted answer's only", len(s), history.MaxParts+2)
	}
}

// transferTurn is a fakeTurn that is told of the run's transfers, and
// notes which it had been told of when it was committed.
type transferTurn struct {
	fakeTurn
	transfers    []string
	beforeCommit []string
}

func (t *transferTurn) Transferred(from, to string) {
	t.mu.Lock()
	t.transfers = append(t.transfers, from+" -> "+to)
	t.mu.Unlock()
}

func (t *transferTurn) Commit(ctx context.Context, answer, agent string, status events.Status, at time.Time) (history.Committed, error) {
	t.mu.Lock()
	t.beforeCommit = slices.Clone(t.transfers)
	t.mu.Unlock()
	return t.fakeTurn.Commit(ctx, answer, agent, status, at)
}

// The worker keeps a conversation's active agent with its turn: it learns
// the run's transfers from the bridge, all of them and in order, before
// the turn commits; and a run started from a sub-agent says so on
// run.started.
func TestATransferTurnLearnsEveryTransferBeforeItCommitsAndRunStartedNamesTheStart(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	sink := &recordingSink{}
	b := newBridge(t, sink, nil)
	iter, done := script(ctx,
		step{agent: "researcher", chunks: []*schema.Message{text("Handing over. "), toolCall()}},
		step{agent: "researcher", role: schema.Tool, whole: schema.ToolMessage("transferred", "call-1"), action: transfer("supervisor")},
		step{agent: "supervisor", chunks: []*schema.Message{text("Booking. "), toolCall()}},
		step{agent: "supervisor", role: schema.Tool, whole: schema.ToolMessage("transferred", "call-2"), action: transfer("booker")},
		step{agent: "booker", chunks: []*schema.Message{text("Booked.")}},
	)
	turn := &transferTurn{}
	_, err := b.Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Agent: "researcher", Turn: turn}, iter)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"researcher -> supervisor", "supervisor -> booker"}
	turn.mu.Lock()
	defer turn.mu.Unlock()
	if len(turn.committed) != 1 || !reflect.DeepEqual(turn.beforeCommit, want) {
		t.Errorf("commits %q, transfers known at the commit %q, want one commit after %q", turn.committed, turn.beforeCommit, want)
	}
	evs := sink.snapshot()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	if s, ok := evs[0].(*events.RunStartedEvent); !ok || s.Agent != "researcher" {
		t.Errorf("first event %#v, want run.started from researcher", evs[0])
	}
}

// A cancel drops what the run had not streamed yet, but not the usage the
// model already reported for it: those tokens were spent. The cancel here
// comes while the reader has handed over a tool call whose chunk carries
// the usage, before the coordinator took it.
func TestACancelKeepsTheUsageTheModelAlreadyReported(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	hold := make(chan struct{})
	reached := make(chan struct{}) // the reader is past the tool call
	var reachedOnce, firstToken sync.Once
	handle := make(chan *bridge.Handle, 1)
	sink := &recordingSink{}
	sink.onEmit = func(e events.Event) {
		if _, ok := e.(*events.TokenEvent); !ok {
			return
		}
		firstToken.Do(func() {
			close(hold)
			select {
			case <-reached:
			case <-ctx.Done():
				return
			}
			(<-handle).Cancel()
		})
	}
	b := newBridge(t, sink, func(c *bridge.Config) {
		c.Stream = func(s bridge.Source) bool {
			if s.Agent == "next" {
				reachedOnce.Do(func() { close(reached) })
			}
			return s.Role == schema.Assistant
		}
	})
	iter, done := script(ctx,
		step{agent: "a", chunks: []*schema.Message{text("Let me check. ")}},
		step{agent: "a", chunks: []*schema.Message{withUsage(toolCall(), 5, 2)}, hold: hold},
		step{agent: "next", whole: text("never streamed")},
	)
	h := b.Start(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: &answerTurn{}}, iter)
	handle <- h
	res, err := h.Wait()
	<-done
	if err != nil || res.Status != events.StatusCancelled {
		t.Fatalf("result %+v %v, want cancelled", res, err)
	}
	if res.Usage == nil || res.Usage.TotalTokens != 7 {
		t.Errorf("usage %+v, want the 7 tokens the tool call reported", res.Usage)
	}
}
