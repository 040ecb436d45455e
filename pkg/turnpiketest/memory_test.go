package turnpiketest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/turnpiketest"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// windowModel answers with the memory message of its window (the system
// message starting with worker.MemoryHeader), or "no memories": a model
// that shows what was injected.
type windowModel struct{}

func (windowModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	return windowModel{}, nil
}

func (windowModel) answer(in []*schema.Message) *schema.Message {
	for _, m := range in {
		if m.Role == schema.System && strings.HasPrefix(m.Content, worker.MemoryHeader) {
			return schema.AssistantMessage(m.Content, nil)
		}
	}
	return schema.AssistantMessage("no memories", nil)
}

func (w windowModel) Generate(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	return w.answer(in), nil
}

func (w windowModel) Stream(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	return schema.StreamReaderFromArray([]*schema.Message{w.answer(in)}), nil
}

func newWindowAgent(ctx context.Context, _ worker.Request) (adk.Agent, error) {
	return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "window", Description: "shows its memories", Model: windowModel{}})
}

// Through the whole pipeline, memory served by the stack (Config's
// Memory "terms", on the embedded FerretDB): a fact alice tells in
// conversation a is injected into the window of her turn in conversation
// b, and bob asking the same in a conversation of the same name gets
// nothing. A second turn of a is awaited first: the worker adds a turn's
// memory before it takes the conversation's next request, so once that
// turn completes the fact is searchable (no wait on time).
func TestMemoryInjectedAcrossConversationsOfTheUserOnly(t *testing.T) {
	cfg := turnpiketest.Config()
	cfg.Memory = "terms"
	stack := turnpiketest.StartConfig(t, cfg, worker.WithAgentFactory(newWindowAgent),
		worker.WithMemory(nil, worker.MemoryConfig{Inject: true}))
	alice, bob := stack.Client("alice"), stack.Client("bob")

	fa := alice.Follow("a")
	if r := fa.Run(alice.Send("a", "My sister lives in Lisbon")); r.Status != events.StatusComplete || r.Text != "no memories" {
		t.Fatalf("turn 1 of a: %v; want complete with no memories", r)
	}
	if r := fa.Run(alice.Send("a", "thanks")); r.Status != events.StatusComplete {
		t.Fatalf("turn 2 of a: %v", r)
	}

	fb := alice.Follow("b")
	r := fb.Run(alice.Send("b", "Where does my sister live?"))
	want := worker.MemoryHeader + "\n- [conversation a, turn 1, "
	if r.Status != events.StatusComplete || !strings.HasPrefix(r.Text, want) ||
		!strings.Contains(r.Text, "] user: My sister lives in Lisbon | assistant: no memories") {
		t.Fatalf("alice's turn in b: %v; want her memory of a injected, %q…", r, want)
	}

	fbob := bob.Follow("b")
	if r := fbob.Run(bob.Send("b", "Where does my sister live?")); r.Status != events.StatusComplete || r.Text != "no memories" {
		t.Fatalf("bob's turn in b: %v; want no memories", r)
	}
}
