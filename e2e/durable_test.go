package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/adk/prebuilt/supervisor"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// The durable worker: the test binary run as a worker (TestMain, role
// "durable-worker") on pkg/worker's public API with a Go agent of its own,
// a ChatModelAgent made durable with worker.Durable, alone or as the
// sub-agent of a supervisor (durable too). Its scripted model asks for
// reserve in round 1 and for charge in round 2, and answers with both
// results in round 3; the supervisor's model transfers to it, then answers
// once it has answered. The models and the tools append one line per real
// execution to a ledger file (their own store, outside Turnpike's).
const (
	// envLedger is the ledger's path.
	envLedger = "TURNPIKE_TEST_DURABLE_LEDGER"
	// envBlockCharge, set to 1, makes charge block forever once it has
	// written its line (the first worker's only).
	envBlockCharge = "TURNPIKE_TEST_DURABLE_BLOCK_CHARGE"
	// envSupervisor, set to 1, puts the agent under a supervisor.
	envSupervisor = "TURNPIKE_TEST_DURABLE_SUPERVISOR"
	// durableAgent is the agent's name (journal keys carry it).
	durableAgent = "assistant"
	// durableAnswer is round 3's answer: the tools' results.
	durableAnswer = "done: reserved, charged"
	// deskAgent is the supervisor's name, deskAnswer its answer.
	deskAgent, deskAnswer = "desk", "It is on its way."
)

// runDurableWorkerProcess runs pkg/worker configured from the environment,
// as runWorkerProcess does, with the durable Go agent.
func runDurableWorkerProcess(ln net.Listener) int {
	c, err := worker.LoadConfig(nil, os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "durable worker:", err)
		return 2
	}
	l := &ledger{path: os.Getenv(envLedger)}
	block := os.Getenv(envBlockCharge) == "1"
	withDesk := os.Getenv(envSupervisor) == "1"
	w, err := worker.New(c, worker.WithListener(ln), worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		agent, err := adk.NewChatModelAgent(ctx, worker.Durable(&adk.ChatModelAgentConfig{
			Name: durableAgent, Description: "Reserves and charges orders.", Model: scriptedModel{l: l},
			ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{
				ledgerTool{l: l, name: "reserve"},
				ledgerTool{l: l, name: "charge", block: block},
			}}},
		}))
		if err != nil || !withDesk {
			return agent, err
		}
		desk, err := adk.NewChatModelAgent(ctx, worker.Durable(&adk.ChatModelAgentConfig{
			Name: deskAgent, Description: "Routes.", Instruction: "Route.", Model: deskModel{l: l},
		}))
		if err != nil {
			return nil, err
		}
		return supervisor.New(ctx, &supervisor.Config{Supervisor: desk, SubAgents: []adk.Agent{agent}})
	}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "durable worker:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "durable worker stopped:", err)
		return 1
	}
	return 0
}

// ledger is a file of lines, each appended and synced before the
// execution it records goes on: a line survives a SIGKILL right after it.
type ledger struct {
	path string
	mu   sync.Mutex
}

