package desk

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
)

// Closing is the desk's line after the orders agent answered.
const Closing = "Anything else about your orders?"

// Scripted is a deterministic, offline chat model: Reply decides each
// answer from the input. Its answers are streamed a word at a time. It
// calls only tools it was given, as a real model does: bound by WithTools,
// or as the model.WithTools call option, which is how eino v0.9's
// ChatModelAgent hands them over (it never calls WithTools); a call of a
// tool given neither way is an error.
type Scripted struct {
	Reply func(input []*schema.Message) *schema.Message
	tools []*schema.ToolInfo
}

// WithTools returns a copy of m bound to tools.
func (m Scripted) WithTools(tools []*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	m.tools = slices.Clone(tools)
	return m, nil
}

// reply is the script's answer, checked against the tools of the call: the
// model.WithTools option's, else those bound by WithTools.
func (m Scripted) reply(in []*schema.Message, opts []model.Option) (*schema.Message, error) {
	tools := model.GetCommonOptions(&model.Options{Tools: m.tools}, opts...).Tools
	out := m.Reply(in)
	for _, c := range out.ToolCalls {
		if !slices.ContainsFunc(tools, func(t *schema.ToolInfo) bool { return t.Name == c.Function.Name }) {
			return nil, fmt.Errorf("scripted model: tool %q was not given to the model", c.Function.Name)
		}
	}
	return out, nil
}

// Generate returns the script's answer.
func (m Scripted) Generate(_ context.Context, in []*schema.Message, opts ...model.Option) (*schema.Message, error) {
	return m.reply(in, opts)
}

// Stream streams the script's answer: a tool call whole, text a word at a
// time.
func (m Scripted) Stream(_ context.Context, in []*schema.Message, opts ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	out, err := m.reply(in, opts)
	if err != nil {
		return nil, err
	}
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
