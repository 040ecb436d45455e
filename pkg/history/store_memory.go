package history

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// MemoryStore is a Store held in memory, with the same semantics as
// MongoStore (numbering, idempotency, paging, millisecond UTC times). It is
// meant for unit tests of other packages. Zero turn times are stamped with
// time.Now.
type MemoryStore struct {
	// mu guards convs and every memConv in it.
	mu     sync.Mutex
	convs  map[string]*memConv // by identity key
	scoped map[string]scopeDoc // user and tenant state, by document _id
}

type memConv struct {
	summary     *Summary
	checkpoints map[string][]byte
	turns       []numbered               // turns[i].n == i+1
	requests    map[string]int64         // request id -> turn number
	outcomes    map[string]events.Status // request id -> outcome without a turn
	cancels     map[int]cancelState      // by partition of the requests topic
	journals    map[string]*Steps        // request id -> its step journal
	resets      resetMarks               // the newest reset of each part of its state
}

// conv returns the conversation of key, creating it. s.mu must be held.
func (s *MemoryStore) conv(key string) *memConv {
	c := s.convs[key]
	if c == nil {
		c = &memConv{requests: make(map[string]int64), outcomes: make(map[string]events.Status),
			cancels: make(map[int]cancelState), checkpoints: make(map[string][]byte),
			journals: make(map[string]*Steps)}
		s.convs[key] = c
	}
	return c
}

// RecordCancel implements Store.
func (s *MemoryStore) RecordCancel(_ context.Context, id events.Identity, c Cancel) error {
	if err := validateCancel(id, c); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	conv := s.conv(id.Key())
	conv.cancels[c.Partition] = conv.cancels[c.Partition].apply(c)
	return nil
}

