package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// echoing is a scripted model answering "ok" and recording its inputs.
func echoing() *scripted {
	return &scripted{reply: func([]*schema.Message) *schema.Message { return schema.AssistantMessage("ok noted", nil) }}
}

// memoryOfWindow is the injected memory message of a model input ("" if none).
func memoryOfWindow(in []*schema.Message) string {
	for _, m := range in {
		if m.Role == schema.System && strings.HasPrefix(m.Content, worker.MemoryHeader) {
			return m.Content
		}
	}
	return ""
}

// countingMemory counts the Adds reaching a MemoryService, and fails
// them with err when set.
type countingMemory struct {
	history.MemoryService
	mu   sync.Mutex
	adds int
	err  error
}

func (c *countingMemory) Add(ctx context.Context, m history.Memory) (bool, error) {
	c.mu.Lock()
	c.adds++
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return false, err
	}
	return c.MemoryService.Add(ctx, m)
}

func (c *countingMemory) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.adds
}

func runOK(t *testing.T, ctx context.Context, st *worker.Step, store history.Store, id events.Identity, rid, content string) {
	t.Helper()
	res, err := st.Run(ctx, stepRequest(id, rid, content), store, newRecordingSink())
	if err != nil || res.Status != events.StatusComplete {
		t.Fatalf("Run(%s) = %+v, %v", rid, res, err)
	}
}

// A fact told in turn 1 of conversation A is injected into the window of
// a turn of the same user's conversation B, as one system message first;
// another user's (or tenant's) turn asking the same gets nothing.
func TestMemoryRecalledInAnotherConversationOfTheUserOnly(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	m := echoing()
	mem := history.NewInMemoryMemory()
	st := newStep(t, stepConfig(), worker.WithAgent(chatAgent(t, m)), worker.WithMemory(mem, worker.MemoryConfig{Inject: true}))
	store := history.NewMemoryStore()
	alice := events.Identity{Tenant: "acme", User: "alice", Conversation: "a"}
	runOK(t, ctx, st, store, alice, "r1", "My sister lives in Lisbon")
	// Run returns after the memory is added: no wait is needed.
	b := alice
	b.Conversation = "b"
	runOK(t, ctx, st, store, b, "r2", "Where does my sister live?")
	for _, other := range []events.Identity{
		{Tenant: "acme", User: "bob", Conversation: "b"},
		{Tenant: "other", User: "alice", Conversation: "b"},
	} {
		runOK(t, ctx, st, store, other, "r3", "Where does my sister live?")
	}
	seen := m.seen()
	if len(seen) != 4 {
		t.Fatalf("%d model calls, want 4", len(seen))
	}
	if got := memoryOfWindow(seen[0]); got != "" {
		t.Fatalf("turn 1 window has memories: %q", got)
	}
	got := memoryOfWindow(seen[1])
	want := worker.MemoryHeader + "\n- [conversation a, turn 1, "
	if !strings.HasPrefix(got, want) || !strings.Contains(got, "] user: My sister lives in Lisbon | assistant: ok noted") || seen[1][0].Content != got {
		t.Fatalf("conversation b's window %q; want the memory first, %q…", got, want)
	}
	for i, in := range seen[2:] {
		if got := memoryOfWindow(in); got != "" {
			t.Fatalf("another identity's window %d holds %q", i, got)
		}
	}
}

// Injection is opt-in: WithMemory without Inject remembers turns but puts
// nothing into the window.
func TestMemoryInjectionIsOptIn(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	m := echoing()
	mem := history.NewInMemoryMemory()
	st := newStep(t, stepConfig(), worker.WithAgent(chatAgent(t, m)), worker.WithMemory(mem, worker.MemoryConfig{}))
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "a"}
	runOK(t, ctx, st, store, id, "r1", "My sister lives in Lisbon")
	id.Conversation = "b"
	runOK(t, ctx, st, store, id, "r2", "Where does my sister live?")
	if got := memoryOfWindow(m.seen()[1]); got != "" {
		t.Fatalf("window without Inject holds %q", got)
	}
	if hits, err := mem.Search(ctx, "acme", "alice", "Lisbon", 5); err != nil || len(hits) != 1 {
		t.Fatalf("Search = %v, %v; want the remembered turn", hits, err)
	}
}

