package replay_test

import (
	"context"

	"github.com/cloudwego/eino/adk"

	"github.com/turnpike-dev/turnpike/pkg/replay"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// A replay binary that runs the new agent on the last two hours of
// traffic: go run . -mode shadow -since 2h -report new.jsonl (with
// TURNPIKE_KAFKA_BROKERS set), then compare new.jsonl with production.
func ExampleMain() {
	replay.Main(worker.WithAgentFactory(func(ctx context.Context, r worker.Request) (adk.Agent, error) {
		return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "assistant", Description: "The new agent.", Model: shout{}})
	}))
}
