package bridge

import "github.com/cloudwego/eino/schema"

// Source describes the message an event carries, for predicates.
type Source struct {
	// Agent is the name of the agent that produced the message.
	Agent string
	// Role is the message role (assistant, or tool for tool results).
	Role schema.RoleType
}

// Predicate decides whether a message is selected (streamed or persisted).
//
// The default, wherever a predicate is left unset (a nil Config.Stream or
// Config.Persist; pkg/worker's WithStream and WithPersist not given; an
// agent file without "stream" or "persist"), is the assistant text of
// every agent: a supervisor's and its sub-agents' alike. The persisted
// answer keeps each agent's words apart: one part, persisted as one
// assistant message with the agent's name, per contiguous stretch of one
// agent's text (see Result.Parts). Tool calls and tool results are never
// selected.
type Predicate func(Source) bool

// Role selects messages of role r, from any agent.
func Role(r schema.RoleType) Predicate {
	return func(s Source) bool { return s.Role == r }
}

// AgentRole selects messages of role r from the named agent only.
func AgentRole(agent string, r schema.RoleType) Predicate {
	return func(s Source) bool { return s.Agent == agent && s.Role == r }
}

// And selects a message when every predicate does (true for none).
func And(ps ...Predicate) Predicate {
	return func(s Source) bool {
		for _, p := range ps {
			if !p(s) {
				return false
			}
		}
		return true
	}
}

// Or selects a message when any predicate does (false for none).
func Or(ps ...Predicate) Predicate {
	return func(s Source) bool {
		for _, p := range ps {
			if p(s) {
				return true
			}
		}
		return false
	}
}

// Not inverts p.
func Not(p Predicate) Predicate {
	return func(s Source) bool { return !p(s) }
}

// assistantOnly is the default predicate (see Predicate).
var assistantOnly = Role(schema.Assistant)

func orDefault(p Predicate) Predicate {
	if p == nil {
		return assistantOnly
	}
	return p
}
