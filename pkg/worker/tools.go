package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/schema"
)

// Built-in tool names.
const (
	toolCurrentTime = "current_time"
	toolAskUser     = "ask_user"
)

// builtinTools lists the tools an agent configuration may name.
func builtinTools() []string {
	names := []string{toolCurrentTime, toolAskUser, toolSearchMemory}
	sort.Strings(names)
	return names
}

func isBuiltinTool(name string) bool {
	return name == toolCurrentTime || name == toolAskUser || name == toolSearchMemory
}

// newTool returns the built-in tool name; now is the clock of current_time.
func newTool(name string, now func() time.Time) (tool.BaseTool, error) {
	switch name {
	case toolCurrentTime:
		return currentTime{now: now}, nil
	case toolAskUser:
		return askUser{}, nil
	case toolSearchMemory:
		return NewSearchMemoryTool(), nil
	}
	return nil, fmt.Errorf("unknown tool %q", name)
}

// currentTime tells the time, in an IANA time zone if asked (default UTC).
type currentTime struct{ now func() time.Time }

func (currentTime) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{
		Name: toolCurrentTime,
		Desc: "Returns the current date and time (RFC 3339), in UTC or in the given IANA time zone.",
		ParamsOneOf: schema.NewParamsOneOfByParams(map[string]*schema.ParameterInfo{
			"timezone": {Type: schema.String, Desc: "IANA time zone such as Europe/Paris; default UTC"},
		}),
	}, nil
}

func (c currentTime) InvokableRun(_ context.Context, args string, _ ...tool.Option) (string, error) {
	var p struct {
		Timezone string `json:"timezone"`
	}
	if strings.TrimSpace(args) != "" {
		if err := json.Unmarshal([]byte(args), &p); err != nil {
			return "", fmt.Errorf("current_time: arguments: %w", err)
		}
	}
	loc := time.UTC
	if p.Timezone != "" {
		l, err := time.LoadLocation(p.Timezone)
		if err != nil {
			// The model asked for something unknown: tell it, as a result
			// it can act on, rather than failing the run.
			return fmt.Sprintf("unknown time zone %q; the time in UTC is %s", p.Timezone, c.now().UTC().Format(time.RFC3339)), nil
		}
		loc = l
	}
	return c.now().In(loc).Format(time.RFC3339), nil
}

// askUser stops the run to ask the user a question (an eino interrupt,
// checkpointed); the run resumes with the user's answer as the tool's
// result (POST …/resume).
type askUser struct{}

func (askUser) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{
		Name: toolAskUser,
		Desc: "Asks the user a question and waits for the answer (use it to clarify, or to get approval before acting). Returns the user's answer.",
		ParamsOneOf: schema.NewParamsOneOfByParams(map[string]*schema.ParameterInfo{
			"question": {Type: schema.String, Desc: "the question to show the user", Required: true},
		}),
	}, nil
}

// errNoQuestion is returned to the model when it calls ask_user without one.
var errNoQuestion = errors.New("ask_user: question is required")

func (askUser) InvokableRun(ctx context.Context, args string, _ ...tool.Option) (string, error) {
	if interrupted, _, _ := tool.GetInterruptState[any](ctx); interrupted {
		if resumed, ok, answer := tool.GetResumeContext[string](ctx); resumed && ok {
			return answer, nil
		}
		// Resumed without an answer for this call: ask again.
	}
	var p struct {
		Question string `json:"question"`
	}
	if err := json.Unmarshal([]byte(args), &p); err != nil || strings.TrimSpace(p.Question) == "" {
		return "", errNoQuestion
	}
	return "", tool.Interrupt(ctx, p.Question)
}
