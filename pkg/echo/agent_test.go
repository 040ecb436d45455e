package echo_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/components/tool/utils"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/echo"
)

// agentRun is what one run of a ChatModelAgent showed.
type agentRun struct {
	chunks    []string // streamed chunks, or the one message without streaming
	streamErr error    // what ended a message stream early
	eventErrs []error  // events that carried Err
}

func runAgent(t *testing.T, streaming bool, messages []adk.Message) agentRun {
	t.Helper()
	ctx := testContext(t)
	m := newModel(t, echo.Config{})
	agent, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{
		Name:        "echo",
		Description: "echoes the user",
		Model:       m,
	})
	if err != nil {
		t.Fatalf("NewChatModelAgent: %v", err)
	}
	runner := adk.NewRunner(ctx, adk.RunnerConfig{Agent: agent, EnableStreaming: streaming})

	var run agentRun
	events := runner.Run(ctx, messages)
	for {
		event, ok := events.Next()
		if !ok {
			return run
		}
		if event.AgentName != "echo" {
			t.Errorf("event from agent %q, want echo", event.AgentName)
		}
		if event.Err != nil {
			run.eventErrs = append(run.eventErrs, event.Err)
			continue
		}
		if event.Output == nil || event.Output.MessageOutput == nil {
			continue
		}
		out := event.Output.MessageOutput
		if out.IsStreaming != streaming {
			t.Errorf("event streaming = %v, want %v", out.IsStreaming, streaming)
		}
		if !out.IsStreaming {
			run.chunks = append(run.chunks, out.Message.Content)
			continue
		}
		for {
			chunk, err := out.MessageStream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				run.streamErr = err
				break
			}
			run.chunks = append(run.chunks, chunk.Content)
		}
		out.MessageStream.Close()
	}
}

// errAnyEvent stands for an event Err of any kind in test tables.
var errAnyEvent = errors.New("any error")

func TestChatModelAgent(t *testing.T) {
	t.Parallel()
	history := []adk.Message{
		schema.UserMessage("one"),
		schema.AssistantMessage("echo #1: one", nil),
	}
	tests := []struct {
		name          string
		streaming     bool
		content       string
		want          []string
		wantStreamErr error // what ends the message stream early; nil: io.EOF
		wantEventErr  error // what an event's Err must be; nil: no event has one
	}{
		{
			name:      "A streaming runner shows the echo word by word.",
			streaming: true,
			content:   "hello   world",
			want:      []string{"echo ", "#2: ", "hello ", "world"},
		},
		{
			name:          "A streaming runner shows the tokens before an injected failure, then an event with Err.",
			streaming:     true,
			content:       "a b c [[fail-after:2]]",
			want:          []string{"echo ", "#2: "},
			wantStreamErr: echo.ErrInjectedFailure,
			wantEventErr:  echo.ErrInjectedFailure,
		},
		{
			name:          "A streaming runner reports a failure before any token as an event with Err.",
			streaming:     true,
			content:       "[[fail-after:0]]",
			wantStreamErr: echo.ErrInjectedFailure,
			wantEventErr:  echo.ErrInjectedFailure,
		},
		{
			// One chunk without content, as real models end: eino's agent
			// refuses to concatenate a stream without any chunk.
			name:      "A streaming runner shows no content and no error for an empty reply.",
			streaming: true,
			content:   "[[empty]]",
			want:      []string{""},
		},
		{
			name:         "A streaming runner reports a bad directive as an event with Err.",
			streaming:    true,
			content:      "[[tokens:-1]]",
			wantEventErr: echo.ErrBadDirective,
		},
		{
			name:    "A runner without streaming shows the whole reply at once.",
			content: "hello   world",
			want:    []string{"echo #2: hello world"},
		},
		{
			name:         "A runner without streaming reports an injected failure as an event with Err.",
			content:      "a [[fail-after:1]]",
			wantEventErr: echo.ErrInjectedFailure,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			messages := append(slices.Clone(history), schema.UserMessage(tt.content))
			run := runAgent(t, tt.streaming, messages)

			if !slices.Equal(run.chunks, tt.want) {
				t.Errorf("chunks = %q, want %q", run.chunks, tt.want)
			}
			if (tt.wantStreamErr == nil) != (run.streamErr == nil) || !errors.Is(run.streamErr, tt.wantStreamErr) {
				t.Errorf("stream ended with %v, want %v", run.streamErr, tt.wantStreamErr)
			}
			if (tt.wantEventErr == nil) != (len(run.eventErrs) == 0) {
				t.Fatalf("events with Err = %v, want %v", run.eventErrs, tt.wantEventErr)
			}
			for _, err := range run.eventErrs {
				if tt.wantEventErr != errAnyEvent && !errors.Is(err, tt.wantEventErr) {
					t.Errorf("event Err = %v, want %v", err, tt.wantEventErr)
				}
			}
		})
	}
}

type lookupArgs struct {
	Key string `json:"key"`
}

