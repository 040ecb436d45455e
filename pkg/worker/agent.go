package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/adk/prebuilt/supervisor"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// defaultSummaryInstruction is the summarizer's system prompt unless the
// agent configuration sets one.
const defaultSummaryInstruction = "You condense conversations. Write a short, factual summary of the conversation " +
	"you are given (and of the earlier summary, if any): the user's goals, facts and decisions, open questions. " +
	"Write only the summary."

// rootDescription describes an agent whose configuration has none.
const rootDescription = "Turnpike conversation agent"

// agents is the agent a worker runs, with what goes with it: built from
// the agent configuration (buildAgents) or from an agent written in Go
// (goAgents). Its functions are safe for concurrent use.
type agents struct {
	// agent returns the root agent of one run (a first run or a resume),
	// on the run's goroutine. eino v0.9.21 builds a ChatModelAgent's
	// tool-calling graph on every run, writing to the configuration the
	// agent shares between runs (a data race between concurrent runs), so an
	// agent of the configuration with tools is built afresh for each run;
	// one without tools is built once. A Go agent's is its factory's.
	agent func(ctx context.Context, r Request) (adk.Agent, error)
	// stream and persist select whose output the bridge streams and
	// persists (nil: assistant text of any agent).
	stream, persist bridge.Predicate
	// notice maps a model error to the notice streamed (nil: the bridge's
	// default); transient adds to the worker's own classification of
	// model errors (nil: none).
	notice    func(error) string
	transient func(error) bool
	// resume turns the user's answer into the value an interrupt resumes
	// with (nil: the answer as a string).
	resume func(ctx context.Context, r Resume) (any, error)
	// label labels each agent's token usage in metrics.
	label func(agent string) string
	// summarizer writes compaction summaries.
	summarizer         model.BaseChatModel
	summarizerModel    string
	summaryInstruction string
	// memory is WithMemory's service (nil: nothing is remembered), and
	// memoryOf the memory settings of a run starting from an agent.
	memory   history.MemoryService
	memoryOf func(agent string) MemoryConfig
}

// buildAgents builds the agent (or the supervisor and its sub-agents) of
// spec and the selection of what is streamed and persisted. With spec nil
// it builds one agent from cfg's AgentName and Instruction, without
// tools.
func buildAgents(ctx context.Context, cfg Config, spec *agentConfig, d deps) (*agents, error) {
	fromFile := spec != nil
	if !fromFile {
		spec = &agentConfig{Agent: agentSpec{Name: cfg.AgentName, Instruction: cfg.Instruction}}
	} else if err := spec.validate(); err != nil {
		return nil, err
	}
	modelOf := map[string]string{}
	a := &agents{label: func(agent string) string {
		if m, ok := modelOf[agent]; ok {
			return m
		}
		return "unknown"
	}}
	resolve := func(name string) (model.ToolCallingChatModel, string, error) {
		name = modelName(name)
		if name == defaultModel {
			if d.Model == nil {
				return nil, "", errors.New("no model: set Config.Model")
			}
			return d.Model, labelOr(d.ModelName, defaultModel), nil
		}
		m, ok := d.Models[name]
		if !ok || m == nil {
			return nil, "", fmt.Errorf("model %q of the agent configuration was not provided", name)
		}
		label := name
		if ms, ok := spec.Models[name]; ok && ms.Model != "" {
			label = ms.Model
		} else if ok {
			label = ms.Provider
		}
		return m, label, nil
	}
	build := func(s agentSpec, root bool) (adk.Agent, error) {
		m, _, err := resolve(s.Model)
		if err != nil {
			return nil, fmt.Errorf("agent %s: %w", s.Name, err)
		}
		var tools []tool.BaseTool
		for _, name := range s.Tools {
			t, err := newTool(name, d.Now)
			if err != nil {
				return nil, fmt.Errorf("agent %s: %w", s.Name, err)
			}
			tools = append(tools, t)
		}
		desc := s.Description
		if desc == "" && root {
			desc = rootDescription
		}
		// Durable: its steps are journaled and replayed on a re-run
		// (journal.go); ask_user always runs (it reads its resume state).
		ag, err := adk.NewChatModelAgent(ctx, Durable(&adk.ChatModelAgentConfig{
			Name:          s.Name,
			Description:   desc,
			Instruction:   s.Instruction,
			Model:         m,
			ToolsConfig:   adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: tools}},
			MaxIterations: s.MaxIterations,
		}))
		if err != nil {
			return nil, fmt.Errorf("agent %s: %w", s.Name, err)
		}
		return ag, nil
	}
	newAgent := func() (adk.Agent, error) {
		root, err := build(spec.Agent, true)
		if err != nil {
			return nil, err
		}
		if len(spec.Agent.SubAgents) > 0 {
			members := make([]adk.Agent, 0, len(spec.Agent.SubAgents))
			for _, s := range spec.Agent.SubAgents {
				m, err := build(s, false)
				if err != nil {
					return nil, err
				}
				members = append(members, m)
			}
			if !slices.ContainsFunc(spec.Agent.SubAgents, func(s agentSpec) bool { return s.Sticky }) {
				if root, err = supervisor.New(ctx, &supervisor.Config{Supervisor: root, SubAgents: members}); err != nil {
					return nil, fmt.Errorf("supervisor %s: %w", spec.Agent.Name, err)
				}
				return root, nil
			}
			// A sticky sub-agent: the supervisor's tree built by hand, the
			// sticky ones without supervisor.New's hand-back. Its nodes
			// are eino's own (no supervisor container), so findAgent
			// reaches a sticky agent a conversation was left with.
			for i, s := range spec.Agent.SubAgents {
				if !s.Sticky {
					members[i] = adk.AgentWithDeterministicTransferTo(ctx, &adk.DeterministicTransferConfig{
						Agent: members[i], ToAgentNames: []string{spec.Agent.Name}})
				}
			}
			if root, err = adk.SetSubAgents(ctx, root, members); err != nil {
				return nil, fmt.Errorf("supervisor %s: %w", spec.Agent.Name, err)
			}
		}
		return root, nil
	}
	for _, s := range append([]agentSpec{spec.Agent}, spec.Agent.SubAgents...) {
		_, label, err := resolve(s.Model)
		if err != nil {
			return nil, fmt.Errorf("agent %s: %w", s.Name, err)
		}
		modelOf[s.Name] = label // read-only from here on
	}
	shared, err := newAgent() // also checks that everything builds
	if err != nil {
		return nil, err
	}
	a.agent = func(context.Context, Request) (adk.Agent, error) { return shared, nil }
	if hasTools(spec.Agent) {
		a.agent = func(context.Context, Request) (adk.Agent, error) { return newAgent() }
	}
	a.memoryOf = fileMemory(spec)
	if fromFile {
		a.stream = selectAgents(spec.Stream)
		a.persist = selectAgents(spec.Persist)
	}

	sumModel, sumInstruction := spec.Agent.Model, defaultSummaryInstruction
	if s := spec.Summarizer; s != nil {
		if s.Model != "" {
			sumModel = s.Model
		}
		if s.Instruction != "" {
			sumInstruction = s.Instruction
		}
	}
	if d.Summarizer != nil {
		a.summarizer, a.summarizerModel = d.Summarizer, "summarizer"
	} else if a.summarizer, a.summarizerModel, err = resolve(sumModel); err != nil {
		return nil, fmt.Errorf("summarizer: %w", err)
	}
	a.summaryInstruction = sumInstruction
	return a, nil
}

