package turnpiketest_test

import (
	"context"
	"testing"

	"github.com/cloudwego/eino/adk"

	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/turnpiketest"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

func newAgent(ctx context.Context, _ worker.Request) (adk.Agent, error) {
	model, err := echo.New(echo.Config{})
	if err != nil {
		return nil, err
	}
	return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "assistant", Description: "Echoes.", Model: model})
}

// A test of an agent on the whole pipeline, in a func TestAgent(t
// *testing.T): what was streamed, then what was persisted.
func ExampleStart() {
	var t *testing.T // the test's
	stack := turnpiketest.Start(t, worker.WithAgentFactory(newAgent))
	c := stack.Client("alice")
	f := c.Follow("c1") // before sending: the stream from its first event
	run := f.Run(c.Send("c1", "hello"))
	if run.Status != events.StatusComplete || run.Text == "" {
		t.Fatalf("run %v", run)
	}
	if h := c.History("c1"); len(h) != 2 || h[1].Content != run.Text {
		t.Fatalf("history %+v", h)
	}
}

// A test that cancels a run in the middle of its answer: WaitTokens
// returns with the first token, Run with the whole (cancelled) run. The
// agent's model should stream its first token and then wait, so that the
// cancel never races the end of the answer.
func ExampleFollower_WaitTokens() {
	var t *testing.T // the test's
	stack := turnpiketest.Start(t, worker.WithAgentFactory(newAgent))
	c := stack.Client("alice")
	f := c.Follow("c1")
	id := c.Send("c1", "a long question")
	f.WaitTokens(id, 1) // the answer has begun
	c.Cancel("c1", id)
	if run := f.Run(id); run.Status != events.StatusCancelled {
		t.Fatalf("run %v", run)
	}
}

// A test of an agent with long-term memory served by the stack: the
// worker configuration's Memory ("terms", on the embedded store) opens
// the service, and worker.WithMemory(nil, …) turns injection on for a Go
// agent. A turn's memory is searchable once the conversation's next turn
// has run, so the test runs one before asking elsewhere.
func ExampleStartConfig_memory() {
	var t *testing.T // the test's
	cfg := turnpiketest.Config()
	cfg.Memory = "terms"
	stack := turnpiketest.StartConfig(t, cfg, worker.WithAgentFactory(newAgent),
		worker.WithMemory(nil, worker.MemoryConfig{Inject: true}))
	c := stack.Client("alice")
	f := c.Follow("a")
	f.Run(c.Send("a", "My sister lives in Lisbon"))
	f.Run(c.Send("a", "thanks")) // turn 1 is remembered before turn 2 runs
	// A turn of conversation "b" now has turn 1 in its window, first, as
	// one system message starting with worker.MemoryHeader.
}
