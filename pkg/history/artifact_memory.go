package history

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// MemoryArtifacts is an ArtifactService held in memory, with the same
// semantics as MongoArtifacts. It is meant for tests and
// pkg/turnpiketest. Safe for concurrent use.
type MemoryArtifacts struct {
	limits ArtifactLimits
	now    func() time.Time

	mu       sync.Mutex               // guards every field below
	staged   map[string]*memStaged    // by token
	versions map[string][]memArtifact // by scope + "#" + name, oldest first
}

// memStaged is a staged save.
type memStaged struct {
	id        events.Identity
	a         Artifact // Version 0 until published
	data      []byte
	published bool
}

type memArtifact struct {
	a    Artifact
	data []byte
}

var _ ArtifactService = (*MemoryArtifacts)(nil)

// NewMemoryArtifacts returns an empty MemoryArtifacts with limits (zero
// fields: the defaults).
func NewMemoryArtifacts(limits ArtifactLimits) *MemoryArtifacts {
	return &MemoryArtifacts{limits: limits.withDefaults(), now: time.Now,
		staged: make(map[string]*memStaged), versions: make(map[string][]memArtifact)}
}

// namesLocked is the names of scope that have a version. m.mu must be held.
func (m *MemoryArtifacts) namesLocked(scope string) map[string]bool {
	out := make(map[string]bool)
	for k, vs := range m.versions {
		if s, name, _ := strings.Cut(k, "#"); s == scope && len(vs) > 0 {
			out[name] = true
		}
	}
	return out
}

// Stage implements ArtifactService.
func (m *MemoryArtifacts) Stage(_ context.Context, id events.Identity, s ArtifactSave) (string, error) {
	if err := validateStage(id, s, m.limits); err != nil {
		return "", err
	}
	token, err := newArtifactToken()
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	names := m.namesLocked(artifactScope(id, s.Name))
	if !names[s.Name] && len(names) >= m.limits.MaxNames {
		return "", fmt.Errorf("stage artifact %s: %w: %d names, at most %d", s.Name, ErrArtifactLimit, len(names), m.limits.MaxNames)
	}
	m.staged[token] = &memStaged{id: id, data: bytes.Clone(s.Data), a: Artifact{
		Name: s.Name, MIME: s.MIME, Size: int64(len(s.Data)), Token: token,
		Conversation: id.Conversation, SavedAt: m.now().UTC().Truncate(time.Millisecond),
	}}
	return token, nil
}

// Publish implements ArtifactService.
func (m *MemoryArtifacts) Publish(_ context.Context, id events.Identity, tokens []string) ([]Artifact, error) {
	if err := id.Validate(); err != nil {
		return nil, fmt.Errorf("publish artifacts: %w", err)
	}
	if err := validateManifest(tokens); err != nil {
		return nil, fmt.Errorf("publish artifacts: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Artifact
	for _, t := range tokens {
		st := m.staged[t]
		if st == nil || st.id != id {
			continue // deleted, swept, or not this identity's
		}
		if st.published {
			out = append(out, st.a)
			continue
		}
		key := artifactScope(id, st.a.Name) + "#" + st.a.Name
		vs := m.versions[key]
		st.a.Version = 1
		if len(vs) > 0 {
			st.a.Version = vs[len(vs)-1].a.Version + 1
		}
		st.published = true
		m.versions[key] = append(vs, memArtifact{a: st.a, data: st.data})
		out = append(out, st.a)
	}
	return out, nil
}

// ListArtifacts implements ArtifactService.
func (m *MemoryArtifacts) ListArtifacts(_ context.Context, id events.Identity) ([]Artifact, error) {
	if err := id.Validate(); err != nil {
		return nil, fmt.Errorf("list artifacts: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []Artifact{}
	for _, scope := range []string{id.Key(), artifactScope(id, UserArtifactPrefix)} {
		for k, vs := range m.versions {
			if s, _, _ := strings.Cut(k, "#"); s == scope && len(vs) > 0 {
				out = append(out, vs[len(vs)-1].a)
			}
		}
	}
	slices.SortFunc(out, func(a, b Artifact) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// OpenArtifact implements ArtifactService.
func (m *MemoryArtifacts) OpenArtifact(_ context.Context, id events.Identity, name string, version int) (Artifact, []byte, error) {
	if err := validateRead("open", id, name); err != nil {
		return Artifact{}, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	vs := m.versions[artifactScope(id, name)+"#"+name]
	for i := len(vs) - 1; i >= 0; i-- {
		if version == 0 || vs[i].a.Version == version {
			return vs[i].a, bytes.Clone(vs[i].data), nil
		}
	}
	return Artifact{}, nil, fmt.Errorf("open artifact %s: %w", name, ErrNotFound)
}

// DeleteArtifact implements ArtifactService.
func (m *MemoryArtifacts) DeleteArtifact(_ context.Context, id events.Identity, name string) error {
	if err := validateRead("delete", id, name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	scope := artifactScope(id, name)
	key := scope + "#" + name
	if len(m.versions[key]) == 0 {
		return fmt.Errorf("delete artifact %s: %w", name, ErrNotFound)
	}
	delete(m.versions, key)
	for t, st := range m.staged {
		if st.a.Name == name && artifactScope(st.id, name) == scope {
			delete(m.staged, t)
		}
	}
	return nil
}

// SweepArtifacts implements ArtifactService.
func (m *MemoryArtifacts) SweepArtifacts(_ context.Context, before time.Time) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for t, st := range m.staged {
		if !st.published && st.a.SavedAt.Before(before) {
			delete(m.staged, t)
			n++
		}
	}
	return n, nil
}

var _ ManifestReader = (*MemoryStore)(nil)

// TurnArtifacts implements ManifestReader.
func (s *MemoryStore) TurnArtifacts(_ context.Context, id events.Identity, requestID string) ([]string, bool, error) {
	if err := id.Validate(); err != nil {
		return nil, false, fmt.Errorf("turn artifacts: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.convs[id.Key()]
	if c == nil {
		return nil, false, nil
	}
	n, ok := c.requests[requestID]
	if !ok {
		return nil, false, nil
	}
	return slices.Clone(c.turns[n-1].t.Artifacts), true, nil
}
