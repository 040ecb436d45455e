package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/history"
)

// Agent runs one request: the history window (the new user message last)
// in, the agent's events out. *adk.Runner is one.
type Agent interface {
	Run(ctx context.Context, messages []adk.Message, opts ...adk.AgentRunOption) *adk.AsyncIterator[*adk.AgentEvent]
}

// AgentConfig is the agent a shadow replay runs without an agent
// configuration file: the worker's default, one chat model agent with a
// name and an instruction, its model built from service.Shared
// (TURNPIKE_MODEL and friends). With Config.AgentFile, Connect builds the
// file's agents instead (worker.NewFileAgent) and hands them to Deps.Agent.
type AgentConfig struct {
	// Name names the agent in token events. Default "assistant".
	Name string
	// Instruction is the system instruction. Default: none.
	Instruction string
	// Model answers. Required.
	Model model.ToolCallingChatModel
}

// NewAgent builds the agent the worker builds from the same settings: an
// adk chat model agent behind a streaming adk.Runner.
func NewAgent(ctx context.Context, c AgentConfig) (Agent, error) {
	if c.Model == nil {
		return nil, errors.New("agent: Model is required")
	}
	if c.Name == "" {
		c.Name = DefaultAgentName
	}
	agent, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{
		Name:        c.Name,
		Description: "Turnpike conversation agent (shadow replay)",
		Instruction: c.Instruction,
		Model:       c.Model,
	})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return adk.NewRunner(ctx, adk.RunnerConfig{Agent: agent, EnableStreaming: true}), nil
}

// Agent kinds of Config.Agent.
const (
	// AgentADK is the worker's agent: an eino adk chat model agent behind
	// an adk.Runner (NewAgent).
	AgentADK = "adk"
	// AgentDirect streams the model directly (NewDirectAgent): the same
	// input and output for an agent without tools, without eino's per-run
	// graph.
	AgentDirect = "direct"
)

// NewDirectAgent returns an agent that calls the model's Stream with the
// instruction (as a system message) before the window, and hands the
// stream on as one agent event, as the adk chat model agent does for an
// agent without tools, but without compiling eino's graph for every run
// (most of a zero-delay request's cost; see BENCHMARKS.md). It cannot run
// tools: an agent configuration with tools needs NewAgent.
func NewDirectAgent(c AgentConfig) (Agent, error) {
	if c.Model == nil {
		return nil, errors.New("agent: Model is required")
	}
	if c.Name == "" {
		c.Name = DefaultAgentName
	}
	return &directAgent{cfg: c}, nil
}

type directAgent struct{ cfg AgentConfig }

func (a *directAgent) Run(ctx context.Context, messages []adk.Message, _ ...adk.AgentRunOption) *adk.AsyncIterator[*adk.AgentEvent] {
	input := messages
	if a.cfg.Instruction != "" {
		input = append(make([]adk.Message, 0, len(messages)+1), schema.SystemMessage(a.cfg.Instruction))
		input = append(input, messages...)
	}
	iter, gen := adk.NewAsyncIteratorPair[*adk.AgentEvent]()
	sr, err := a.cfg.Model.Stream(ctx, input)
	if err != nil {
		gen.Send(&adk.AgentEvent{AgentName: a.cfg.Name, Err: err})
	} else {
		gen.Send(&adk.AgentEvent{AgentName: a.cfg.Name, Output: &adk.AgentOutput{MessageOutput: &adk.MessageVariant{
			IsStreaming: true, MessageStream: sr, Role: schema.Assistant}}})
	}
	gen.Close()
	return iter
}

// toMessages converts a history window to the model's input, as the
// worker does.
func toMessages(window []history.Message) []adk.Message {
	out := make([]adk.Message, 0, len(window))
	for _, m := range window {
		switch m.Role {
		case history.RoleUser:
			out = append(out, schema.UserMessage(m.Content))
		case history.RoleAssistant:
			out = append(out, schema.AssistantMessage(m.Content, nil))
		}
	}
	return out
}
