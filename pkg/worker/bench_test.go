package worker_test

import (
	"context"
	"testing"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/tool/utils"
	"github.com/cloudwego/eino/schema"
)

// One run of a tool-calling agent (a tool call, then the answer) on an
// agent built for the run, as WithAgentFactory does, and on one agent
// reused run after run (safe here only because the runs are sequential).
func BenchmarkToolCallingRun(b *testing.B) {
	tl, err := utils.InferTool("lookup", "looks a key up", func(_ context.Context, a lookupArgs) (string, error) { return a.Key, nil })
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	input := []adk.Message{schema.UserMessage("k")}
	run := func(b *testing.B, a adk.Agent) {
		iter := adk.NewRunner(ctx, adk.RunnerConfig{Agent: a, EnableStreaming: true}).Run(ctx, input)
		for {
			ev, ok := iter.Next()
			if !ok {
				return
			}
			if ev.Err != nil {
				b.Fatal(ev.Err)
			}
			if mo := ev.Output; mo != nil && mo.MessageOutput != nil && mo.MessageOutput.IsStreaming {
				for {
					if _, err := mo.MessageOutput.MessageStream.Recv(); err != nil {
						break
					}
				}
			}
		}
	}
	b.Run("agent-per-run", func(b *testing.B) {
		for b.Loop() {
			a, err := newLookupAgent(ctx, lookupModel{}, tl)
			if err != nil {
				b.Fatal(err)
			}
			run(b, a)
		}
	})
	b.Run("shared-agent", func(b *testing.B) {
		a, err := newLookupAgent(ctx, lookupModel{}, tl)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			run(b, a)
		}
	})
}