func (l *ledger) add(line string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readLedger returns the ledger's lines (none before the first).
func readLedger(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// scriptedModel's round is one more than the number of its tools'
// results in its input: 1 asks for reserve, 2 for charge, 3 answers. Each
// call that generates writes "assistant-<round>" to the ledger first.
type scriptedModel struct{ l *ledger }

func (m scriptedModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	return m, nil
}

func (m scriptedModel) Generate(ctx context.Context, in []*schema.Message, opts ...model.Option) (*schema.Message, error) {
	return whole(m.Stream(ctx, in, opts...))
}

// whole reads a Stream's answer whole.
func whole(s *schema.StreamReader[*schema.Message], err error) (*schema.Message, error) {
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var chunks []*schema.Message
	for {
		c, err := s.Recv()
		if err == io.EOF {
			return schema.ConcatMessages(chunks)
		}
		if err != nil {
			return nil, err
		}
		chunks = append(chunks, c)
	}
}

func (m scriptedModel) Stream(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	var results []string
	for _, msg := range in {
		if msg.Role == schema.Tool && (msg.ToolCallID == "call-reserve" || msg.ToolCallID == "call-charge") {
			results = append(results, msg.Content)
		}
	}
	round := len(results) + 1
	if err := m.l.add(fmt.Sprintf("%s-%d", durableAgent, round)); err != nil {
		return nil, err
	}
	// The rounds that ask for a tool carry no text: what is streamed is
	// then exactly the answer that is persisted.
	call := func(name string) *schema.StreamReader[*schema.Message] {
		c := schema.AssistantMessage("", []schema.ToolCall{{ID: "call-" + name, Type: "function",
			Function: schema.FunctionCall{Name: name, Arguments: `{"order":"o-1"}`}}})
		c.ResponseMeta = &schema.ResponseMeta{FinishReason: "tool_calls"}
		return schema.StreamReaderFromArray([]*schema.Message{c})
	}
	switch round {
	case 1:
		return call("reserve"), nil
	case 2:
		return call("charge"), nil
	}
	last := schema.AssistantMessage(strings.Join(results, ", "), nil)
	last.ResponseMeta = &schema.ResponseMeta{FinishReason: "stop"}
	return schema.StreamReaderFromArray([]*schema.Message{schema.AssistantMessage("done: ", nil), last}), nil
}

// deskModel, the supervisor's, transfers to the assistant (round 1), and
// answers once the assistant's answer is in its input (round 2); it writes
// "desk-<round>" to the ledger first.
type deskModel struct{ l *ledger }

func (m deskModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	return m, nil
}

func (m deskModel) Generate(ctx context.Context, in []*schema.Message, opts ...model.Option) (*schema.Message, error) {
	return whole(m.Stream(ctx, in, opts...))
}

func (m deskModel) Stream(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	answered := slices.ContainsFunc(in, func(msg *schema.Message) bool { return strings.Contains(msg.Content, durableAnswer) })
	round := 1
	if answered {
		round = 2
	}
	if err := m.l.add(fmt.Sprintf("%s-%d", deskAgent, round)); err != nil {
		return nil, err
	}
	if answered {
		last := schema.AssistantMessage(deskAnswer, nil)
		last.ResponseMeta = &schema.ResponseMeta{FinishReason: "stop"}
		return schema.StreamReaderFromArray([]*schema.Message{last}), nil
	}
	c := schema.AssistantMessage("", []schema.ToolCall{{ID: "call-transfer", Type: "function",
		Function: schema.FunctionCall{Name: adk.TransferToAgentToolName, Arguments: `{"agent_name":"` + durableAgent + `"}`}}})
	c.ResponseMeta = &schema.ResponseMeta{FinishReason: "tool_calls"}
	return schema.StreamReaderFromArray([]*schema.Message{c}), nil
}

// ledgerTool writes "<name> <step key> <attempt>" to the ledger as its
// side effect, then returns "<name>d"; with block, it never returns.
type ledgerTool struct {
	l     *ledger
	name  string
	block bool
}

func (t ledgerTool) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{Name: t.name, Desc: t.name + " the order"}, nil
}

func (t ledgerTool) InvokableRun(ctx context.Context, _ string, _ ...tool.Option) (string, error) {
	key, attempt := "-", 0
	if s, ok := worker.ToolStepFromContext(ctx); ok {
		key, attempt = s.Key, s.Attempt
	}
	if err := t.l.add(fmt.Sprintf("%s %s %d", t.name, key, attempt)); err != nil {
		return "", err
	}
	if t.block {
		select {} // until the test kills the process
	}
	return t.name + "d", nil
}

// A worker is killed with SIGKILL between two tool calls of a durable
// run: after reserve's result was recorded, while charge runs. The next
// worker replays the model outputs and reserve's result from the journal
// (a supervisor's transfer runs again: it always does), runs charge again
// (the window that stays at least once: it was killed after its side effect
// began, before its result was recorded) under the same key with the next
// attempt, and answers; the stream's last run is whole, and history has
// the answer once.
func TestAWorkerKilledBetweenTwoToolCallsOfADurableRunDoesNotRunTheFirstAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a worker process")
	}
	rows := []struct {
		name       string
		supervisor bool
	}{
		{"A durable ChatModelAgent with the two tools.", false},
		{"A durable supervisor and its durable sub-agent with the two tools.", true},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 2*time.Minute)
			f := newFaultStack(t)
			path := t.TempDir() + "/ledger"
			f.env = append(f.env, envLedger+"="+path)
			if row.supervisor {
				f.env = append(f.env, envSupervisor+"=1")
			}
			c := f.ingest(t, "acme", "ann")
			f.spawnAs(0, "durable-worker", envBlockCharge+"=1")
			f.waitConsuming(ctx, 1)
			a, err := c.Send(ctx, "orders", "reserve and charge order o-1", client.SendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			stream := f.streamOf(t, a.RequestID)
			poll(t, ctx, "charge started in the first worker", func() (bool, string) {
				lines := readLedger(t, path)
				return slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "charge ") }),
					fmt.Sprintf("ledger %q", lines)
			})
			f.kill(0)
			f.spawnAs(0, "durable-worker")

			// The stream: read to the run.completed of the last run started.
			var lastRun string
			var tokens strings.Builder
			var final *events.RunCompletedEvent
			for final == nil {
				select {
				case e := <-stream:
					switch e := e.(type) {
					case *events.RunStartedEvent:
						lastRun = e.RunID
						tokens.Reset()
					case *events.TokenEvent:
						if e.RunID == lastRun {
							tokens.WriteString(e.Delta)
						}
					case *events.RunCompletedEvent:
						if e.RunID == lastRun {
							final = e
						}
					}
				case <-ctx.Done():
					t.Fatalf("the request's last run (%q) never completed; ledger %q", lastRun, readLedger(t, path))
				}
			}

			prefix := a.RequestID + "/t/" + durableAgent + "/"
			want := []string{
				"assistant-1",
				"reserve " + prefix + "1/call-reserve 1",
				"assistant-2",
				"charge " + prefix + "2/call-charge 1",
				"charge " + prefix + "2/call-charge 2",
				"assistant-3",
			}
			answers := []string{fmt.Sprintf("%s %s complete %q", a.RequestID, durableAgent, durableAnswer)}
			if row.supervisor {
				want = append(append([]string{"desk-1"}, want...), "desk-2")
				answers = append(answers, fmt.Sprintf("%s %s complete %q", a.RequestID, deskAgent, deskAnswer))
			}
			if got := readLedger(t, path); !slices.Equal(got, want) {
				t.Errorf("executions (model rounds; tool, key, attempt):\n got %q\nwant %q", got, want)
			}
			if final.Status != events.StatusComplete {
				t.Errorf("the last run %s completed %s, want complete", lastRun, final.Status)
			}
			p, err := c.History(ctx, "orders", 10, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			var persisted strings.Builder
			for _, m := range p.Messages {
				if m.Role == "assistant" {
					got = append(got, fmt.Sprintf("%s %s %s %q", m.RequestID, m.Agent, m.Status, m.Content))
					persisted.WriteString(m.Content)
				}
			}
			if !slices.Equal(got, answers) {
				t.Errorf("history's answers %q, want %q", got, answers)
			}
			if tokens.String() != persisted.String() {
				t.Errorf("the last run %s streamed %q, persisted %q", lastRun, tokens.String(), persisted.String())
			}
		})
	}
}
