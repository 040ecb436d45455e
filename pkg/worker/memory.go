package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// Defaults of MemoryConfig.
const (
	// DefaultMemoryK is the memories injected when MemoryConfig.K is 0.
	DefaultMemoryK = 3
	// DefaultMemoryTokenBudget bounds the injected message when
	// MemoryConfig.TokenBudget is 0.
	DefaultMemoryTokenBudget = 512
	// DefaultMemorySearchTimeout bounds the injection's search when
	// MemoryConfig.SearchTimeout is 0.
	DefaultMemorySearchTimeout = 2 * time.Second
	// memoryAddTimeout bounds the add of a turn's memory.
	memoryAddTimeout = 10 * time.Second
)

// MemoryHeader starts the system message of injected memories (docs/api.md
// "Memory injection"); one line per memory follows, most relevant first.
const MemoryHeader = "Relevant memories of this user's earlier conversations (most relevant first; they may be outdated):"

// MemoryConfig is how a run uses long-term memory (WithMemory; an agent
// file's "memory" object per agent).
type MemoryConfig struct {
	// Inject, when set, searches the user's memories with the request's
	// message before a run (not a resume) and puts the top K into the
	// window as one system message, first (MemoryHeader). Default off.
	Inject bool
	// K bounds the injected memories. Default DefaultMemoryK; at most
	// history.MaxMemoryResults.
	K int
	// TokenBudget bounds the injected message, estimated at 4 bytes a
	// token: memories that would pass it are left out (the most relevant
	// are kept). Default DefaultMemoryTokenBudget.
	TokenBudget int
	// SearchTimeout bounds the injection's search: a search that fails or
	// has not answered by then is given up, logged and counted
	// (turnpike_worker_memory_total{result="search_failed"} or
	// "search_timeout"), and the run starts without memories. Default
	// DefaultMemorySearchTimeout. (The agent file's "search_timeout_ms".)
	SearchTimeout time.Duration
}

func (c MemoryConfig) withDefaults() MemoryConfig {
	if c.K == 0 {
		c.K = DefaultMemoryK
	}
	if c.TokenBudget == 0 {
		c.TokenBudget = DefaultMemoryTokenBudget
	}
	if c.SearchTimeout == 0 {
		c.SearchTimeout = DefaultMemorySearchTimeout
	}
	return c
}

func (c MemoryConfig) validate() error {
	var errs []error
	if c.K < 0 || c.K > history.MaxMemoryResults {
		errs = append(errs, fmt.Errorf("memory k %d: want 0 … %d", c.K, history.MaxMemoryResults))
	}
	if c.TokenBudget < 0 {
		errs = append(errs, fmt.Errorf("memory token budget %d: must not be negative", c.TokenBudget))
	}
	if c.SearchTimeout < 0 {
		errs = append(errs, fmt.Errorf("memory search timeout %v: must not be negative", c.SearchTimeout))
	}
	return errors.Join(errs...)
}

// WithMemory gives runs long-term memory: every turn a run commits
// (complete or incomplete, not a duplicate) is added to svc after its
// commit, off the token path; tools reach the run user's memories through
// MemoryFromContext (NewSearchMemoryTool); and cfg says whether and how
// memories are injected before a run of a Go agent (an agent file's agents
// each say it in their "memory" object instead). Without it nothing is
// remembered (a Go agent: unless Config.Memory is set). A nil svc means
// the service Config.Memory opens on the worker's MongoDB (a Go agent's
// cfg then applies to it); with nil and no Config.Memory nothing is
// remembered (nor with nil under WithStore, which New refuses with
// Config.Memory set, or in NewStep, which opens no service).
func WithMemory(svc history.MemoryService, cfg MemoryConfig) Option {
	return func(o *options) { o.memory, o.memoryCfg = svc, cfg }
}

// Memory is the long-term memory of one run's user: every search is
// scoped to the run's tenant and user, which cannot be changed. It is safe
// for concurrent use.
type Memory struct {
	svc          history.MemoryService
	tenant, user string
	// log and toolFailed take search_memory's failed searches (nil
	// outside a worker's run: not logged, not counted).
	log        *slog.Logger
	toolFailed func()
}

// runMemory is the Memory of a run of id: search_memory's failures are
// logged with log and counted.
func (s *Step) runMemory(id events.Identity, log *slog.Logger) *Memory {
	return &Memory{svc: s.agents.memory, tenant: id.Tenant, user: id.User, log: log,
		toolFailed: s.metrics.memory.WithLabelValues("tool_search_failed").Inc}
}

