package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// searchFailing is a MemoryService whose searches fail with err, after
// recording the queries they were given.
type searchFailing struct {
	history.MemoryService
	err error

	mu      sync.Mutex
	queries []string
}

func (s *searchFailing) Search(ctx context.Context, tenant, user, query string, limit int) ([]history.MemoryHit, error) {
	s.mu.Lock()
	s.queries = append(s.queries, query)
	s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	return s.MemoryService.Search(ctx, tenant, user, query, limit)
}

func (s *searchFailing) searched() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.queries...)
}

// blockingSearch is a MemoryService whose searches wait for their
// context to end and return its error; entered is closed by the first. A
// search whose context has no deadline within bound (the injection's
// timeout not applied) is not waited for: unbounded is set and it fails
// at once, so that the test fails instead of hanging.
type blockingSearch struct {
	history.MemoryService
	bound     time.Duration
	once      sync.Once
	entered   chan struct{}
	unbounded atomic.Bool
}

func (b *blockingSearch) Search(ctx context.Context, _, _, _ string, _ int) ([]history.MemoryHit, error) {
	b.once.Do(func() { close(b.entered) })
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > b.bound {
		b.unbounded.Store(true)
		return nil, errors.New("a search without the injection's deadline")
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// toolStep is a step whose agent calls search_memory once with args and
// answers "found: <the tool's result>", logging to the returned buffer and
// counting in reg.
func toolStep(t *testing.T, mem history.MemoryService, args string, reg *prometheus.Registry) (*worker.Step, *lockedBuffer) {
	t.Helper()
	m := &scripted{reply: func(in []*schema.Message) *schema.Message {
		if last := lastOf(in); last.Role == schema.Tool {
			return schema.AssistantMessage("found: "+last.Content, nil)
		}
		return call("search_memory", args)
	}}
	logs := &lockedBuffer{}
	st, err := worker.NewStep(stepConfig(), worker.WithMemory(mem, worker.MemoryConfig{}), worker.WithRegistry(reg),
		worker.WithLogger(slog.New(slog.NewTextHandler(logs, nil))),
		worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
			return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "assistant", Description: "test", Model: m,
				ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{worker.NewSearchMemoryTool()}}}})
		}))
	if err != nil {
		t.Fatal(err)
	}
	return st, logs
}

// A memory service that fails a search_memory call does not fail the run:
// the model gets {"error":"memory search failed"}, without the error's
// detail, and answers; the worker logs the error and counts it.
func TestSearchMemoryToolFailureIsToldToTheModelAndTheRunGoesOn(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	mem := &searchFailing{MemoryService: history.NewInMemoryMemory(), err: errors.New("dial tcp 10.9.8.7:27017: connection refused")}
	reg := prometheus.NewRegistry()
	st, logs := toolStep(t, mem, `{"query":"locker code"}`, reg)
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "b"}
	res, err := st.Run(ctx, stepRequest(id, "r1", "what is my locker code?"), history.NewMemoryStore(), newRecordingSink())
	if err != nil || res.Status != events.StatusComplete {
		t.Fatalf("Run with a failing memory search = %+v, %v; want complete", res, err)
	}
	if want := "found: " + worker.SearchMemoryFailed; res.Answer != want {
		t.Fatalf("answer %q; want %q (the tool's result, no internal detail)", res.Answer, want)
	}
	if n := counterValue(t, reg, "turnpike_worker_memory_total", "result", "tool_search_failed"); n != 1 {
		t.Errorf("tool_search_failed counted %v; want 1", n)
	}
	if l := logs.String(); !strings.Contains(l, "search_memory") || !strings.Contains(l, "connection refused") {
		t.Errorf("the failure is not logged with its error: %q", l)
	}
}

// A model's query over history.MaxMemoryQueryBytes is searched by its
// start, cut at a rune boundary, instead of failing the search: here
// "otters " (7 bytes) then 2-byte runes, so byte 1024 is inside a rune and
// the query searched is 1023 bytes.
func TestSearchMemoryToolCutsALongQueryAtARuneBoundary(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	mem := &searchFailing{MemoryService: history.NewInMemoryMemory()}
	owner := events.Identity{Tenant: "acme", User: "alice", Conversation: "a"}
	if _, err := mem.Add(ctx, history.Memory{Identity: owner, Turn: 1, Question: "I keep otters", Answer: "ok"}); err != nil {
		t.Fatal(err)
	}
	query := "otters " + strings.Repeat("é", 600)
	args, err := json.Marshal(map[string]string{"query": query})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := toolStep(t, mem, string(args), prometheus.NewRegistry())
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "b"}
	res, err := st.Run(ctx, stepRequest(id, "r1", "what do I keep?"), history.NewMemoryStore(), newRecordingSink())
	if err != nil || res.Status != events.StatusComplete {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	got := mem.searched()
	if len(got) != 1 || len(got[0]) != history.MaxMemoryQueryBytes-1 || !utf8.ValidString(got[0]) || !strings.HasPrefix(query, got[0]) {
		t.Fatalf("searched %d queries, first of %d bytes; want one, the query's first %d bytes", len(got), len(strings.Join(got, "")), history.MaxMemoryQueryBytes-1)
	}
	if !strings.Contains(res.Answer, `"user":"I keep otters"`) {
		t.Fatalf("answer %q; want the otters memory", res.Answer)
	}
}

