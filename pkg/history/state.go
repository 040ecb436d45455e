package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Limits of a conversation's state (docs/api.md "Session state"). The
// worker's state API refuses a Set that would pass one (an error, never a
// truncation); Commit refuses a turn whose state passes one (events.ErrInvalid).
const (
	// MaxStateKeys bounds the keys of one scope's state a turn holds (the
	// conversation's snapshot), and the keys of each of the user and
	// tenant scopes one run changes.
	MaxStateKeys = 128
	// MaxStateKeyBytes bounds a key, without its scope prefix.
	MaxStateKeyBytes = events.MaxStateKeyBytes
	// MaxStateValueBytes bounds one value (its JSON encoding).
	MaxStateValueBytes = 16 << 10
	// MaxStateBytes bounds the conversation's state a turn holds (keys and
	// values), and each of the user and tenant changes of one run.
	MaxStateBytes = 64 << 10
)

// StateOp is one change of a state key: Value (JSON) set, or the key
// deleted when Value is nil.
type StateOp struct {
	Key   string
	Value []byte
}

// StateChange is what a run changed of its conversation's state, and the
// agent it left the conversation with. Commit keeps it in the turn's one
// document, so the state commits with the turn: atomically, exactly once,
// and not at all when the run persists nothing.
type StateChange struct {
	// Conversation is applied to the state the previous turn left (the
	// conversation scope): the turn stores the result, the state after it.
	Conversation []StateOp
	// User and Tenant are the run's changes of the user's and the
	// tenant's state. The turn stores them with a commit stamp and the
	// store then rolls each key forward into a document of its own (last
	// writer per key wins, by stamp): see ScopeStore.
	User, Tenant []StateOp
	// Agent is the agent the conversation is left with, "" for the root.
	Agent string
	// From is the agent the run started from, "" for the root: a resume
	// of the turn (when it is interrupted) starts from it again.
	From string
}

// State is a conversation's state as the newest turn left it, which
// Pending.Start reads with the window at no extra command.
type State struct {
	// Values is the conversation scope's state: JSON values by key.
	Values map[string][]byte
	// Agent is the agent the newest turn left the conversation with, ""
	// for the root.
	Agent string
	// From is the agent the newest turn's run started from ("": the root).
	From string
}

// ScopeStore is a Store that keeps the user and the tenant scopes of
// state: one document per key (MemoryStore and MongoStore are). Commit
// rolls a turn's User and Tenant changes forward into them after the turn
// is inserted, with a conditional write per key (applied only over an
// older stamp), and Pending.Start re-applies the newest turn's changes, so
// a crash between the insert and the roll-forward is repaired by the
// conversation's next run.
type ScopeStore interface {
	// ScopeState returns every key of the user's state (user != "") or
	// of the tenant's (user == ""): one query.
	ScopeState(ctx context.Context, tenant, user string) (map[string][]byte, error)
}

// turnState is what a stored turn keeps of state.
type turnState struct {
	values []StateOp // the conversation's state after the turn, by key
	agent  string
	from   string    // the agent the run started from
	user   []StateOp // the run's changes of the user's state
	tenant []StateOp // and of the tenant's
	stamp  string    // orders the user and tenant changes, per key
}

func (st *turnState) scoped() bool { return st != nil && (len(st.user) > 0 || len(st.tenant) > 0) }

// state is st as Start reports it.
func (st *turnState) state() State {
	if st == nil {
		return State{}
	}
	s := State{Agent: st.agent, From: st.from}
	if len(st.values) > 0 {
		s.Values = make(map[string][]byte, len(st.values))
		for _, op := range st.values {
			s.Values[op.Key] = slices.Clone(op.Value)
		}
	}
	return s
}

// stateStamp orders the user and tenant changes of turns: the commit time
// in milliseconds, then the turn's _id (unique).
func stateStamp(at time.Time, key string, n int64) string {
	return fmt.Sprintf("%013d#%s", at.UnixMilli(), turnID(key, n))
}