// A turn is added once: a redelivered request (decided by the store)
// adds nothing, and a failing add neither fails nor changes the turn.
func TestMemoryAddedOnceAfterTheCommitAndNeverFailingTheTurn(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	mem := &countingMemory{MemoryService: history.NewInMemoryMemory()}
	st := newStep(t, stepConfig(), worker.WithAgent(chatAgent(t, echoing())), worker.WithMemory(mem, worker.MemoryConfig{Inject: true}))
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "a"}
	runOK(t, ctx, st, store, id, "r1", "remember the pelican")
	res, err := st.Run(ctx, stepRequest(id, "r1", "remember the pelican"), store, newRecordingSink())
	if err != nil || !res.Committed.Duplicate {
		t.Fatalf("redelivery = %+v, %v; want a duplicate", res, err)
	}
	if n := mem.count(); n != 1 {
		t.Fatalf("%d adds for one turn run twice; want 1", n)
	}
	hits, err := mem.Search(ctx, "acme", "alice", "pelican", 5)
	if err != nil || len(hits) != 1 || hits[0].Turn != 1 || hits[0].RequestID != "r1" || hits[0].Answer != "ok noted" {
		t.Fatalf("Search = %+v, %v; want turn 1 of r1", hits, err)
	}

	mem.mu.Lock()
	mem.err = errors.New("memory store down")
	mem.mu.Unlock()
	res, err = st.Run(ctx, stepRequest(id, "r2", "and the heron"), store, newRecordingSink())
	if err != nil || res.Status != events.StatusComplete || res.Committed.N != 2 {
		t.Fatalf("Run with a failing memory = %+v, %v; want turn 2 complete", res, err)
	}
}

// The token budget keeps the most relevant memories that fit, and K bounds them.
func TestMemoryInjectionKeepsKAndTheBudget(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "a"}
	lines := func(cfg worker.MemoryConfig) int {
		// A memory service of its own each time: the run's turn is
		// remembered too.
		mem := history.NewInMemoryMemory()
		for i, q := range []string{"otter one", "otter two", "otter three", "otter four"} {
			if _, err := mem.Add(ctx, history.Memory{Identity: id, Turn: int64(i + 1), Question: q, Answer: "ok", At: time.Unix(int64(i), 0)}); err != nil {
				t.Fatal(err)
			}
		}
		m := echoing()
		st := newStep(t, stepConfig(), worker.WithAgent(chatAgent(t, m)), worker.WithMemory(mem, cfg))
		b := id
		b.Conversation = "b"
		runOK(t, ctx, st, history.NewMemoryStore(), b, "r", "otter?")
		return strings.Count(memoryOfWindow(m.seen()[0]), "\n- [")
	}
	if n := lines(worker.MemoryConfig{Inject: true}); n != worker.DefaultMemoryK {
		t.Fatalf("default K: %d memories; want %d", n, worker.DefaultMemoryK)
	}
	if n := lines(worker.MemoryConfig{Inject: true, K: 10}); n != 4 {
		t.Fatalf("K 10: %d memories; want 4", n)
	}
	// The header (~100 bytes) and one line (~80) fit in 50 tokens, two do not.
	if n := lines(worker.MemoryConfig{Inject: true, K: 10, TokenBudget: 50}); n != 1 {
		t.Fatalf("budget 50: %d memories; want 1", n)
	}
}

