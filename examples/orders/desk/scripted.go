package desk

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"

	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
)

// Closing is the desk's line after the orders agent answered.
const Closing = "Anything else about your orders?"

// Scripted is a deterministic, offline chat model: Reply decides each
// answer from the input. Its answers are streamed a word at a time.
type Scripted struct {
	Reply func(input []*schema.Message) *schema.Message
}

// WithTools returns m: the script knows its tools.
func (m Scripted) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return m, nil }

// Generate returns the script's answer.
func (m Scripted) Generate(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	return m.Reply(in), nil
}

// Stream streams the script's answer: a tool call whole, text a word at a
// time.
func (m Scripted) Stream(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	out := m.Reply(in)
	if len(out.ToolCalls) > 0 || out.Content == "" {
		return schema.StreamReaderFromArray([]*schema.Message{out}), nil
	}
	var parts []*schema.Message
	for _, w := range strings.SplitAfter(out.Content, " ") {
		parts = append(parts, schema.AssistantMessage(w, nil))
	}
	return schema.StreamReaderFromArray(parts), nil
}

// forContext starts the messages in which eino tells an agent what other
// agents said and did.
const forContext = "For context:"

// lastUser is the user's latest own message.
func lastUser(in []*schema.Message) string {
	for i := len(in) - 1; i >= 0; i-- {
		if in[i].Role == schema.User && !strings.HasPrefix(in[i].Content, forContext) {
			return in[i].Content
		}
	}
	return ""
}

func call(name string, args any) *schema.Message {
	b, _ := json.Marshal(args)
	return schema.AssistantMessage("", []schema.ToolCall{{ID: "call-" + name, Type: "function",
		Function: schema.FunctionCall{Name: name, Arguments: string(b)}}})
}

// DeskModel hands the user's message to the orders agent, and closes once
// that agent has answered (transferred back).
func DeskModel() Scripted {
	return Scripted{Reply: func(in []*schema.Message) *schema.Message {
		if last := in[len(in)-1]; last.Role == schema.User && !strings.HasPrefix(last.Content, forContext) {
			return call("transfer_to_agent", map[string]string{"agent_name": OrdersAgent})
		}
		return schema.AssistantMessage(Closing, nil)
	}}
}

var orderNumber = regexp.MustCompile(`\d+`)

// OrdersModel calls the cancel tool when the user says "cancel", else the
// lookup tool, with the order number of the user's message; then it
// answers with the tool's result.
func OrdersModel() Scripted {
	return Scripted{Reply: func(in []*schema.Message) *schema.Message {
		if last := in[len(in)-1]; last.Role == schema.Tool {
			return schema.AssistantMessage(last.Content, nil)
		}
		q := lastUser(in)
		id := orderNumber.FindString(q)
		if id == "" {
			return schema.AssistantMessage("Which order? Give me its number.", nil)
		}
		if strings.Contains(strings.ToLower(q), "cancel") {
			return call(CancelTool, orderArgs{ID: id})
		}
		return call(LookupTool, orderArgs{ID: id})
	}}
}
