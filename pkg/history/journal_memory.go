package history

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

var _ Journal = (*MemoryStore)(nil)

// journalOf returns request requestID's journal in c, or nil. s.mu must be
// held.
func (c *memConv) journalOf(requestID string) *Steps {
	if c == nil {
		return nil
	}
	return c.journals[requestID]
}

// cloneSteps copies j, sharing nothing with it.
func cloneSteps(j *Steps) Steps {
	out := *j
	out.Steps = make([]Step, len(j.Steps))
	for i, s := range j.Steps {
		s.Data = append([]byte{}, s.Data...)
		s.State = slices.Clone(s.State)
		out.Steps[i] = s
	}
	return out
}

// Steps implements Journal.
func (s *MemoryStore) Steps(_ context.Context, id events.Identity, requestID string) (Steps, bool, error) {
	if err := validateJournal(id, requestID, 1); err != nil {
		return Steps{}, false, fmt.Errorf("steps: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.convs[id.Key()].journalOf(requestID)
	if j == nil {
		return Steps{}, false, nil
	}
	return cloneSteps(j), true, nil
}

// ClaimSteps implements Journal.
func (s *MemoryStore) ClaimSteps(_ context.Context, id events.Identity, requestID string, owner int64) (int, error) {
	if err := validateJournal(id, requestID, owner); err != nil {
		return 0, fmt.Errorf("claim steps: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.convs[id.Key()].journalOf(requestID)
	switch {
	case j == nil:
		return 0, nil
	case j.Owner >= owner:
		return 0, fmt.Errorf("claim steps: %w", ErrFenced)
	}
	j.Owner = owner
	j.Runs++
	return j.Runs, nil
}

// RecordStep implements Journal.
func (s *MemoryStore) RecordStep(_ context.Context, id events.Identity, requestID string, owner int64, st Step, limits JournalLimits) (Step, error) {
	limits = limits.withDefaults()
	if err := validateStep(id, requestID, owner, st, limits); err != nil {
		return Step{}, err
	}
	st.Owner, st.At = owner, storedTime(time.Time{}, time.Now)
	st.Data = append([]byte{}, st.Data...)
	st.State = slices.Clone(st.State)
	if st.size() > limits.MaxBytes {
		return Step{}, fmt.Errorf("record step: %w", ErrJournalFull)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conv(id.Key())
	j := c.journals[requestID]
	if j == nil {
		j = &Steps{Runs: 1}
		c.journals[requestID] = j
	}
	if j.Owner > owner {
		return Step{}, fmt.Errorf("record step: %w", ErrFenced)
	}
	if i := slices.IndexFunc(j.Steps, func(x Step) bool { return x.Key == st.Key }); i >= 0 {
		got := j.Steps[i]
		got.Data = append([]byte{}, got.Data...)
		got.State = slices.Clone(got.State)
		return got, nil
	}
	if j.Bytes+st.size() > limits.MaxBytes {
		if len(j.Steps) == 0 {
			delete(c.journals, requestID)
		}
		return Step{}, fmt.Errorf("record step: %w", ErrJournalFull)
	}
	j.Owner = owner
	j.Bytes += st.size()
	j.Steps = append(j.Steps, st)
	out := st
	out.Data = append([]byte{}, st.Data...)
	out.State = slices.Clone(st.State)
	return out, nil
}

// TruncateSteps implements Journal.
func (s *MemoryStore) TruncateSteps(_ context.Context, id events.Identity, requestID string, owner int64, n int) error {
	if err := validateJournal(id, requestID, owner); err != nil {
		return fmt.Errorf("truncate steps: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.convs[id.Key()].journalOf(requestID)
	switch {
	case j == nil:
		return nil
	case j.Owner > owner:
		return fmt.Errorf("truncate steps: %w", ErrFenced)
	}
	j.Owner = owner
	if n < 0 {
		n = 0
	}
	if n < len(j.Steps) {
		j.Steps = j.Steps[:n:n]
		j.Bytes = 0
		for _, st := range j.Steps {
			j.Bytes += st.size()
		}
	}
	return nil
}

// DeleteSteps implements Journal.
func (s *MemoryStore) DeleteSteps(_ context.Context, id events.Identity, requestID string, owner int64) error {
	if err := validateJournal(id, requestID, owner); err != nil {
		return fmt.Errorf("delete steps: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.convs[id.Key()]
	j := c.journalOf(requestID)
	switch {
	case j == nil:
		return nil
	case j.Owner > owner:
		return fmt.Errorf("delete steps: %w", ErrFenced)
	}
	delete(c.journals, requestID)
	return nil
}
