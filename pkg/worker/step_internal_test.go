package worker

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
