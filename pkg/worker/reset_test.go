package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// resetRequest is a reset record's request of the parts r names.
func resetRequest(id events.Identity, requestID string, r events.Reset) events.Request {
	req := stepRequest(id, requestID, "")
	req.Reset = &r
	return req
}

// resetOf runs a reset through step and checks that it completes as
// docs/api.md says: one run.completed, complete, and nothing else.
func resetOf(t *testing.T, ctx context.Context, step *worker.Step, store history.Store, req events.Request) {
	t.Helper()
	sink := newRecordingSink()
	res, err := step.Run(ctx, req, store, sink)
	if err != nil || res.Status != events.StatusComplete || res.Committed.N != 0 {
		t.Fatalf("reset %s: %+v, %v; want complete without a turn", req.RequestID, res, err)
	}
	if got := fmt.Sprint(sink.types()); got != "[run.completed]" {
		t.Fatalf("reset %s streamed %s, want [run.completed]", req.RequestID, got)
	}
}

// An agent transferred to in turn 1 answers turn 2; a reset returns the
// conversation to the root, which answers turn 3 (issue 27, item 5).
func TestAResetReturnsTheConversationToTheRootAgent(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	desk := &scripted{reply: func(in []*schema.Message) *schema.Message {
		if strings.Contains(lastOf(in).Content, "billing") {
			return call(adk.TransferToAgentToolName, `{"agent_name":"billing"}`)
		}
		return schema.AssistantMessage("desk here", nil)
	}}
	billing := &scripted{reply: func([]*schema.Message) *schema.Message { return schema.AssistantMessage("billing here", nil) }}
	step := newStep(t, stepConfig(), worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		return deskAndBilling(ctx, desk, billing)
	}))
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "reset-agent"}
	if res, err := step.Run(ctx, stepRequest(id, "r1", "a billing question"), store, newRecordingSink()); err != nil || res.Agent != "billing" {
		t.Fatalf("turn 1: %+v, %v; want billing's answer", res, err)
	}
	if res, err := step.Run(ctx, stepRequest(id, "r2", "and another thing"), store, newRecordingSink()); err != nil || res.Agent != "billing" {
		t.Fatalf("turn 2: %+v, %v; want billing's answer", res, err)
	}
	resetOf(t, ctx, step, store, resetRequest(id, "r3", events.Reset{Agent: true}))
	sink := newRecordingSink()
	res, err := step.Run(ctx, stepRequest(id, "r4", "hello again"), store, sink)
	if err != nil || res.Agent != "desk" || res.Answer != "desk here" {
		t.Fatalf("turn after the reset: %+v, %v; want the desk's (the root's) answer", res, err)
	}
	if a := startedOf(t, sink).Agent; a != "" {
		t.Errorf("run.started after the reset names agent %q, want none (the root)", a)
	}
}

// A reset of the state clears the conversation's keys and keeps the user's
// (shared by the user's other conversations); a reset of the agent alone
// keeps the state.
func TestAResetClearsTheConversationsStateAndOnlyIt(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	both := stateTool{name: "count", body: func(ctx context.Context, st *worker.State) (string, error) {
		var n, u int
		if _, err := st.Get(ctx, "count", &n); err != nil {
			return "", err
		}
		if _, err := st.Get(ctx, "user:count", &u); err != nil {
			return "", err
		}
		n, u = n+1, u+1
		if err := errors.Join(st.Set("count", n), st.Set("user:count", u)); err != nil {
			return "", err
		}
		return fmt.Sprintf("%d/%d", n, u), nil
	}}
	step := stateStep(t, both, echoResult)
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "reset-state"}
	run := func(rid, want string) {
		t.Helper()
		if res, err := step.Run(ctx, stepRequest(id, rid, "count"), store, newRecordingSink()); err != nil || res.Answer != want {
			t.Fatalf("%s: %+v, %v; want %q", rid, res, err, want)
		}
	}
	run("r1", "said 1/1")
	run("r2", "said 2/2")
	resetOf(t, ctx, step, store, resetRequest(id, "r3", events.Reset{State: true}))
	run("r4", "said 1/3")
	resetOf(t, ctx, step, store, resetRequest(id, "r5", events.Reset{Agent: true}))
	run("r6", "said 2/4")
}

// A reset delivered again after a later turn (a producer's retry, a
// redelivery) is decided already: it is announced again, complete, and
// erases nothing the later turn committed.
func TestARedeliveredResetIsAppliedOnce(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	step := stateStep(t, countTool, echoResult)
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "reset-once"}
	if res, err := step.Run(ctx, stepRequest(id, "r1", "count"), store, newRecordingSink()); err != nil || res.Answer != "said 1" {
		t.Fatalf("r1: %+v, %v", res, err)
	}
	reset := resetRequest(id, "r2", events.Reset{State: true, Agent: true})
	resetOf(t, ctx, step, store, reset)
	if res, err := step.Run(ctx, stepRequest(id, "r3", "count"), store, newRecordingSink()); err != nil || res.Answer != "said 1" {
		t.Fatalf("r3 after the reset: %+v, %v; want said 1", res, err)
	}
	sink := newRecordingSink()
	res, err := step.Run(ctx, reset, store, sink)
	if err != nil || res.Status != events.StatusComplete || !res.Committed.Duplicate {
		t.Fatalf("the reset again: %+v, %v; want a duplicate, complete", res, err)
	}
	if res, err := step.Run(ctx, stepRequest(id, "r4", "count"), store, newRecordingSink()); err != nil || res.Answer != "said 2" {
		t.Fatalf("r4 after the repeated reset: %+v, %v; want said 2 (r3's count kept)", res, err)
	}
}

// A reset queued behind a running turn is applied after it, in the
// conversation's order: the running turn's state does not survive the
// reset, and the turn queued after the reset keeps its own. The three
// records are in the topic before the worker starts, so it fetches the
// reset and the third while the first runs.
func TestAResetQueuedBehindARunningTurnIsAppliedAfterIt(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store := history.NewMemoryStore()
	s := newStack(t, store)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "reset-queued"}
	reset, _ := events.EncodeRequest(resetRequest(id, "r2", events.Reset{State: true, Agent: true}))
	s.produce(t, ctx, id.Key(), request(id, "r1", "count"))
	s.produce(t, ctx, id.Key(), reset)
	s.produce(t, ctx, id.Key(), request(id, "r3", "count"))
	s.produce(t, ctx, id.Key(), request(id, "r4", "count"))
	s.start(t, ctx, worker.Deps{Go: worker.GoOptions(worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		return toolAgent(ctx, toolThenSay(countTool.name, echoResult), countTool)
	}))})
	got := s.stream(t).untilCompleted(t, ctx, 4)
	for rid, want := range map[string]string{"r1": "said 1", "r3": "said 1", "r4": "said 2"} {
		if txt, st := text(got[rid]); txt != want || st != events.StatusComplete {
			t.Errorf("%s: %q %s, want %q complete", rid, txt, st, want)
		}
	}
	if _, st := text(got["r2"]); st != events.StatusComplete {
		t.Errorf("the reset completed %s, want complete", st)
	}
}
