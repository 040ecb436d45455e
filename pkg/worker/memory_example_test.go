package worker_test

import (
	"context"
	"fmt"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"

	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// A Go agent with long-term memory: each committed turn is remembered
// after its commit, the top memories are injected before a run, and the
// agent gets the search_memory tool.
func ExampleWithMemory() {
	mem := history.NewInMemoryMemory()  // history.NewMongoMemory in production
	model, _ := echo.New(echo.Config{}) // any eino ToolCallingChatModel
	step, err := worker.NewStep(worker.DefaultConfig(),
		worker.WithMemory(mem, worker.MemoryConfig{Inject: true, K: 3, TokenBudget: 512}),
		worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
			return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{
				Name: "assistant", Description: "remembers", Model: model,
				ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{worker.NewSearchMemoryTool()}}},
			})
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "trip"}
	req := events.Request{V: events.Version, Tenant: id.Tenant, User: id.User, Conversation: id.Conversation,
		RequestID: "r1", Content: "My sister lives in Lisbon", Strategy: events.StrategyEnqueue}
	if _, err := step.Run(context.Background(), req, history.NewMemoryStore(), discard{}); err != nil {
		fmt.Println(err)
		return
	}
	hits, _ := mem.Search(context.Background(), "acme", "alice", "Lisbon", 5)
	fmt.Println(len(hits), hits[0].Identity.Conversation, hits[0].Turn)
	// Output: 1 trip 1
}
