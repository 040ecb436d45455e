package worker

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/history"
)

// memorySpec is an agent's "memory" object in the agent file
// (docs/api.md "Agent files").
type memorySpec struct {
	// Inject, K and TokenBudget are MemoryConfig's; SearchTimeoutMS is
	// its SearchTimeout in milliseconds.
	Inject          bool `json:"inject,omitempty"`
	K               int  `json:"k,omitempty"`
	TokenBudget     int  `json:"token_budget,omitempty"`
	SearchTimeoutMS int  `json:"search_timeout_ms,omitempty"`
}

func (m *memorySpec) config() MemoryConfig {
	if m == nil {
		return MemoryConfig{}
	}
	return MemoryConfig{Inject: m.Inject, K: m.K, TokenBudget: m.TokenBudget,
		SearchTimeout: time.Duration(m.SearchTimeoutMS) * time.Millisecond}
}

// fileMemory is the memory settings of a run starting from each agent of
// spec, by name (an agent without "memory", or unknown: none).
func fileMemory(spec *agentConfig) func(agent string) MemoryConfig {
	byName := map[string]MemoryConfig{}
	for _, s := range append([]agentSpec{spec.Agent}, spec.Agent.SubAgents...) {
		byName[s.Name] = s.Memory.config()
	}
	return func(agent string) MemoryConfig { return byName[agent] }
}

// ErrNoMemoryService is why a worker (or a shadow replay: pkg/replay)
// refuses an agent file that uses memory, injection or the search_memory
// tool, without a memory service (errors.Is).
var ErrNoMemoryService = errors.New("needs a memory service (Config.Memory or WithMemory)")

// checkMemory refuses an agent file that uses memory (injection or the
// search_memory tool) in a worker without a memory service.
func (a *agents) checkMemory(spec *agentConfig) error {
	if a.memory != nil || spec == nil {
		return nil
	}
	var errs []error
	for _, s := range append([]agentSpec{spec.Agent}, spec.Agent.SubAgents...) {
		if s.Memory != nil && s.Memory.Inject {
			errs = append(errs, fmt.Errorf("agent %s: memory.inject %w", s.Name, ErrNoMemoryService))
		}
		if slices.Contains(s.Tools, toolSearchMemory) {
			errs = append(errs, fmt.Errorf("agent %s: tool %s %w", s.Name, toolSearchMemory, ErrNoMemoryService))
		}
	}
	return errors.Join(errs...)
}

// memorySearch is the history.MemorySearch of Config.Memory ("" too: text).
func memorySearch(s string) (history.MemorySearch, error) {
	switch s {
	case "", "text":
		return history.MemorySearchText, nil
	case "terms":
		return history.MemorySearchTerms, nil
	}
	return 0, fmt.Errorf("TURNPIKE_MEMORY %q: want text, terms or empty", s)
}
