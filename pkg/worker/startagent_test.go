package worker

import (
	"context"
	"testing"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
)

type nopModel struct{}

func (nopModel) Generate(context.Context, []*schema.Message, ...model.Option) (*schema.Message, error) {
	return schema.AssistantMessage("", nil), nil
}

func (nopModel) Stream(context.Context, []*schema.Message, ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	return schema.StreamReaderFromArray([]*schema.Message{schema.AssistantMessage("", nil)}), nil
}

func (m nopModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return m, nil }

// findAgent reads eino's unexported tree (adk's flowAgent.subAgents): this
// pins eino's layout, so that a version that moves it fails here rather
// than silently starting every run from the root.
func TestFindAgentWalksEinosAgentTree(t *testing.T) {
	ctx := context.Background()
	agent := func(name string) adk.Agent {
		a, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: name, Description: name, Model: nopModel{}})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	mid, err := adk.SetSubAgents(ctx, agent("billing"), []adk.Agent{agent("refunds")})
	if err != nil {
		t.Fatal(err)
	}
	root, err := adk.SetSubAgents(ctx, agent("desk"), []adk.Agent{agent("sales"), mid})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"desk", "sales", "billing", "refunds"} {
		if a := findAgent(ctx, root, name); a == nil || a.Name(ctx) != name {
			t.Errorf("findAgent(%q) = %v", name, a)
		}
	}
	if a := findAgent(ctx, root, "nobody"); a != nil {
		t.Errorf("findAgent of an agent not in the tree = %v, want nil", a.Name(ctx))
	}
	if a := findAgent(ctx, agent("alone"), "billing"); a != nil {
		t.Errorf("findAgent in a lone ChatModelAgent = %v, want nil", a.Name(ctx))
	}
}