// search_memory finds the run's user's memories only.
func TestSearchMemoryToolIsScopedToTheRunsUser(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	mem := history.NewInMemoryMemory()
	for _, u := range []string{"alice", "bob"} {
		id := events.Identity{Tenant: "acme", User: u, Conversation: "a"}
		if _, err := mem.Add(ctx, history.Memory{Identity: id, Turn: 1, Question: u + "'s locker code is zebra", Answer: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	m := &scripted{reply: func(in []*schema.Message) *schema.Message {
		if last := lastOf(in); last.Role == schema.Tool {
			return schema.AssistantMessage("found: "+last.Content, nil)
		}
		return call("search_memory", `{"query":"locker zebra"}`)
	}}
	st := newStep(t, stepConfig(), worker.WithMemory(mem, worker.MemoryConfig{}),
		worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
			return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "assistant", Description: "test", Model: m,
				ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{worker.NewSearchMemoryTool()}}}})
		}))
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "b"}
	res, err := st.Run(ctx, stepRequest(id, "r1", "what is my locker code?"), history.NewMemoryStore(), newRecordingSink())
	if err != nil || res.Status != events.StatusComplete {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	var out struct {
		Memories []struct {
			Conversation string `json:"conversation"`
			User         string `json:"user"`
		} `json:"memories"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(res.Answer, "found: ")), &out); err != nil {
		t.Fatalf("answer %q: %v", res.Answer, err)
	}
	if len(out.Memories) != 1 || out.Memories[0].User != "alice's locker code is zebra" {
		t.Fatalf("search_memory returned %+v; want alice's memory only", out.Memories)
	}
}

// An agent file's "memory" is checked, and memory used by an agent file
// without a memory service is refused at start.
func TestAgentFileMemoryIsCheckedAndNeedsAService(t *testing.T) {
	t.Parallel()
	if _, err := worker.ParseAgentConfig([]byte(`{"agent":{"name":"a","memory":{"inject":true,"k":51,"token_budget":-1}}}`)); err == nil ||
		!strings.Contains(err.Error(), "agent.memory") {
		t.Fatalf("ParseAgentConfig(k 51, budget -1) = %v; want an agent.memory error", err)
	}
	for _, js := range []string{
		`{"agent":{"name":"a","memory":{"inject":true}}}`,
		`{"agent":{"name":"a","tools":["search_memory"]}}`,
	} {
		path := t.TempDir() + "/agents.json"
		if err := os.WriteFile(path, []byte(js), 0o600); err != nil {
			t.Fatal(err)
		}
		c := stepConfig()
		c.AgentFile = path
		if _, err := worker.NewStep(c, worker.WithLogger(slog.New(slog.DiscardHandler))); err == nil || !strings.Contains(err.Error(), "needs a memory service") {
			t.Fatalf("NewStep(%s) without memory = %v; want refused", js, err)
		}
		if _, err := worker.NewStep(c, worker.WithLogger(slog.New(slog.DiscardHandler)), worker.WithMemory(history.NewInMemoryMemory(), worker.MemoryConfig{})); err != nil {
			t.Fatalf("NewStep(%s) with memory = %v", js, err)
		}
	}
}

// failingFlush is a sink whose Flush fails: the run's events did not all
// reach the stream, so the request fails after its turn committed.
type failingFlush struct{ *recordingSink }

func (failingFlush) Flush() error { return errors.New("stream unreachable") }

// A turn committed by a run that then fails (its events' flush, here) is
// remembered all the same: its redelivery is a duplicate, which
// remembers nothing.
func TestMemoryOfATurnCommittedByARunThatFailedAfterTheCommit(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	mem := &countingMemory{MemoryService: history.NewInMemoryMemory()}
	st := newStep(t, stepConfig(), worker.WithAgent(chatAgent(t, echoing())), worker.WithMemory(mem, worker.MemoryConfig{}))
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "a"}
	if _, err := st.Run(ctx, stepRequest(id, "r1", "remember the pelican"), store, failingFlush{newRecordingSink()}); err == nil {
		t.Fatal("a run whose flush failed succeeded")
	}
	res, err := st.Run(ctx, stepRequest(id, "r1", "remember the pelican"), store, newRecordingSink())
	if err != nil || !res.Committed.Duplicate {
		t.Fatalf("redelivery = %+v, %v; want a duplicate", res, err)
	}
	hits, err := mem.Search(ctx, "acme", "alice", "pelican", 5)
	if err != nil || len(hits) != 1 || hits[0].RequestID != "r1" {
		t.Fatalf("Search = %+v, %v; want the turn of r1", hits, err)
	}
}
