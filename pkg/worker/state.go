package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// Scope prefixes of state keys (ADK's, with the tenant for ADK's app:).
// A key without one of these prefixes is the conversation's.
const (
	// UserPrefix keys are shared by every conversation of the user.
	UserPrefix = "user:"
	// TenantPrefix keys are shared by every conversation of the tenant
	// (ADK's app: scope: a Turnpike tenant is one application's).
	TenantPrefix = "tenant:"
	// TempPrefix keys live for the run only and are never saved.
	TempPrefix = "temp:"
)

// ErrStateLimit is wrapped by the error of a Set that would pass one of
// the state limits (history.MaxStateKeys, MaxStateKeyBytes,
// MaxStateValueBytes, MaxStateBytes): nothing is changed, nothing is
// truncated.
var ErrStateLimit = errors.New("state limit")

// ErrNoState is returned by the methods of a nil *State: the context is
// not a worker run's (StateFromContext found none).
var ErrNoState = errors.New("no session state in this context: not a worker run")

// State is the session state of one run: what the agent and its tools read
// and write through StateFromContext. Keys are scoped by prefix:
//
//   - no prefix: the conversation's state, restored from its newest turn;
//   - UserPrefix ("user:"): shared by every conversation of the user;
//   - TenantPrefix ("tenant:"): shared by every conversation of the tenant;
//   - TempPrefix ("temp:"): this run only, never saved.
//
// Values are JSON: Set encodes with encoding/json, Get decodes into the
// caller's variable. The changes are committed with the run's turn, in its
// one document (atomically, exactly once); a run that persists nothing
// (discarded, cancelled before content, fenced, aborted, failed) changes
// nothing. The user and tenant scopes are read from the store on their
// first use in the run (one query per scope), so a run that does not use
// them costs nothing more; after the commit their changed keys are rolled
// forward one document per key, and the newest commit (by commit time)
// wins per key.
//
// A State is safe for concurrent use: the tools of one model round run at
// once.
type State struct {
	*stateCore
	// rec, when set, records the changes made through this State: the
	// view a durable run's tool call gets, whose changes are journaled
	// with its result.
	rec *stateRecord
}

// stateCore is a run's state, shared by the views of its tool calls.
type stateCore struct {
	id    events.Identity
	store history.ScopeStore // nil: the store keeps no user and tenant state

	mu     sync.Mutex // guards every field below; held across a scope's load
	conv   scopeState
	user   scopeState
	tenant scopeState
	temp   map[string][]byte
}

// stateRecord is the changes one tool call made, in order, by their full
// keys (prefix included).
type stateRecord struct {
	mu  sync.Mutex
	ops []recordedOp
}

// recordedOp is one recorded change, as a journal step keeps it.
type recordedOp struct {
	Key   string          `json:"k"`
	Value json.RawMessage `json:"v,omitempty"`
	Del   bool            `json:"d,omitempty"`
}

func (r *stateRecord) add(key string, raw []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, recordedOp{Key: key, Value: raw, Del: raw == nil})
}

// encode is the recorded changes for a journal step: nil when none.
func (r *stateRecord) encode() ([]byte, error) {
	if r == nil {
		return nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ops) == 0 {
		return nil, nil
	}
	return json.Marshal(r.ops)
}

// recording is a view of s whose changes are also recorded in a new
// record (s may be nil: then both are nil).
func (s *State) recording() (*State, *stateRecord) {
	if s == nil {
		return nil, nil
	}
	r := &stateRecord{}
	return &State{stateCore: s.stateCore, rec: r}, r
}

