package desk_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/examples/orders/desk"
	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/turnpiketest"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// A question goes desk → orders (a Go tool call) → desk, on the real
// pipeline: the orders agent's answer and the desk's closing line are
// streamed token by token, the tool call and its result are neither
// streamed nor persisted, only the orders agent's answer is persisted
// (the persist predicate), and the transfers come in order.
func TestALookupIsStreamedAndItsAnswerPersisted(t *testing.T) {
	stack := turnpiketest.Start(t, desk.Options(desk.SampleTable())...)
	c := stack.Client("alice")
	f := c.Follow("c1")
	r := f.Run(c.Send("c1", "Where is order 42?"))

	const answer = "Order 42 (kettle) is shipped."
	if r.Status != events.StatusComplete {
		t.Fatalf("run %v", r)
	}
	if !strings.Contains(r.Text, answer) || !strings.HasSuffix(r.Text, desk.Closing) {
		t.Errorf("streamed %q, want the answer then the closing line", r.Text)
	}
	if strings.Contains(r.Text, desk.LookupTool) || strings.Contains(r.Text, "{") {
		t.Errorf("the tool call or its arguments were streamed: %q", r.Text)
	}
	// The order of events: transfer to orders, the orders agent's tokens,
	// transfer back, the desk's tokens.
	var seq []string
	for _, e := range r.Events {
		switch e := e.(type) {
		case *events.AgentTransferEvent:
			seq = append(seq, e.From+">"+e.To)
		case *events.TokenEvent:
			if len(seq) == 0 || seq[len(seq)-1] != e.Agent {
				seq = append(seq, e.Agent)
			}
		}
	}
	if want := "desk>orders orders orders>desk desk"; strings.Join(seq, " ") != want {
		t.Errorf("events %q, want %q", strings.Join(seq, " "), want)
	}
	h := c.History("c1")
	if len(h) != 2 || h[0].Role != "user" || h[1].Role != "assistant" || h[1].Content != answer || h[1].Agent != desk.OrdersAgent {
		t.Errorf("history %+v, want the question and the orders agent's answer only", h)
	}
}

// A cancel asks the user first: the run ends interrupted with the tool's
// question; an answer the tool cannot take is rejected and the question
// stays pending; "yes" resumes the run, and the tool gets a typed
// Confirmation (not the string), so the order is cancelled, once.
func TestACancelIsConfirmedThroughAnInterrupt(t *testing.T) {
	table := desk.SampleTable()
	stack := turnpiketest.Start(t, desk.Options(table)...)
	c := stack.Client("bob")
	f := c.Follow("c2")

	asked := f.Run(c.Send("c2", "Please cancel order 7"))
	const question = "Cancel order 7 (teapot)? Answer yes or no."
	if asked.Status != events.StatusInterrupted || asked.Interrupt == nil || asked.Interrupt.Tool != desk.CancelTool ||
		asked.Interrupt.Question != question || asked.Interrupt.Agent != desk.OrdersAgent {
		t.Fatalf("run %v, interrupt %+v; want interrupted by %s asking %q", asked, asked.Interrupt, desk.CancelTool, question)
	}
	if h := c.History("c2"); len(h) != 2 || h[1].Interrupt == nil || h[1].Interrupt.Question != question {
		t.Fatalf("history %+v, want the pending question", h)
	}

	bad := f.Run(c.Resume("c2", asked.RequestID, "maybe"))
	if bad.Status != events.StatusRejected || len(bad.Notices) != 1 || !strings.Contains(bad.Notices[0], "answer yes or no") {
		t.Errorf("resume with \"maybe\": %v, notices %q; want rejected with the parse error", bad, bad.Notices)
	}
	if o, _ := table.Get("7"); o.Status != "processing" {
		t.Fatalf("after a rejected answer order 7 is %s", o.Status)
	}

	done := f.Run(c.Resume("c2", asked.RequestID, "yes"))
	if done.Status != events.StatusComplete || !strings.Contains(done.Text, "Order 7 is cancelled.") {
		t.Fatalf("resume with \"yes\": %v", done)
	}
	if o, _ := table.Get("7"); o.Status != "cancelled" || table.Cancels() != 1 {
		t.Errorf("order 7 is %s after %d cancels, want cancelled once", o.Status, table.Cancels())
	}
	h := c.History("c2")
	if len(h) != 4 || h[2].Content != "yes" || h[3].Content != "Order 7 is cancelled." {
		t.Errorf("history %+v, want the answer and the cancellation persisted", h)
	}
}

// Conversations run at once, each on an order desk built for it (a
// supervisor and a tool-calling sub-agent): under -race, sharing one would
// race in eino v0.9.21.
func TestConversationsRunConcurrently(t *testing.T) {
	stack := turnpiketest.Start(t, desk.Options(desk.SampleTable())...)
	c := stack.Client("carl")
	convs := []string{"a", "b", "c", "d", "e", "f"}
	followers := make([]*turnpiketest.Follower, len(convs))
	ids := make([]string, len(convs))
	for i, conv := range convs {
		followers[i] = c.Follow(conv)
		ids[i] = c.Send(conv, "Where is order 7?")
	}
	runs := make([]turnpiketest.Run, len(convs))
	var wg sync.WaitGroup
	for i := range convs {
		wg.Go(func() { runs[i] = followers[i].Run(ids[i]) })
	}
	wg.Wait()
	for i, r := range runs {
		if r.Status != events.StatusComplete || !strings.HasPrefix(r.Text, "Order 7 (teapot) is processing.") {
			t.Errorf("conversation %s: %v", convs[i], r)
		}
	}
}

// A stream predicate leaves the desk's closing line out of the stream as
// the persist predicate leaves it out of the history.
func TestAStreamPredicateSelectsTheOrdersAgent(t *testing.T) {
	opts := append(desk.Options(desk.SampleTable()), worker.WithStream(bridge.AgentRole(desk.OrdersAgent, schema.Assistant)))
	stack := turnpiketest.Start(t, opts...)
	c := stack.Client("dana")
	f := c.Follow("c")
	r := f.Run(c.Send("c", "Where is order 7?"))
	if r.Status != events.StatusComplete || r.Text != "Order 7 (teapot) is processing." {
		t.Errorf("streamed %v, want the orders agent's answer only", r)
	}
	if len(r.Transfers) != 2 {
		t.Errorf("transfers %+v: a stream predicate selects text, never the transfers", r.Transfers)
	}
}