// lookupTool answers "found <key>" and counts its calls.
func lookupTool(t *testing.T, calls *atomic.Int32) tool.BaseTool {
	t.Helper()
	tl, err := utils.InferTool("lookup", "looks a key up", func(_ context.Context, a lookupArgs) (string, error) {
		calls.Add(1)
		return "found " + a.Key, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// eino v0.9's ChatModelAgent hands its tools to the model as the
// model.WithTools call option and never calls WithTools(): the echo model
// reads the option, so [[call:NAME]] reaches the agent's tool, and the
// answer echoes the tool's result.
func TestChatModelAgentsToolsReachTheModel(t *testing.T) {
	t.Parallel()
	for _, streaming := range []bool{true, false} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			var calls atomic.Int32
			agent, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{
				Name: "echo", Description: "echoes the user", Model: newModel(t, echo.Config{}),
				ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{lookupTool(t, &calls)}}},
			})
			if err != nil {
				t.Fatal(err)
			}
			runner := adk.NewRunner(ctx, adk.RunnerConfig{Agent: agent, EnableStreaming: streaming})
			var answer string
			events := runner.Run(ctx, []adk.Message{schema.UserMessage(`[[call:lookup]] {"key":"42"}`)})
			for {
				event, ok := events.Next()
				if !ok {
					break
				}
				if event.Err != nil {
					t.Fatalf("event Err: %v", event.Err)
				}
				if event.Output == nil || event.Output.MessageOutput == nil || event.Output.MessageOutput.Role != schema.Assistant {
					continue
				}
				msg, err := event.Output.MessageOutput.GetMessage()
				if err != nil {
					t.Fatal(err)
				}
				answer = msg.Content
			}
			if calls.Load() != 1 || answer != "echo #1: found 42" {
				t.Errorf("the tool ran %d times and the answer is %q, want once and %q", calls.Load(), answer, "echo #1: found 42")
			}
		})
	}
}

// [[call:NAME]] calls a tool given either way (bound by WithTools, or as
// the model.WithTools option, which wins), and refuses one given neither way.
func TestCallDirective(t *testing.T) {
	t.Parallel()
	lookup := &schema.ToolInfo{Name: "lookup", Desc: "looks a key up"}
	other := &schema.ToolInfo{Name: "other", Desc: "something else"}
	tests := []struct {
		name      string
		bound     []*schema.ToolInfo
		option    []*schema.ToolInfo
		content   string
		wantCall  string // arguments of the one call of lookup; "" for none
		wantError error
	}{
		{name: "A tool bound by WithTools is called.", bound: []*schema.ToolInfo{lookup}, content: `[[call:lookup]] {"key":"1"}`, wantCall: `{"key":"1"}`},
		{name: "A tool given as the model.WithTools option is called.", option: []*schema.ToolInfo{lookup}, content: `[[call:lookup]] {"key":"1"}`, wantCall: `{"key":"1"}`},
		{name: "The option replaces the bound tools.", bound: []*schema.ToolInfo{lookup}, option: []*schema.ToolInfo{other}, content: "[[call:lookup]]", wantError: echo.ErrBadDirective},
		{name: "Text that is not a JSON object calls the tool with no arguments.", option: []*schema.ToolInfo{lookup}, content: "look [[call:lookup]] it up", wantCall: "{}"},
		{name: "A tool given neither way is refused.", content: "[[call:lookup]]", wantError: echo.ErrBadDirective},
		{name: "A call with tokens contradicts itself.", option: []*schema.ToolInfo{lookup}, content: "[[call:lookup]][[tokens:2]]", wantError: echo.ErrBadDirective},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			var m model.ToolCallingChatModel = newModel(t, echo.Config{})
			if tt.bound != nil {
				var err error
				if m, err = m.WithTools(tt.bound); err != nil {
					t.Fatal(err)
				}
			}
			var opts []model.Option
			if tt.option != nil {
				opts = append(opts, model.WithTools(tt.option))
			}
			for _, streaming := range []bool{false, true} {
				var msg *schema.Message
				var err error
				if streaming {
					var sr *schema.StreamReader[*schema.Message]
					if sr, err = m.Stream(ctx, user(tt.content), opts...); err == nil {
						msg, err = schema.ConcatMessageStream(sr)
					}
				} else {
					msg, err = m.Generate(ctx, user(tt.content), opts...)
				}
				if tt.wantError != nil {
					if !errors.Is(err, tt.wantError) {
						t.Errorf("streaming=%v: err = %v, want %v", streaming, err, tt.wantError)
					}
					continue
				}
				if err != nil {
					t.Fatalf("streaming=%v: %v", streaming, err)
				}
				if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "lookup" || msg.ToolCalls[0].Function.Arguments != tt.wantCall || msg.Content != "" {
					t.Errorf("streaming=%v: reply %+v, want one call of lookup with %s", streaming, msg, tt.wantCall)
				}
			}
		})
	}
}