// replay applies the changes a journaled step recorded (encode's), as the
// step's first run made them.
func (s *State) replay(data []byte) error {
	if s == nil || len(data) == 0 {
		return nil
	}
	var ops []recordedOp
	if err := json.Unmarshal(data, &ops); err != nil {
		return fmt.Errorf("state of a journaled step: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, op := range ops {
		raw := []byte(op.Value)
		if op.Del {
			raw = nil
		}
		if err := s.setLocked(op.Key, raw); err != nil {
			return fmt.Errorf("state of a journaled step: %w", err)
		}
	}
	return nil
}

// scopeState is one scope's state as the run sees it: what it read, and
// what it changed (a nil value: deleted).
type scopeState struct {
	loaded  bool
	values  map[string][]byte
	changes map[string][]byte
}

// get is key's value as the run sees it.
func (s *scopeState) get(key string) ([]byte, bool) {
	if v, ok := s.changes[key]; ok {
		return v, v != nil
	}
	v, ok := s.values[key]
	return v, ok
}

func (s *scopeState) set(key string, v []byte) {
	if s.changes == nil {
		s.changes = map[string][]byte{}
	}
	s.changes[key] = v
}

// size is the keys and bytes of the scope with key set to v (nil: deleted).
func (s *scopeState) sizeWith(key string, v []byte) (keys, bytes int) {
	count := func(k string, val []byte) {
		if val != nil {
			keys++
			bytes += len(k) + len(val)
		}
	}
	for k, val := range s.values {
		if _, changed := s.changes[k]; !changed && k != key {
			count(k, val)
		}
	}
	for k, val := range s.changes {
		if k != key {
			count(k, val)
		}
	}
	count(key, v)
	return keys, bytes
}

// changeSize is the keys and bytes of the scope's changes with key set to v.
func (s *scopeState) changeSizeWith(key string, v []byte) (keys, bytes int) {
	for k, val := range s.changes {
		if k != key {
			keys++
			bytes += len(k) + len(val)
		}
	}
	return keys + 1, bytes + len(key) + len(v)
}

// ops are the scope's changes, by key.
func (s *scopeState) ops() []history.StateOp {
	if len(s.changes) == 0 {
		return nil
	}
	out := make([]history.StateOp, 0, len(s.changes))
	for k, v := range s.changes {
		out = append(out, history.StateOp{Key: k, Value: v})
	}
	slices.SortFunc(out, func(a, b history.StateOp) int { return strings.Compare(a.Key, b.Key) })
	return out
}

type stateKey struct{}

// StateFromContext is the session state of the worker run ctx belongs to
// (the agent's and its tools' contexts): nil outside a run. It is the one
// way to keep state across turns; eino's session values
// (adk.AddSessionValue) still live for one run only.
func StateFromContext(ctx context.Context) *State {
	s, _ := ctx.Value(stateKey{}).(*State)
	return s
}

func withState(ctx context.Context, s *State) context.Context {
	return context.WithValue(ctx, stateKey{}, s)
}

// newState is the state of a run of conversation id, restored from what
// the conversation's newest turn kept.
func newState(id events.Identity, start history.State, store history.Store) *State {
	s := &stateCore{id: id, conv: scopeState{loaded: true, values: start.Values}}
	s.store, _ = store.(history.ScopeStore)
	return &State{stateCore: s}
}

// scope splits key into its scope and the key within it, loading the
// user or tenant scope on its first use. s.mu must be held.
func (s *State) scope(ctx context.Context, key string, load bool) (name string, sc *scopeState, k string, err error) {
	switch {
	case strings.HasPrefix(key, TempPrefix):
		return "temp", nil, key[len(TempPrefix):], history.ValidateStateKey(key[len(TempPrefix):])
	case strings.HasPrefix(key, UserPrefix):
		name, sc, k = "user", &s.user, key[len(UserPrefix):]
	case strings.HasPrefix(key, TenantPrefix):
		name, sc, k = "tenant", &s.tenant, key[len(TenantPrefix):]
	case strings.HasPrefix(key, "app:"):
		return "", nil, "", fmt.Errorf("%w state key %q: the application scope is %q here", events.ErrInvalid, key, TenantPrefix)
	default:
		name, sc, k = "conversation", &s.conv, key
	}
	if err := history.ValidateStateKey(k); err != nil {
		return "", nil, "", err
	}
	if name == "conversation" || sc.loaded || !load {
		return name, sc, k, nil
	}
	if s.store == nil {
		return "", nil, "", fmt.Errorf("state key %q: the history store keeps no %s state", key, name)
	}
	user := s.id.User
	if name == "tenant" {
		user = ""
	}
	values, err := s.store.ScopeState(ctx, s.id.Tenant, user)
	if err != nil {
		return "", nil, "", fmt.Errorf("read %s state: %w", name, err)
	}
	sc.loaded, sc.values = true, values
	return name, sc, k, nil
}

// Get decodes key's value into v (as json.Unmarshal) and reports whether
// the key is set. The first Get of a user: or tenant: key of the run reads
// that scope from the store (with ctx).
func (s *State) Get(ctx context.Context, key string, v any) (bool, error) {
	if s == nil {
		return false, ErrNoState
	}
	s.mu.Lock()
	raw, ok, err := s.getLocked(ctx, key)
	s.mu.Unlock()
	if err != nil || !ok {
		return false, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("state key %q: %w", key, err)
	}
	return true, nil
}

func (s *State) getLocked(ctx context.Context, key string) ([]byte, bool, error) {
	name, sc, k, err := s.scope(ctx, key, true)
	if err != nil {
		return nil, false, err
	}
	if name == "temp" {
		v, ok := s.temp[k]
		return v, ok, nil
	}
	v, ok := sc.get(k)
	return v, ok, nil
}

// Set sets key to v's JSON encoding. It fails, changing nothing, when v
// cannot be encoded or a limit would be passed (ErrStateLimit). A user: or
// tenant: key is written without reading its scope.
func (s *State) Set(key string, v any) error {
	if s == nil {
		return ErrNoState
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("state key %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.setLocked(key, raw); err != nil {
		return err
	}
	if s.rec != nil {
		s.rec.add(key, raw)
	}
	return nil
}

// Delete deletes key (a delete of a key that is not set is harmless).
func (s *State) Delete(key string) error {
	if s == nil {
		return ErrNoState
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.setLocked(key, nil); err != nil {
		return err
	}
	if s.rec != nil {
		s.rec.add(key, nil)
	}
	return nil
}

func (s *State) setLocked(key string, raw []byte) error {
	name, sc, k, err := s.scope(context.Background(), key, false)
	if err != nil {
		return err
	}
	if len(raw) > history.MaxStateValueBytes {
		return fmt.Errorf("%w: state key %q: value of %d bytes, at most %d", ErrStateLimit, key, len(raw), history.MaxStateValueBytes)
	}
	var keys, bytes int
	switch name {
	case "temp":
		tmp := scopeState{values: s.temp}
		keys, bytes = tmp.sizeWith(k, raw)
	case "conversation":
		keys, bytes = sc.sizeWith(k, raw)
	default:
		// The user's and the tenant's state are not read to be written:
		// the limits bound what one run changes of them.
		keys, bytes = sc.changeSizeWith(k, raw)
	}
	if keys > history.MaxStateKeys {
		return fmt.Errorf("%w: state key %q: %s scope would hold %d keys, at most %d", ErrStateLimit, key, name, keys, history.MaxStateKeys)
	}
	if bytes > history.MaxStateBytes {
		return fmt.Errorf("%w: state key %q: %s scope would hold %d bytes, at most %d", ErrStateLimit, key, name, bytes, history.MaxStateBytes)
	}
	switch {
	case name == "temp" && raw == nil:
		delete(s.temp, k)
	case name == "temp":
		if s.temp == nil {
			s.temp = map[string][]byte{}
		}
		s.temp[k] = raw
	case name == "conversation" && raw == nil:
		if _, ok := sc.values[k]; ok {
			sc.set(k, nil)
		} else {
			delete(sc.changes, k) // never stored: nothing to delete
		}
	default:
		sc.set(k, raw)
	}
	return nil
}

// change is what the run changed, for its turn, with the agent it leaves
// the conversation with and the one it started from.
func (s *State) change(agent, from string) *history.StateChange {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &history.StateChange{Conversation: s.conv.ops(), User: s.user.ops(), Tenant: s.tenant.ops(), Agent: agent, From: from}
}