// Search returns the user's memories most relevant to query, at most limit
// (history.MemoryService.Search).
func (m *Memory) Search(ctx context.Context, query string, limit int) ([]history.MemoryHit, error) {
	return m.svc.Search(ctx, m.tenant, m.user, query, limit)
}

type memoryKey struct{}

// MemoryFromContext returns the memory of the run ctx belongs to: set in
// every context the worker hands an agent when the worker has WithMemory.
func MemoryFromContext(ctx context.Context) (*Memory, bool) {
	m, ok := ctx.Value(memoryKey{}).(*Memory)
	return m, ok
}

func withMemory(ctx context.Context, m *Memory) context.Context {
	return context.WithValue(ctx, memoryKey{}, m)
}

// toolSearchMemory is the built-in memory tool's name.
const toolSearchMemory = "search_memory"

// searchMemoryLimit is the memories search_memory returns by default.
const searchMemoryLimit = 5

// SearchMemoryFailed is search_memory's result when the memory service
// fails: the model is told, without the error's detail.
const SearchMemoryFailed = `{"error":"memory search failed"}`

// cutQuery is q cut to history.MaxMemoryQueryBytes at a rune boundary:
// a longer query is searched by its start rather than refused.
func cutQuery(q string) string {
	n := history.MaxMemoryQueryBytes
	if len(q) <= n {
		return q
	}
	for n > 0 && !utf8.RuneStart(q[n]) {
		n--
	}
	return q[:n]
}

// NewSearchMemoryTool returns the search_memory tool: it searches the
// run's user's memories (MemoryFromContext) with the model's query (its
// first history.MaxMemoryQueryBytes, cut at a rune boundary) and returns
// the hits as JSON, {"memories":[{"conversation","turn","at","user",
// "assistant"}]}, at most limit (1 … 20, default 5). A failed search is
// not a failed run: the tool returns {"error":"memory search failed"}
// (SearchMemoryFailed) to the model, and the worker logs the error and
// counts it (turnpike_worker_memory_total{result="tool_search_failed"});
// the run goes on. A search ended by the run's own end (its context
// done) returns that error. In a run without memory it returns an error.
// It is safe for concurrent use.
func NewSearchMemoryTool() tool.InvokableTool { return searchMemory{} }

type searchMemory struct{}

func (searchMemory) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{
		Name: toolSearchMemory,
		Desc: "Searches what this user said and was answered in earlier conversations. Returns the most relevant turns.",
		ParamsOneOf: schema.NewParamsOneOfByParams(map[string]*schema.ParameterInfo{
			"query": {Type: schema.String, Desc: "words to search for", Required: true},
			"limit": {Type: schema.Integer, Desc: "at most this many turns, 1 to 20; default 5"},
		}),
	}, nil
}

// memoryJSON is one memory as search_memory returns it.
type memoryJSON struct {
	Conversation string    `json:"conversation"`
	Turn         int64     `json:"turn"`
	At           time.Time `json:"at"`
	User         string    `json:"user,omitempty"`
	Assistant    string    `json:"assistant,omitempty"`
}

func (searchMemory) InvokableRun(ctx context.Context, args string, _ ...tool.Option) (string, error) {
	m, ok := MemoryFromContext(ctx)
	if !ok {
		return "", errors.New("search_memory: this run has no memory")
	}
	var p struct {
		Query string `json:"query"`
		Limit int    `json:"limit"`
	}
	if err := json.Unmarshal([]byte(args), &p); err != nil {
		return "", fmt.Errorf("search_memory: arguments: %w", err)
	}
	if p.Limit <= 0 {
		p.Limit = searchMemoryLimit
	}
	hits, err := m.Search(ctx, cutQuery(p.Query), min(p.Limit, 20))
	if err != nil {
		if ctx.Err() != nil {
			// The run is ending (cancelled, timed out): not the
			// service's failure, and no result to give the model.
			return "", fmt.Errorf("search_memory: %w", err)
		}
		if m.log != nil {
			m.log.Warn("search_memory", slog.Any("error", err))
		}
		if m.toolFailed != nil {
			m.toolFailed()
		}
		return SearchMemoryFailed, nil
	}
	out := struct {
		Memories []memoryJSON `json:"memories"`
	}{Memories: make([]memoryJSON, 0, len(hits))}
	for _, h := range hits {
		out.Memories = append(out.Memories, memoryJSON{h.Identity.Conversation, h.Turn, h.At, h.Question, h.Answer})
	}
	b, err := json.Marshal(out)
	return string(b), err
}

