package history

import (
	"context"
	"sync"
)

// InMemoryMemory is a MemoryService held in memory, for tests and the
// in-process stack: it ranks as MongoMemory's term scan does (MemoryTerms,
// termScore). The zero value is not usable: call NewInMemoryMemory. It is
// safe for concurrent use.
type InMemoryMemory struct {
	mu   sync.Mutex
	mems map[string]Memory // by memoryKey
}

var _ MemoryService = (*InMemoryMemory)(nil)

// NewInMemoryMemory returns an empty InMemoryMemory.
func NewInMemoryMemory() *InMemoryMemory {
	return &InMemoryMemory{mems: make(map[string]Memory)}
}

// Add implements MemoryService.
func (s *InMemoryMemory) Add(_ context.Context, m Memory) (bool, error) {
	m, err := prepareMemory(m)
	if err != nil {
		return false, err
	}
	k := memoryKey(m.Identity, m.Turn)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.mems[k]; ok {
		return false, nil
	}
	s.mems[k] = m
	return true, nil
}

// Search implements MemoryService.
func (s *InMemoryMemory) Search(_ context.Context, tenant, user, query string, limit int) ([]MemoryHit, error) {
	limit, err := validateSearch(tenant, user, query, limit)
	if err != nil {
		return nil, err
	}
	q := queryTerms(query)
	if len(q) == 0 {
		return nil, nil
	}
	s.mu.Lock()
	var hits []MemoryHit
	for _, m := range s.mems {
		if m.Identity.Tenant != tenant || m.Identity.User != user {
			continue
		}
		if sc := termScore(q, m); sc > 0 {
			hits = append(hits, MemoryHit{Memory: m, Score: sc})
		}
	}
	s.mu.Unlock()
	return rankHits(hits, limit), nil
}

// Delete implements MemoryService.
func (s *InMemoryMemory) Delete(_ context.Context, tenant, user, conversation string) (int64, error) {
	if err := validateDelete(tenant, user, conversation); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for k, m := range s.mems {
		if m.Identity.Tenant == tenant && m.Identity.User == user && (conversation == "" || m.Identity.Conversation == conversation) {
			delete(s.mems, k)
			n++
		}
	}
	return n, nil
}