// hasTools reports whether an agent of the tree calls tools (transfers
// between agents are tool calls too).
func hasTools(a agentSpec) bool {
	return len(a.Tools) > 0 || len(a.SubAgents) > 0
}

func labelOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// selectAgents selects the assistant text of the named agents ("*": any);
// none named is nil, the default (see bridge.Predicate): every agent.
func selectAgents(names []string) bridge.Predicate {
	var ps []bridge.Predicate
	for _, n := range names {
		if n == "*" {
			return bridge.Role(schema.Assistant)
		}
		ps = append(ps, bridge.AgentRole(n, schema.Assistant))
	}
	if len(ps) == 0 {
		return nil
	}
	return bridge.Or(ps...)
}

// newRunner is the runner of one run of agent: streaming, checkpointing
// an interrupted run in store.
func newRunner(ctx context.Context, agent adk.Agent, store history.Store) *adk.Runner {
	return adk.NewRunner(ctx, adk.RunnerConfig{Agent: agent, EnableStreaming: true, CheckPointStore: checkpoints{store}})
}

// checkpoints is eino's CheckPointStore on the history store: the key is
// checkpointKey's, so every checkpoint is bound to its conversation.
type checkpoints struct{ store history.Store }

// checkpointKey names the checkpoint of request requestID.
func checkpointKey(id events.Identity, requestID string) string { return id.Key() + "#" + requestID }

func parseCheckpointKey(key string) (events.Identity, string, error) {
	i := strings.LastIndexByte(key, '#')
	if i < 0 {
		return events.Identity{}, "", fmt.Errorf("%w checkpoint key %q", events.ErrInvalid, key)
	}
	id, err := events.ParseKey(key[:i])
	if err != nil {
		return events.Identity{}, "", err
	}
	return id, key[i+1:], nil
}

func (c checkpoints) Get(ctx context.Context, key string) ([]byte, bool, error) {
	id, name, err := parseCheckpointKey(key)
	if err != nil {
		return nil, false, err
	}
	return c.store.LoadCheckpoint(ctx, id, name)
}

func (c checkpoints) Set(ctx context.Context, key string, data []byte) error {
	id, name, err := parseCheckpointKey(key)
	if err != nil {
		return err
	}
	// The run's context may be ending (a cancel); the checkpoint of an
	// interrupt that happened is still worth keeping.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return c.store.SaveCheckpoint(ctx, id, name, data)
}

// errNothingToResume means a resume request does not name the
// conversation's pending interrupt; it completes rejected.
var errNothingToResume = errors.New("nothing to resume")