// Cancelled implements Store.
func (s *MemoryStore) Cancelled(_ context.Context, id events.Identity, requestID string, src Source) (bool, error) {
	if err := id.Validate(); err != nil {
		return false, fmt.Errorf("cancelled: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	conv := s.convs[id.Key()]
	if conv == nil {
		return false, nil
	}
	return conv.cancels[src.Partition].covers(requestID, src), nil
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{convs: make(map[string]*memConv), scoped: make(map[string]scopeDoc)}
}

// Window implements Store.
func (s *MemoryStore) Window(_ context.Context, id events.Identity, n int) ([]Message, error) {
	if err := id.Validate(); err != nil {
		return nil, fmt.Errorf("window: %w", err)
	}
	if n <= 0 {
		return []Message{}, nil
	}
	s.mu.Lock()
	var turns []numbered
	if c := s.convs[id.Key()]; c != nil {
		k := min(windowTurns(n), int64(len(c.turns)))
		turns = append(turns, c.turns[int64(len(c.turns))-k:]...)
	}
	s.mu.Unlock()
	return windowMessages(turns, n), nil
}

// Commit implements Store.
func (s *MemoryStore) Commit(_ context.Context, id events.Identity, t Turn) (Committed, error) {
	if err := id.Validate(); err != nil {
		return Committed{}, fmt.Errorf("commit: %w", err)
	}
	if err := t.Validate(); err != nil {
		return Committed{}, fmt.Errorf("commit: %w", err)
	}
	t = normalize(t, time.Now)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conv(id.Key())
	if n, ok := c.requests[t.RequestID]; ok {
		return Committed{N: n, Status: c.turns[n-1].t.Status, Artifacts: len(c.turns[n-1].t.Artifacts), Duplicate: true}, nil
	}
	if st, ok := c.outcomes[t.RequestID]; ok {
		return Committed{Status: st, Duplicate: true}, nil
	}
	if len(c.turns) > 0 && t.Source.Fences(c.turns[len(c.turns)-1].t.Source) {
		return Committed{}, fmt.Errorf("commit: %w", ErrFenced)
	}
	n, seq, prevV1 := int64(len(c.turns))+1, int64(1), true
	if len(c.turns) > 0 {
		seq, prevV1 = c.turns[len(c.turns)-1].end()+1, c.turns[len(c.turns)-1].v1
	}
	v1 := inV1(t, n, seq, prevV1)
	if v1 {
		t = asV1(t)
	}
	t.KeepV1 = false
	var prev *turnState
	if len(c.turns) > 0 {
		last := c.turns[len(c.turns)-1]
		prev = c.resets.apply(last.st, last.n, last.t.Source)
	}
	st, err := nextState(prev, cloneChange(t.State), t.CommittedAt, id.Key(), n)
	if err != nil {
		return Committed{}, fmt.Errorf("commit: %w", err)
	}
	t.State = nil
	c.turns = append(c.turns, numbered{n: n, seq: seq, t: t, v1: v1, st: st})
	c.requests[t.RequestID] = n
	s.applyScopedLocked(id, st)
	return Committed{N: n, Status: t.Status, Artifacts: len(t.Artifacts)}, nil
}

// Lookup implements Store.
func (s *MemoryStore) Lookup(_ context.Context, id events.Identity, requestID string) (Committed, bool, error) {
	if err := id.Validate(); err != nil {
		return Committed{}, false, fmt.Errorf("lookup: %w", err)
	}
	if err := events.ValidateID("request_id", requestID); err != nil {
		return Committed{}, false, fmt.Errorf("lookup: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.convs[id.Key()]
	if c == nil {
		return Committed{}, false, nil
	}
	if n, ok := c.requests[requestID]; ok {
		return Committed{N: n, Status: c.turns[n-1].t.Status, Artifacts: len(c.turns[n-1].t.Artifacts)}, true, nil
	}
	if st, ok := c.outcomes[requestID]; ok {
		return Committed{Status: st}, true, nil
	}
	return Committed{}, false, nil
}

// RecordOutcome implements Store.
func (s *MemoryStore) RecordOutcome(_ context.Context, id events.Identity, requestID string, status events.Status) (Committed, error) {
	if err := validateOutcome(id, requestID, status); err != nil {
		return Committed{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conv(id.Key())
	if n, ok := c.requests[requestID]; ok {
		return Committed{N: n, Status: c.turns[n-1].t.Status, Artifacts: len(c.turns[n-1].t.Artifacts), Duplicate: true}, nil
	}
	if st, ok := c.outcomes[requestID]; ok {
		return Committed{Status: st, Duplicate: true}, nil
	}
	c.outcomes[requestID] = status
	return Committed{Status: status}, nil
}

// List implements Store.
func (s *MemoryStore) List(_ context.Context, id events.Identity, before int64, limit int) (Page, error) {
	if err := id.Validate(); err != nil {
		return Page{}, fmt.Errorf("list: %w", err)
	}
	s.mu.Lock()
	c := s.convs[id.Key()]
	if c == nil || len(c.turns) == 0 {
		s.mu.Unlock()
		return Page{}, fmt.Errorf("list %s: %w", id.Conversation, ErrNotFound)
	}
	lo, hi := listRange(c.turns[len(c.turns)-1].end(), before, limit)
	var turns []numbered
	if lo <= hi {
		first := sort.Search(len(c.turns), func(i int) bool { return c.turns[i].end() >= lo })
		last := sort.Search(len(c.turns), func(i int) bool { return c.turns[i].seq > hi })
		turns = append(turns, c.turns[first:last]...)
	}
	s.mu.Unlock()
	return Page{Messages: flatten(turns, lo, hi), NextBefore: nextBefore(lo, hi)}, nil
}

// Conversations implements Store.
func (s *MemoryStore) Conversations(_ context.Context, tenant, user string, before ConversationCursor, limit int) (ConversationPage, error) {
	if err := validateOwner(tenant, user, before); err != nil {
		return ConversationPage{}, fmt.Errorf("conversations: %w", err)
	}
	prefix := events.Identity{Tenant: tenant, User: user}.Key() // "tenant/user/"
	var found []Conversation
	s.mu.Lock()
	for key, c := range s.convs {
		name, ok := strings.CutPrefix(key, prefix)
		if !ok || len(c.turns) == 0 {
			continue
		}
		conv := Conversation{Conversation: name, Messages: c.turns[len(c.turns)-1].end()}
		for _, x := range c.turns {
			if x.t.CommittedAt.After(conv.UpdatedAt) {
				conv.UpdatedAt = x.t.CommittedAt
			}
		}
		if before.after(conv) {
			found = append(found, conv)
		}
	}
	s.mu.Unlock()
	return conversationPage(found, clampLimit(limit)), nil
}

// Summary implements Store.
func (s *MemoryStore) Summary(_ context.Context, id events.Identity) (Summary, bool, error) {
	if err := id.Validate(); err != nil {
		return Summary{}, false, fmt.Errorf("summary: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.convs[id.Key()]; c != nil && c.summary != nil {
		return *c.summary, true, nil
	}
	return Summary{}, false, nil
}

// SaveSummary implements Store.
func (s *MemoryStore) SaveSummary(_ context.Context, id events.Identity, sum Summary) error {
	if err := validateSummary(id, sum); err != nil {
		return err
	}
	sum.CreatedAt = storedTime(sum.CreatedAt, time.Now)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conv(id.Key())
	if c.summary == nil || c.summary.Through < sum.Through {
		c.summary = &sum
	}
	return nil
}

// SaveCheckpoint implements Store.
func (s *MemoryStore) SaveCheckpoint(_ context.Context, id events.Identity, name string, data []byte) error {
	if err := validateCheckpoint(id, name, data); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conv(id.Key()).checkpoints[name] = append([]byte{}, data...)
	return nil
}

// LoadCheckpoint implements Store.
func (s *MemoryStore) LoadCheckpoint(_ context.Context, id events.Identity, name string) ([]byte, bool, error) {
	if err := validateCheckpoint(id, name, nil); err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.convs[id.Key()]
	if c == nil {
		return nil, false, nil
	}
	data, ok := c.checkpoints[name]
	if !ok {
		return nil, false, nil
	}
	return append([]byte{}, data...), true, nil
}

var _ ScopeStore = (*MemoryStore)(nil)

// cloneChange is a deep copy of c (the store keeps no caller's slices).
func cloneChange(c *StateChange) *StateChange {
	if c == nil {
		return nil
	}
	cp := func(ops []StateOp) []StateOp {
		if ops == nil {
			return nil
		}
		out := make([]StateOp, len(ops))
		for i, op := range ops {
			out[i] = StateOp{Key: op.Key}
			if op.Value != nil {
				out[i].Value = append([]byte{}, op.Value...)
			}
		}
		return out
	}
	return &StateChange{Conversation: cp(c.Conversation), User: cp(c.User), Tenant: cp(c.Tenant), Agent: c.Agent, From: c.From}
}

// tipState implements stateTip.
func (s *MemoryStore) tipState(_ context.Context, id events.Identity) (*turnState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.convs[id.Key()]
	if c == nil || len(c.turns) == 0 {
		return nil, nil
	}
	last := c.turns[len(c.turns)-1]
	return c.resets.apply(last.st, last.n, last.t.Source), nil
}

// reset implements resetter.
func (s *MemoryStore) reset(_ context.Context, id events.Identity, requestID string, r Reset, n int64, src *Source) (Committed, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conv(id.Key())
	if k, ok := c.requests[requestID]; ok {
		return Committed{N: k, Status: c.turns[k-1].t.Status, Artifacts: len(c.turns[k-1].t.Artifacts), Duplicate: true}, nil
	}
	if st, ok := c.outcomes[requestID]; ok {
		return Committed{Status: st, Duplicate: true}, nil
	}
	if n < 0 {
		n = int64(len(c.turns))
	}
	var m *resetMark
	if src != nil {
		cp := *src
		m = &resetMark{n: n, source: &cp}
	} else {
		m = &resetMark{n: n}
	}
	if r.State && m.after(c.resets.state) {
		c.resets.state = m
	}
	if r.Agent && m.after(c.resets.agent) {
		c.resets.agent = m
	}
	c.outcomes[requestID] = events.StatusComplete
	return Committed{Status: events.StatusComplete}, nil
}

// applyScoped implements scopeApplier.
func (s *MemoryStore) applyScoped(_ context.Context, id events.Identity, st *turnState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applyScopedLocked(id, st)
	return nil
}

// applyScopedLocked applies st's user and tenant changes per key, over an
// older stamp only, as MongoStore's conditional upserts do. s.mu must be
// held.
func (s *MemoryStore) applyScopedLocked(id events.Identity, st *turnState) {
	if !st.scoped() {
		return
	}
	apply := func(prefix, user string, ops []StateOp) {
		for _, op := range ops {
			docID := prefix + op.Key
			if have, ok := s.scoped[docID]; ok && have.Stamp >= st.stamp {
				continue
			}
			s.scoped[docID] = scopeDoc{ID: docID, Tenant: id.Tenant, User: user, Key: op.Key,
				Value: string(op.Value), Del: op.Value == nil, Stamp: st.stamp}
		}
	}
	apply(userScopePrefix(id.Tenant, id.User), id.User, st.user)
	apply(tenantScopePrefix(id.Tenant), "", st.tenant)
}

// ScopeState implements ScopeStore.
func (s *MemoryStore) ScopeState(_ context.Context, tenant, user string) (map[string][]byte, error) {
	if err := validateScope(tenant, user); err != nil {
		return nil, err
	}
	prefix := scopePrefix(tenant, user)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]byte{}
	for docID, d := range s.scoped {
		if strings.HasPrefix(docID, prefix) && !d.Del {
			out[d.Key] = []byte(d.Value)
		}
	}
	return out, nil
}

var _ StateReader = (*MemoryStore)(nil)

// ConversationState implements StateReader.
func (s *MemoryStore) ConversationState(_ context.Context, id events.Identity) (ConversationState, error) {
	if err := id.Validate(); err != nil {
		return ConversationState{}, fmt.Errorf("conversation state: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.convs[id.Key()]
	if c == nil || len(c.turns) == 0 {
		return ConversationState{}, fmt.Errorf("conversation state %s: %w", id.Conversation, ErrNotFound)
	}
	prefix := userScopePrefix(id.Tenant, id.User)
	var user []scopeDoc
	for docID, d := range s.scoped {
		if strings.HasPrefix(docID, prefix) {
			user = append(user, d)
		}
	}
	last := c.turns[len(c.turns)-1]
	return conversationState(c.resets.apply(last.st, last.n, last.t.Source), user), nil
}
