package replay

import (
	"context"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
)

// Agent kinds of config.Agent.
const (
	// agentADK is the worker's agent, built by the worker's run step from
	// the settings: an eino adk chat model agent (or the agent
	// configuration file's agents).
	agentADK = "adk"
	// agentDirect is directAgent, run by the worker's run step as an
	// agent written in Go: the same input and output for an agent without
	// tools, without eino's per-run graph.
	agentDirect = "direct"
)

// directAgent streams its model directly: the instruction (as a system
// message) before the input messages, and the model's stream handed on as
// one agent event, as the adk chat model agent does for an agent without
// tools, but without compiling eino's graph for every run (most of a
// zero-delay request's cost; see BENCHMARKS.md). It cannot run tools. It
// is only the agent: the worker's run step around it builds the window,
// compacts, runs it through the bridge and decides what to persist. It is
// safe for concurrent use.
type directAgent struct {
	name, instruction string
	model             model.BaseChatModel
}

func (a *directAgent) Name(context.Context) string { return a.name }

func (a *directAgent) Description(context.Context) string {
	return "Turnpike conversation agent (shadow replay, direct)"
}

func (a *directAgent) Run(ctx context.Context, in *adk.AgentInput, _ ...adk.AgentRunOption) *adk.AsyncIterator[*adk.AgentEvent] {
	input := in.Messages
	if a.instruction != "" {
		input = append(make([]adk.Message, 0, len(in.Messages)+1), schema.SystemMessage(a.instruction))
		input = append(input, in.Messages...)
	}
	iter, gen := adk.NewAsyncIteratorPair[*adk.AgentEvent]()
	sr, err := a.model.Stream(ctx, input)
	if err != nil {
		gen.Send(&adk.AgentEvent{AgentName: a.name, Err: err})
	} else {
		gen.Send(&adk.AgentEvent{AgentName: a.name, Output: &adk.AgentOutput{MessageOutput: &adk.MessageVariant{
			IsStreaming: true, MessageStream: sr, Role: schema.Assistant}}})
	}
	gen.Close()
	return iter
}
