package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
)

// agentConfig is the agent configuration file (TURNPIKE_AGENT_CONFIG, JSON):
// the agent or the supervisor and its sub-agents, their instructions,
// models and tools, whose output is streamed and persisted, and the model
// that writes summaries when the window is compacted. See the README's
// "Agents" section for an example.
type agentConfig struct {
	// Models names the models agents may use, besides "default" (the one
	// TURNPIKE_MODEL configures).
	Models map[string]modelSpec `json:"models,omitempty"`
	// Agent is the root agent: the only one, or the supervisor of
	// SubAgents.
	Agent agentSpec `json:"agent"`
	// Stream and Persist name the agents whose assistant text is streamed
	// and persisted; "*" means every agent. Default: every agent (the one
	// default, see bridge.Predicate).
	Stream  []string `json:"stream,omitempty"`
	Persist []string `json:"persist,omitempty"`
	// Summarizer, if set, chooses the model and instruction of context
	// compaction. Default: the root agent's model and defaultSummaryInstruction.
	Summarizer *summarizerSpec `json:"summarizer,omitempty"`
}

// modelSpec configures one named model.
type modelSpec struct {
	// Provider is "echo" or "openai" (any OpenAI-compatible server).
	Provider string `json:"provider"`
	// BaseURL of an OpenAI-compatible API (vLLM, the llama.cpp server,
	// Ollama's /v1). Default: TURNPIKE_OPENAI_BASE_URL.
	BaseURL string `json:"base_url,omitempty"`
	// Model is the model name at that API. Required for openai.
	Model string `json:"model,omitempty"`
	// APIKeyEnv names the environment variable holding the API key.
	// Default: TURNPIKE_OPENAI_API_KEY. Keys never go in the file.
	APIKeyEnv string `json:"api_key_env,omitempty"`
}

// agentSpec configures one agent.
type agentSpec struct {
	// Name names the agent in token and transfer events; sub-agents are
	// addressed by it. 1..64 bytes of [A-Za-z0-9_-], unique.
	Name string `json:"name"`
	// Description tells a supervisor what a sub-agent is for. Required for
	// sub-agents.
	Description string `json:"description,omitempty"`
	// Instruction is the agent's system prompt.
	Instruction string `json:"instruction,omitempty"`
	// Model names an entry of agentConfig.Models, or "default" (the
	// default).
	Model string `json:"model,omitempty"`
	// Tools are built-in tools by name: see builtinTools.
	Tools []string `json:"tools,omitempty"`
	// SubAgents, on the root agent only, makes it a supervisor: it can
	// transfer the conversation to each of them, and each hands it back
	// when done, unless it is Sticky.
	SubAgents []agentSpec `json:"sub_agents,omitempty"`
	// Sticky, on a sub-agent only, builds it without the hand-back: the
	// conversation stays with it when its run ends, and the
	// conversation's next request runs from it (it can still transfer
	// back to the root, which its model decides). Default false.
	Sticky bool `json:"sticky,omitempty"`
	// MaxIterations bounds the model calls of one run of this agent (tool
	// calls loop). Default 20.
	MaxIterations int `json:"max_iterations,omitempty"`
	// Memory, if set, is how a run starting from this agent uses
	// long-term memory (memory_agentconfig.go). Default: no injection.
	Memory *memorySpec `json:"memory,omitempty"`
}

// summarizerSpec configures context compaction's summaries.
type summarizerSpec struct {
	Model       string `json:"model,omitempty"`
	Instruction string `json:"instruction,omitempty"`
}

// defaultModel names the model configured by TURNPIKE_MODEL.
const defaultModel = "default"

// Model providers.
const (
	providerEcho   = "echo"
	providerOpenAI = "openai"
)

// maxAgentConfigBytes bounds the agent configuration file.
const maxAgentConfigBytes = 1 << 20

var agentNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// loadAgentConfig reads and validates the agent configuration file at
// path. Every problem is reported, each with where it is.
func loadAgentConfig(path string) (*agentConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAgentConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("agent config %s: %w", path, err)
	}
	if len(b) > maxAgentConfigBytes {
		return nil, fmt.Errorf("agent config %s: over %d bytes", path, maxAgentConfigBytes)
	}
	c, err := parseAgentConfig(b)
	if err != nil {
		return nil, fmt.Errorf("agent config %s: %w", path, err)
	}
	return c, nil
}

