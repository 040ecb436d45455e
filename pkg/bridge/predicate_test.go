package bridge_test

import (
	"testing"

	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
)

// Every rule of predicate.go, over sources that tell the rules apart.
func TestPredicatesFollowTheirDocumentedRules(t *testing.T) {
	t.Parallel()
	var (
		aAssistant = bridge.Source{Agent: "a", Role: schema.Assistant}
		bAssistant = bridge.Source{Agent: "b", Role: schema.Assistant}
		aTool      = bridge.Source{Agent: "a", Role: schema.Tool}
		aUser      = bridge.Source{Agent: "a", Role: schema.User}
		sources    = []bridge.Source{aAssistant, bAssistant, aTool, aUser}
		yes        = func(bridge.Source) bool { return true }
		no         = func(bridge.Source) bool { return false }
	)
	tests := []struct {
		name string
		p    bridge.Predicate
		want []bool // for each of sources, in order
	}{
		{"Role selects its role from any agent.", bridge.Role(schema.Assistant), []bool{true, true, false, false}},
		{"Role selects nothing of another role.", bridge.Role(schema.System), []bool{false, false, false, false}},
		{"AgentRole selects its role from its agent only.", bridge.AgentRole("a", schema.Assistant), []bool{true, false, false, false}},
		{"AgentRole of a tool selects that agent's tool results only.", bridge.AgentRole("a", schema.Tool), []bool{false, false, true, false}},
		{"AgentRole of an unknown agent selects nothing.", bridge.AgentRole("nobody", schema.Assistant), []bool{false, false, false, false}},
		{"And of no predicates is true.", bridge.And(), []bool{true, true, true, true}},
		{"And of one predicate is that predicate.", bridge.And(bridge.Role(schema.Tool)), []bool{false, false, true, false}},
		{"And is true only where every predicate is.", bridge.And(bridge.Role(schema.Assistant), bridge.Not(bridge.AgentRole("b", schema.Assistant))), []bool{true, false, false, false}},
		{"And with a false predicate is false.", bridge.And(yes, no), []bool{false, false, false, false}},
		{"And with a false predicate first is false.", bridge.And(no, yes), []bool{false, false, false, false}},
		{"And of true predicates is true.", bridge.And(yes, yes), []bool{true, true, true, true}},
		{"Or of no predicates is false.", bridge.Or(), []bool{false, false, false, false}},
		{"Or of one predicate is that predicate.", bridge.Or(bridge.Role(schema.User)), []bool{false, false, false, true}},
		{"Or is true where any predicate is.", bridge.Or(bridge.AgentRole("b", schema.Assistant), bridge.Role(schema.Tool)), []bool{false, true, true, false}},
		{"Or with a true predicate last is true.", bridge.Or(no, yes), []bool{true, true, true, true}},
		{"Or of false predicates is false.", bridge.Or(no, no), []bool{false, false, false, false}},
		{"Not inverts a predicate.", bridge.Not(bridge.Role(schema.Assistant)), []bool{false, false, true, true}},
		{"Not of And of none is false.", bridge.Not(bridge.And()), []bool{false, false, false, false}},
		{"Not of Or of none is true.", bridge.Not(bridge.Or()), []bool{true, true, true, true}},
		{"Not twice is the predicate.", bridge.Not(bridge.Not(bridge.AgentRole("a", schema.Assistant))), []bool{true, false, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for i, s := range sources {
				if got := tt.p(s); got != tt.want[i] {
					t.Errorf("predicate(%+v) = %v, want %v", s, got, tt.want[i])
				}
			}
		})
	}
}