// nextState is the state turn n keeps: prev's conversation state with c
// applied, c's agent and scope changes, stamped. nil when there is
// nothing to keep.
func nextState(prev *turnState, c *StateChange, at time.Time, key string, n int64) (*turnState, error) {
	var values []StateOp
	if prev != nil {
		values = prev.values
	}
	st := &turnState{}
	switch {
	case c != nil:
		st.agent, st.from = c.Agent, c.From
		st.user, st.tenant = c.User, c.Tenant
	case prev != nil:
		// A turn committed without state (not by a worker's run) changes
		// nothing: the conversation keeps its agent.
		st.agent = prev.agent
	}
	st.values = applyOps(values, c)
	if err := checkScope("conversation", st.values, false); err != nil {
		return nil, err
	}
	if len(st.values) == 0 && st.agent == "" && st.from == "" && !st.scoped() {
		return nil, nil
	}
	if st.scoped() {
		st.stamp = stateStamp(at, key, n)
	}
	return st, nil
}

// applyOps returns values (sorted by key) with c's conversation changes.
func applyOps(values []StateOp, c *StateChange) []StateOp {
	if c == nil || len(c.Conversation) == 0 {
		return values
	}
	m := make(map[string][]byte, len(values)+len(c.Conversation))
	for _, op := range values {
		m[op.Key] = op.Value
	}
	for _, op := range c.Conversation {
		if op.Value == nil {
			delete(m, op.Key)
		} else {
			m[op.Key] = op.Value
		}
	}
	out := make([]StateOp, 0, len(m))
	for k, v := range m {
		out = append(out, StateOp{Key: k, Value: v})
	}
	slices.SortFunc(out, func(a, b StateOp) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// ValidateStateKey checks a key (without its scope prefix).
func ValidateStateKey(key string) error {
	switch {
	case key == "" || len(key) > MaxStateKeyBytes:
		return fmt.Errorf("%w state key: want 1..%d bytes, got %d", events.ErrInvalid, MaxStateKeyBytes, len(key))
	case !utf8.ValidString(key):
		return fmt.Errorf("%w state key: not UTF-8", events.ErrInvalid)
	case strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%w state key %q: a control character", events.ErrInvalid, key)
	}
	return nil
}

// checkScope checks the ops of one scope: keys, values (JSON), count and
// size. With deletes, a nil value is a delete.
func checkScope(scope string, ops []StateOp, deletes bool) error {
	if len(ops) > MaxStateKeys {
		return fmt.Errorf("%w state: %s scope: %d keys, at most %d", events.ErrInvalid, scope, len(ops), MaxStateKeys)
	}
	size := 0
	for _, op := range ops {
		if err := ValidateStateKey(op.Key); err != nil {
			return fmt.Errorf("%s scope: %w", scope, err)
		}
		switch {
		case op.Value == nil && deletes:
		case len(op.Value) > MaxStateValueBytes:
			return fmt.Errorf("%w state: %s key %q: value of %d bytes, at most %d", events.ErrInvalid, scope, op.Key, len(op.Value), MaxStateValueBytes)
		case !json.Valid(op.Value):
			return fmt.Errorf("%w state: %s key %q: value is not JSON", events.ErrInvalid, scope, op.Key)
		}
		size += len(op.Key) + len(op.Value)
	}
	if size > MaxStateBytes {
		return fmt.Errorf("%w state: %s scope: %d bytes, at most %d", events.ErrInvalid, scope, size, MaxStateBytes)
	}
	return nil
}

// validate checks a turn's state change.
func (c *StateChange) validate() error {
	if c == nil {
		return nil
	}
	var errs []error
	for _, s := range []struct {
		name string
		ops  []StateOp
	}{{"conversation", c.Conversation}, {"user", c.User}, {"tenant", c.Tenant}} {
		if err := checkScope(s.name, s.ops, true); err != nil {
			errs = append(errs, err)
		}
		seen := make(map[string]bool, len(s.ops))
		for _, op := range s.ops {
			if seen[op.Key] {
				errs = append(errs, fmt.Errorf("%w state: %s key %q changed twice", events.ErrInvalid, s.name, op.Key))
			}
			seen[op.Key] = true
		}
	}
	if len(c.Agent) > events.MaxAgentBytes || len(c.From) > events.MaxAgentBytes {
		errs = append(errs, fmt.Errorf("%w state: agent over %d bytes", events.ErrInvalid, events.MaxAgentBytes))
	}
	return errors.Join(errs...)
}

// Scope document ids: one document per key, in the state collection.
// Identity parts hold no '#', so a scope's keys are one _id range.
func userScopePrefix(tenant, user string) string { return tenant + "/" + user + "#u#" }
func tenantScopePrefix(tenant string) string     { return tenant + "#t#" }

func scopePrefix(tenant, user string) string {
	if user == "" {
		return tenantScopePrefix(tenant)
	}
	return userScopePrefix(tenant, user)
}

// scopeEnd is the first _id after every id that starts with prefix
// (prefix ends with '#'; '$' follows it).
func scopeEnd(prefix string) string { return prefix[:len(prefix)-1] + "$" }

// validateScope checks ScopeState's arguments.
func validateScope(tenant, user string) error {
	id := events.Identity{Tenant: tenant, User: user, Conversation: "state"}
	if user == "" {
		id.User = "tenant"
	}
	if err := id.Validate(); err != nil {
		return fmt.Errorf("scope state: %w", err)
	}
	return nil
}

// ConversationState is a conversation's session state as its identity
// may see it (GET /v1/conversations/{conversation}/state): the
// conversation's state and active agent as its newest committed turn left
// them, and the user's state. The tenant's state is not part of it: a
// tenant-wide key may be written by one user's run and is not any one
// user's to read (docs/api.md "Session state over the API").
type ConversationState struct {
	// Values is the conversation scope: JSON values by key.
	Values map[string][]byte
	// Agent is the agent the conversation is left with, "" for the root.
	Agent string
	// User is the user scope (shared by the user's conversations): JSON
	// values by key, without the "user:" prefix.
	User map[string][]byte
}

// StateReader is a Store that reads a conversation's session state for
// its identity (MemoryStore and MongoStore are).
type StateReader interface {
	// ConversationState returns the state of the conversation of id:
	// ErrNotFound when it has no committed turn for id (one that exists
	// only for another identity included), as List. The user scope is
	// read by its one range query; the newest turn's own user changes are
	// laid over it per key, where the roll-forward has not written them
	// yet (a crash between a commit and its roll-forward), as the
	// conversation's next run would. A reset applied after the newest
	// turn is read as that turn's next run would read it. On a MongoStore:
	// three queries issued together (the newest turn, the user's scope,
	// the reset marks).
	ConversationState(ctx context.Context, id events.Identity) (ConversationState, error)
}

// conversationState builds a ConversationState from the newest turn's
// state (nil: none kept) and the user scope's documents.
func conversationState(st *turnState, user []scopeDoc) ConversationState {
	s := st.state()
	out := ConversationState{Values: s.Values, Agent: s.Agent, User: make(map[string][]byte, len(user))}
	if out.Values == nil {
		out.Values = map[string][]byte{}
	}
	stamps := make(map[string]string, len(user))
	for _, d := range user {
		stamps[d.Key] = d.Stamp
		if !d.Del {
			out.User[d.Key] = []byte(d.Value)
		}
	}
	if st == nil {
		return out
	}
	for _, op := range st.user {
		if have, ok := stamps[op.Key]; ok && have >= st.stamp {
			continue // a newer commit (or this one) wrote it
		}
		if op.Value == nil {
			delete(out.User, op.Key)
		} else {
			out.User[op.Key] = slices.Clone(op.Value)
		}
	}
	return out
}
