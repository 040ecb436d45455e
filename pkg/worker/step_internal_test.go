package worker

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// A later run of a Step gets a higher owner token than any before it, also
// when the clock gives the same instant twice or steps back: the journal
// fences a run whose token is not above the last run's.
func TestAStepsOwnerTokensRiseWhateverTheClock(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	clock := at
	s := &Step{now: func() time.Time { return clock }}
	first := s.nextOwner()
	if first != at.UnixNano() {
		t.Fatalf("first token %d, want the clock's %d", first, at.UnixNano())
	}
	last := first
	for i, c := range []time.Time{at, at, at.Add(-time.Second), at.Add(time.Hour)} {
		clock = c
		next := s.nextOwner()
		if next <= last {
			t.Fatalf("token %d at clock %v: %d, not above the last %d", i+2, c, next, last)
		}
		last = next
	}
	if last != at.Add(time.Hour).UnixNano() {
		t.Errorf("a clock past the last token: token %d, want the clock's %d", last, at.Add(time.Hour).UnixNano())
	}
}

// A Step's peak is the most runs in progress at once (the ordering
// benchmark reports it), and its running gauge follows them.
func TestAStepsPeakIsTheMostRunsInProgressAtOnce(t *testing.T) {
	t.Parallel()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s := &Step{metrics: m}
	s.runStarted()
	s.runStarted()
	s.runEnded()
	s.runStarted()
	if got := s.peak(); got != 2 {
		t.Errorf("peak after two runs at once, then one of two = %d, want 2", got)
	}
	s.runEnded()
	s.runEnded()
	if got := testutil.ToFloat64(m.running); got != 0 {
		t.Errorf("running gauge after every run ended = %v, want 0", got)
	}
	if got := s.peak(); got != 2 {
		t.Errorf("peak after every run ended = %d, want it kept at 2", got)
	}
}

// A run that finds its request's journal owned by a newer run is fenced
// when that run is of its own generation (the upper 32 bits of the token);
// one of a later generation is retried while the journal may still be
// written (less than a run timeout ago), and ignored after that.
func TestAJournalOfANewerRunFencesOnlyWithinTheGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s := &Step{cfg: DefaultConfig(), metrics: m, now: func() time.Time { return now }}
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "fence"}
	log := slog.New(slog.DiscardHandler)
	const gen = int64(7) << 32
	owner := gen | 3
	journal := func(o int64, at time.Time) *history.Steps {
		return &history.Steps{Owner: o, Runs: 1, Steps: []history.Step{{Key: "m/assistant/1", At: at}}}
	}

	if _, err := s.openJournal(ctx, store, id, "r1", owner, journal(gen|4, now), log); !errors.Is(err, history.ErrFenced) {
		t.Errorf("a newer run of the same generation: %v, want ErrFenced", err)
	}
	later := gen + 1<<32 | 1
	if _, err := s.openJournal(ctx, store, id, "r1", owner, journal(later, now.Add(-time.Second)), log); !errors.Is(err, errJournalAhead) {
		t.Errorf("a run of a later generation, written a second ago: %v, want errJournalAhead", err)
	}
	for _, age := range []time.Duration{s.cfg.RunTimeout, s.cfg.RunTimeout + time.Second} {
		if jr, err := s.openJournal(ctx, store, id, "r1", owner, journal(later, now.Add(-age)), log); err != nil || jr != nil {
			t.Errorf("a run of a later generation, written %v ago (the run timeout is %v): %v, %v; want no journal and no error", age, s.cfg.RunTimeout, jr, err)
		}
	}

	// An older run's journal that is gone when this run claims it (its
	// request ended meanwhile) is not replayed.
	jr, err := s.openJournal(ctx, store, id, "r1", owner, journal(gen|2, now), log)
	if err != nil || jr == nil || len(jr.recorded) != 0 || jr.runs != 1 {
		t.Errorf("a journal deleted before the claim: %+v, %v; want a new journal of one run, nothing to replay", jr, err)
	}
}
