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

// assistantOnly is the default predicate.
var assistantOnly = Role(schema.Assistant)

func orDefault(p Predicate) Predicate {
	if p == nil {
		return assistantOnly
	}
	return p
}