// injectStep is a step of the echo agent with memory mem injected with
// cfg, counting in reg.
func injectStep(t *testing.T, m *scripted, mem history.MemoryService, cfg worker.MemoryConfig, reg *prometheus.Registry) *worker.Step {
	t.Helper()
	return newStep(t, stepConfig(), worker.WithAgent(chatAgent(t, m)), worker.WithMemory(mem, cfg), worker.WithRegistry(reg))
}

// The injection's search is bounded by MemoryConfig.SearchTimeout: a
// service that never answers is given up, counted as search_timeout, and
// the turn runs without memories.
func TestInjectionSearchTimeoutRunsTheTurnWithoutMemories(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	mem := &blockingSearch{MemoryService: history.NewInMemoryMemory(), bound: time.Millisecond, entered: make(chan struct{})}
	m := echoing()
	reg := prometheus.NewRegistry()
	st := injectStep(t, m, mem, worker.MemoryConfig{Inject: true, SearchTimeout: time.Millisecond}, reg)
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "b"}
	runOK(t, ctx, st, history.NewMemoryStore(), id, "r1", "Where does my sister live?")
	select {
	case <-mem.entered:
	default:
		t.Fatal("the injection did not search")
	}
	if mem.unbounded.Load() {
		t.Fatal("the injection searched without its timeout")
	}
	if got := memoryOfWindow(m.seen()[0]); got != "" {
		t.Fatalf("window holds %q; want no memories", got)
	}
	if n := counterValue(t, reg, "turnpike_worker_memory_total", "result", "search_timeout"); n != 1 {
		t.Errorf("search_timeout counted %v; want 1", n)
	}
}

// A failed injection search is counted as search_failed and the turn runs
// without memories.
func TestInjectionSearchFailureRunsTheTurnWithoutMemories(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	mem := &searchFailing{MemoryService: history.NewInMemoryMemory(), err: errors.New("memory store down")}
	m := echoing()
	reg := prometheus.NewRegistry()
	st := injectStep(t, m, mem, worker.MemoryConfig{Inject: true}, reg)
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "b"}
	runOK(t, ctx, st, history.NewMemoryStore(), id, "r1", "Where does my sister live?")
	if got := memoryOfWindow(m.seen()[0]); got != "" {
		t.Fatalf("window holds %q; want no memories", got)
	}
	if n := counterValue(t, reg, "turnpike_worker_memory_total", "result", "search_failed"); n != 1 {
		t.Errorf("search_failed counted %v; want 1", n)
	}
}

// A request message over history.MaxMemoryQueryBytes still gets its
// memories: the injection searches with the message's start.
func TestInjectionOfALongMessageSearchesItsStart(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	mem := history.NewInMemoryMemory()
	owner := events.Identity{Tenant: "acme", User: "alice", Conversation: "a"}
	if _, err := mem.Add(ctx, history.Memory{Identity: owner, Turn: 1, Question: "I keep otters", Answer: "ok"}); err != nil {
		t.Fatal(err)
	}
	m := echoing()
	reg := prometheus.NewRegistry()
	st := injectStep(t, m, mem, worker.MemoryConfig{Inject: true}, reg)
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "b"}
	runOK(t, ctx, st, history.NewMemoryStore(), id, "r1", "otters "+strings.Repeat("é", 600))
	if got := memoryOfWindow(m.seen()[0]); !strings.Contains(got, "user: I keep otters") {
		t.Fatalf("window's memories %q; want the otters memory", got)
	}
	if n := counterValue(t, reg, "turnpike_worker_memory_total", "result", "search_failed"); n != 0 {
		t.Errorf("search_failed counted %v; want 0", n)
	}
}

// Config.Memory opens its service on the worker's MongoDB, which
// WithStore replaces: New refuses the pair unless WithMemory passes a
// service, rather than run with memory silently off.
func TestConfigMemoryWithWithStoreNeedsAService(t *testing.T) {
	t.Parallel()
	c := worker.DefaultConfig()
	c.Brokers, c.Memory = []string{"127.0.0.1:9"}, "terms"
	agent := worker.WithAgent(chatAgent(t, echoing()))
	if _, err := worker.New(c, worker.WithStore(history.NewMemoryStore()), agent); err == nil || !strings.Contains(err.Error(), "WithStore replaces") {
		t.Fatalf("New(Memory terms, WithStore) = %v; want refused", err)
	}
	if _, err := worker.New(c, worker.WithStore(history.NewMemoryStore()), agent, worker.WithMemory(nil, worker.MemoryConfig{Inject: true})); err == nil {
		t.Fatal("New(Memory terms, WithStore, WithMemory(nil)) accepted; its memory would be off")
	}
	if _, err := worker.New(c, worker.WithStore(history.NewMemoryStore()), agent, worker.WithMemory(history.NewInMemoryMemory(), worker.MemoryConfig{})); err != nil {
		t.Fatalf("New(Memory terms, WithStore, WithMemory(svc)) = %v", err)
	}
}