// parseAgentConfig strictly decodes (unknown fields are errors) and
// validates an agent configuration.
func parseAgentConfig(b []byte) (*agentConfig, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var c agentConfig
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if dec.More() {
		return nil, errors.New("decode: trailing data after the object")
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// validate reports every problem of c.
func (c *agentConfig) validate() error {
	var errs []error
	fail := func(where, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{where}, args...)...))
	}
	names := make([]string, 0, len(c.Models))
	for name := range c.Models {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		m, where := c.Models[name], "models."+name
		if name == defaultModel {
			fail(where, "%q is TURNPIKE_MODEL's model and cannot be redefined", defaultModel)
		}
		switch m.Provider {
		case providerEcho:
			if m.BaseURL != "" || m.Model != "" || m.APIKeyEnv != "" {
				fail(where, "the echo provider takes no base_url, model or api_key_env")
			}
		case providerOpenAI:
			if m.Model == "" {
				fail(where, "model is required for provider openai")
			}
			if m.BaseURL != "" {
				if u, err := url.Parse(m.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					fail(where, "base_url %q: want an http or https URL", m.BaseURL)
				}
			}
		default:
			fail(where, "provider %q: want echo or openai", m.Provider)
		}
	}
	hasModel := func(name string) bool {
		_, ok := c.Models[name]
		return name == "" || name == defaultModel || ok
	}
	seen := map[string]bool{}
	var check func(a agentSpec, where string, root bool)
	check = func(a agentSpec, where string, root bool) {
		switch {
		case !agentNameRE.MatchString(a.Name):
			fail(where+".name", "%q: want 1..64 bytes of [A-Za-z0-9_-]", a.Name)
		case seen[a.Name]:
			fail(where+".name", "%q is used by two agents", a.Name)
		}
		seen[a.Name] = true
		if !root && strings.TrimSpace(a.Description) == "" {
			fail(where+".description", "required for a sub-agent: the supervisor chooses by it")
		}
		if !hasModel(a.Model) {
			fail(where+".model", "%q is not defined under models", a.Model)
		}
		tools := map[string]bool{}
		for i, t := range a.Tools {
			if !isBuiltinTool(t) {
				fail(fmt.Sprintf("%s.tools[%d]", where, i), "unknown tool %q (built-in tools: %s)", t, strings.Join(builtinTools(), ", "))
			}
			if tools[t] {
				fail(fmt.Sprintf("%s.tools[%d]", where, i), "tool %q listed twice", t)
			}
			tools[t] = true
		}
		if a.MaxIterations < 0 {
			fail(where+".max_iterations", "%d < 0", a.MaxIterations)
		}
		if a.Memory != nil {
			if err := a.Memory.config().validate(); err != nil {
				fail(where+".memory", "%v", err)
			}
		}
		if root && a.Sticky {
			fail(where+".sticky", "only a sub-agent can be sticky: the root agent is where a conversation starts")
		}
		if !root && len(a.SubAgents) > 0 {
			fail(where+".sub_agents", "only the root agent may have sub-agents")
		}
		for i, s := range a.SubAgents {
			check(s, fmt.Sprintf("%s.sub_agents[%d]", where, i), false)
		}
	}
	check(c.Agent, "agent", true)
	for _, sel := range []struct {
		field string
		list  []string
	}{{"stream", c.Stream}, {"persist", c.Persist}} {
		for i, name := range sel.list {
			if name != "*" && !seen[name] {
				fail(fmt.Sprintf("%s[%d]", sel.field, i), "%q is not an agent of this file", name)
			}
		}
	}
	if s := c.Summarizer; s != nil && !hasModel(s.Model) {
		fail("summarizer.model", "%q is not defined under models", s.Model)
	}
	return errors.Join(errs...)
}

// modelName is an agent's model name, defaultModel when unset.
func modelName(name string) string {
	if name == "" {
		return defaultModel
	}
	return name
}