// memoryMessage is the system message of hits within budget tokens (4
// bytes a token), or nil when none fits.
func memoryMessage(hits []history.MemoryHit, budget int) adk.Message {
	var b strings.Builder
	b.WriteString(MemoryHeader)
	n := 0
	for _, h := range hits {
		line := memoryLine(h.Memory)
		if (b.Len()+len(line)+3)/4 > budget {
			break
		}
		b.WriteString(line)
		n++
	}
	if n == 0 {
		return nil
	}
	return schema.SystemMessage(b.String())
}

// memoryLine is one memory of the injected message:
// "\n- [conversation c, turn 3, 2026-01-02T15:04:05Z] user: … | assistant: …",
// its texts on one line.
func memoryLine(m history.Memory) string {
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	return fmt.Sprintf("\n- [conversation %s, turn %d, %s] user: %s | assistant: %s",
		m.Identity.Conversation, m.Turn, m.At.UTC().Format(time.RFC3339), flat(m.Question), flat(m.Answer))
}

// injectMemories prepends to input the memories of the run's user most
// relevant to query (its first history.MaxMemoryQueryBytes), when cfg
// asks for it. A search that fails or passes cfg.SearchTimeout is logged
// and counted, and the run goes on without memories.
func (s *Step) injectMemories(ctx context.Context, id events.Identity, query string, cfg MemoryConfig, input []adk.Message, log *slog.Logger) []adk.Message {
	if s.agents.memory == nil || !cfg.Inject {
		return input
	}
	cfg = cfg.withDefaults()
	sctx, cancel := context.WithTimeoutCause(ctx, cfg.SearchTimeout, errMemorySearchTimeout)
	defer cancel()
	hits, err := s.agents.memory.Search(sctx, id.Tenant, id.User, cutQuery(query), cfg.K)
	if err != nil {
		result := "search_failed"
		if context.Cause(sctx) == errMemorySearchTimeout && ctx.Err() == nil {
			result = "search_timeout"
		}
		log.Warn("memory search", slog.String("result", result), slog.Any("error", err))
		s.metrics.memory.WithLabelValues(result).Inc()
		return input
	}
	msg := memoryMessage(hits, cfg.TokenBudget)
	if msg == nil {
		return input
	}
	s.metrics.memory.WithLabelValues("injected").Inc()
	return append([]adk.Message{msg}, input...)
}

// errMemorySearchTimeout is the cause of an injection's search timeout.
var errMemorySearchTimeout = errors.New("memory search timeout")

// rememberTurn adds the memory of a turn this run committed. A failure is
// logged and counted: the turn stays committed and done.
func (s *Step) rememberTurn(ctx context.Context, m *history.Memory, log *slog.Logger) {
	if s.agents.memory == nil || m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, memoryAddTimeout)
	defer cancel()
	added, err := s.agents.memory.Add(ctx, *m)
	switch {
	case err != nil:
		log.Warn("memory add", slog.Int64("turn", m.Turn), slog.Any("error", err))
		s.metrics.memory.WithLabelValues("add_failed").Inc()
	case added:
		s.metrics.memory.WithLabelValues("added").Inc()
	default:
		s.metrics.memory.WithLabelValues("add_duplicate").Inc()
	}
}

// turnMemory is what is remembered of a committed turn: the user's
// message and the persisted answer (parts joined by a blank line), only of
// a complete or incomplete turn; nil otherwise.
func turnMemory(id events.Identity, requestID, question string, a history.Answer, c history.Committed) *history.Memory {
	if c.Duplicate || c.N == 0 || (c.Status != events.StatusComplete && c.Status != events.StatusIncomplete) {
		return nil
	}
	answer := a.Text
	if len(a.Parts) > 0 {
		texts := make([]string, len(a.Parts))
		for i, p := range a.Parts {
			texts[i] = p.Text
		}
		answer = strings.Join(texts, "\n\n")
	}
	if strings.TrimSpace(question) == "" && strings.TrimSpace(answer) == "" {
		return nil
	}
	return &history.Memory{Identity: id, Turn: c.N, RequestID: requestID, Question: question, Answer: answer, At: a.At}
}
