package desk_test

import (
	"context"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/examples/orders/desk"
)

// eino v0.9's ChatModelAgent hands its tools to the model as the
// model.WithTools call option only: the scripted orders model sees the
// lookup tool that way and calls it, and the agent answers with its result.
func TestTheOrdersModelSeesTheAgentsTools(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	lookup, err := desk.NewLookupTool(desk.SampleTable())
	if err != nil {
		t.Fatal(err)
	}
	agent, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{
		Name: desk.OrdersAgent, Description: "orders", Model: desk.OrdersModel(),
		ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{lookup}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var answer string
	events := adk.NewRunner(ctx, adk.RunnerConfig{Agent: agent, EnableStreaming: true}).Run(ctx, []adk.Message{schema.UserMessage("Where is order 42?")})
	for {
		event, ok := events.Next()
		if !ok {
			break
		}
		if event.Err != nil {
			t.Fatalf("event Err: %v", event.Err)
		}
		if out := event.Output; out != nil && out.MessageOutput != nil && out.MessageOutput.Role == schema.Assistant {
			msg, err := out.MessageOutput.GetMessage()
			if err != nil {
				t.Fatal(err)
			}
			answer = msg.Content
		}
	}
	if want := "Order 42 (kettle) is shipped."; answer != want {
		t.Errorf("answer %q, want %q", answer, want)
	}
}

// Tools bound by WithTools count as well; a tool given neither way is
// refused, as a real model would never call it.
func TestTheScriptedModelCallsOnlyToolsItWasGiven(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	in := []*schema.Message{schema.UserMessage("Where is order 42?")}
	lookup := &schema.ToolInfo{Name: desk.LookupTool, Desc: "lookup"}

	bound, err := desk.OrdersModel().WithTools([]*schema.ToolInfo{lookup})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := bound.Generate(ctx, in)
	if err != nil || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != desk.LookupTool {
		t.Errorf("bound by WithTools: %v, %v; want a call of %s", msg, err, desk.LookupTool)
	}
	if _, err := desk.OrdersModel().Stream(ctx, in, model.WithTools([]*schema.ToolInfo{lookup})); err != nil {
		t.Errorf("given as the option: %v", err)
	}
	if msg, err := desk.OrdersModel().Generate(ctx, in); err == nil {
		t.Errorf("given no tool: %v, want an error", msg)
	}
}
