package echo_test

import (
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/cloudwego/eino/adk"
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
