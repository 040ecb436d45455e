package worker_test

import (
	"context"
	"fmt"

	"github.com/cloudwego/eino/adk"

	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// chartAgent saves a chart through the run's artifact service before
// answering as the agent it wraps; a tool saves the same way, from the
// context of its InvokableRun.
type chartAgent struct{ adk.Agent }

func (a chartAgent) Run(ctx context.Context, in *adk.AgentInput, opts ...adk.AgentRunOption) *adk.AsyncIterator[*adk.AgentEvent] {
	if arts := worker.ArtifactsFromContext(ctx); arts != nil {
		if err := arts.Save(ctx, "chart.svg", "image/svg+xml", []byte("<svg/>")); err != nil {
			it, gen := adk.NewAsyncIteratorPair[*adk.AgentEvent]()
			gen.Send(&adk.AgentEvent{Err: err})
			gen.Close()
			return it
		}
	}
	return a.Agent.Run(ctx, in, opts...)
}

// A run saves an artifact through its context: the save is staged during
// the run and is version 1 once the run's turn commits.
func ExampleArtifactsFromContext() {
	arts := history.NewMemoryArtifacts(history.ArtifactLimits{}) // history.NewMongoArtifacts in production
	model, _ := echo.New(echo.Config{})
	step, err := worker.NewStep(worker.DefaultConfig(), worker.WithArtifacts(arts),
		worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
			a, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "assistant", Description: "charts", Model: model})
			return chartAgent{a}, err
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "sales"}
	req := events.Request{V: events.Version, Tenant: id.Tenant, User: id.User, Conversation: id.Conversation,
		RequestID: "r1", Content: "chart the sales", Strategy: events.StrategyEnqueue}
	if _, err := step.Run(context.Background(), req, history.NewMemoryStore(), discard{}); err != nil {
		fmt.Println(err)
		return
	}
	a, data, err := arts.OpenArtifact(context.Background(), id, "chart.svg", 0)
	fmt.Println(a.Name, a.Version, a.MIME, string(data), err)
	// Output: chart.svg 1 image/svg+xml <svg/> <nil>
}
