package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// The state worker: the test binary run as a worker (TestMain, role
// "state-worker") on pkg/worker's public API with a Go agent whose model
// calls the tool prefs with the user's message, then answers "I knew "
// and the tool's result.
func runStateWorkerProcess(ln net.Listener) int {
	c, err := worker.LoadConfig(nil, os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "state worker:", err)
		return 2
	}
	w, err := worker.New(c, worker.WithListener(ln), worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "assistant", Description: "Remembers.", Model: prefsModel{},
			ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{prefsTool{}}}}})
	}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "state worker:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "state worker stopped:", err)
		return 1
	}
	return 0
}

// prefsTool reports the conversation's "topic" and the user's
// "user:lang" as it found them, then sets those its arguments give as
// "set topic=… lang=…".
type prefsTool struct{}

func (prefsTool) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{Name: "prefs", Desc: "remembers the topic and the language"}, nil
}

func (prefsTool) InvokableRun(ctx context.Context, args string, _ ...tool.Option) (string, error) {
	st := worker.StateFromContext(ctx)
	var topic, lang string
	if _, err := st.Get(ctx, "topic", &topic); err != nil {
		return "", err
	}
	if _, err := st.Get(ctx, worker.UserPrefix+"lang", &lang); err != nil {
		return "", err
	}
	if rest, ok := strings.CutPrefix(args, "set "); ok {
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			if k == "lang" {
				k = worker.UserPrefix + k
			}
			if err := st.Set(k, v); err != nil {
				return "", err
			}
		}
	}
	return fmt.Sprintf("topic=%s lang=%s", topic, lang), nil
}

// prefsModel calls prefs with the user's message, then answers "I knew "
// and its result.
type prefsModel struct{}

func (m prefsModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return m, nil }

func (m prefsModel) Generate(ctx context.Context, in []*schema.Message, opts ...model.Option) (*schema.Message, error) {
	return whole(m.Stream(ctx, in, opts...))
}

func (prefsModel) Stream(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	last := in[len(in)-1]
	if last.Role == schema.Tool {
		a := schema.AssistantMessage("I knew "+last.Content, nil)
		a.ResponseMeta = &schema.ResponseMeta{FinishReason: "stop"}
		return schema.StreamReaderFromArray([]*schema.Message{a}), nil
	}
	c := schema.AssistantMessage("", []schema.ToolCall{{ID: "call-prefs", Type: "function",
		Function: schema.FunctionCall{Name: "prefs", Arguments: last.Content}}})
	c.ResponseMeta = &schema.ResponseMeta{FinishReason: "tool_calls"}
	return schema.StreamReaderFromArray([]*schema.Message{c}), nil
}

// Session state survives a worker SIGKILL between turns: turn 1 sets the
// conversation's "topic" and the user's "user:lang"; the worker is
// killed; a new worker process answers turn 2 of the conversation from
// both, and a second conversation of the user from user:lang only.
func TestSessionStateSurvivesAWorkerSIGKILLBetweenTurns(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a worker process")
	}
	t.Parallel()
	ctx := testenv.Context(t, 2*time.Minute)
	f := newFaultStack(t)
	c := f.ingest(t, "acme", "ann")
	// answer sends content to conversation and returns the answer of the
	// request's last run, once it completed.
	answer := func(conversation, content string) string {
		t.Helper()
		a, err := c.Send(ctx, conversation, content, client.SendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stream := f.streamOf(t, a.RequestID)
		var lastRun string
		var text strings.Builder
		for {
			select {
			case e := <-stream:
				switch e := e.(type) {
				case *events.RunStartedEvent:
					lastRun = e.RunID
					text.Reset()
				case *events.TokenEvent:
					if e.RunID == lastRun {
						text.WriteString(e.Delta)
					}
				case *events.RunCompletedEvent:
					if e.RunID == lastRun {
						if e.Status != events.StatusComplete {
							t.Fatalf("%s %q completed %s, want complete", conversation, content, e.Status)
						}
						return text.String()
					}
				}
			case <-ctx.Done():
				t.Fatalf("%s %q never completed", conversation, content)
			}
		}
	}

	f.spawnAs(0, "state-worker")
	f.waitConsuming(ctx, 1)
	if got := answer("trip", "set topic=trains lang=fr"); got != "I knew topic= lang=" {
		t.Fatalf("turn 1 answered %q, want an empty state", got)
	}
	f.kill(0)
	f.spawnAs(0, "state-worker")
	f.waitConsuming(ctx, 1)
	if got := answer("trip", "what do you know?"); got != "I knew topic=trains lang=fr" {
		t.Errorf("turn 2 after the SIGKILL answered %q, want the topic and the language turn 1 set", got)
	}
	if got := answer("home", "what do you know?"); got != "I knew topic= lang=fr" {
		t.Errorf("another conversation of the user answered %q, want the user's language only", got)
	}
	// History has each answer once.
	p, err := c.History(ctx, "trip", 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range p.Messages {
		if m.Role == "assistant" {
			got = append(got, m.Content)
		}
	}
	if want := []string{"I knew topic= lang=", "I knew topic=trains lang=fr"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("history's answers %q, want %q", got, want)
	}
}
