package bridge_test

import (
	"context"
	"fmt"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// printSink prints what a stream topic would receive.
type printSink struct{}

func (printSink) Emit(_ context.Context, _ events.Identity, e events.Event) error {
	switch e := e.(type) {
	case *events.TokenEvent:
		fmt.Printf("%d token %q\n", e.Seq, e.Delta)
	case *events.RunCompletedEvent:
		fmt.Printf("%d run.completed %s\n", e.Seq, e.Status)
	default:
		fmt.Printf("%d %s\n", e.Header().Seq, e.Type())
	}
	return nil
}

// One run of an eino agent through the bridge: tokens go to the sink, the
// turn goes to the store, run.completed comes after the turn is durable.
func Example() {
	ctx := context.Background()
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "c1"}

	model, _ := echo.New(echo.Config{})
	agent, _ := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "assistant", Description: "echo", Model: model})
	runner := adk.NewRunner(ctx, adk.RunnerConfig{Agent: agent, EnableStreaming: true})

	pending := history.Begin(store, id, "req-1", "hello bridge", time.Now())
	window, _ := pending.Window(ctx, 20)
	input := []adk.Message{}
	for _, m := range window {
		input = append(input, schema.UserMessage(m.Content))
	}

	b, _ := bridge.New(bridge.Config{Sink: printSink{}, MaxDeltaBytes: 8})
	res, err := b.Run(ctx, bridge.Run{Identity: id, RequestID: "req-1", RunID: "run-1", Turn: pending}, runner.Run(ctx, input))
	if err != nil {
		fmt.Println("run failed:", err)
		return
	}
	page, _ := store.List(ctx, id, 0, 10)
	fmt.Printf("persisted %q as turn %d (%s), %d messages\n", res.Answer, res.Committed.N, res.Status, len(page.Messages))
	// Output:
	// 1 run.started
	// 2 token "echo "
	// 3 token "#1: "
	// 4 token "hello "
	// 5 token "bridge"
	// 6 run.completed complete
	// persisted "echo #1: hello bridge" as turn 1 (complete), 2 messages
}

// publishingTurn is a pending turn whose commit publishes the files the
// run saved (as the worker's does with its artifact service): an
// ArtifactTurn.
type publishingTurn struct {
	*history.Pending
	published []events.ArtifactInfo
}

func (t *publishingTurn) CommitAnswer(ctx context.Context, a history.Answer) (history.Committed, error) {
	c, err := t.Pending.CommitAnswer(ctx, a)
	if err == nil {
		// Published once the turn is committed, never before.
		t.published = []events.ArtifactInfo{{Name: "chart.png", Version: 1, MIME: "image/png", Size: 5120}}
	}
	return c, err
}

func (t *publishingTurn) PublishedArtifacts() []events.ArtifactInfo { return t.published }

// A turn that publishes artifacts with its commit: the bridge announces
// each published version with artifact.saved, after the commit and right
// before run.completed.
func ExampleArtifactTurn() {
	ctx := context.Background()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "c1"}
	model, _ := echo.New(echo.Config{})
	agent, _ := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "assistant", Description: "echo", Model: model})
	runner := adk.NewRunner(ctx, adk.RunnerConfig{Agent: agent, EnableStreaming: true})

	turn := &publishingTurn{Pending: history.Begin(history.NewMemoryStore(), id, "req-1", "chart", time.Now())}
	// MaxDeltaBytes 8 keeps each echoed word a token of its own.
	b, _ := bridge.New(bridge.Config{Sink: printSink{}, MaxDeltaBytes: 8})
	if _, err := b.Run(ctx, bridge.Run{Identity: id, RequestID: "req-1", RunID: "run-1", Turn: turn},
		runner.Run(ctx, []adk.Message{schema.UserMessage("chart")})); err != nil {
		fmt.Println("run failed:", err)
	}
	// Output:
	// 1 run.started
	// 2 token "echo "
	// 3 token "#1: "
	// 4 token "chart"
	// 5 artifact.saved
	// 6 run.completed complete
}
