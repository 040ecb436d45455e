package worker

import (
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/history"
)

// The index of runs in progress: a finished run leaves it, and only its own
// entry, so that a cancel never reaches a run that ended nor misses the
// conversation's next one.
func TestActiveRunsUnregisterForgetsOnlyTheRunItself(t *testing.T) {
	t.Parallel()
	a := newActiveRuns()
	first := a.register("t/u/c", "r1", history.Source{}, nil)
	if got := a.get("t/u/c"); got != first {
		t.Fatalf("get after register = %v, want the run", got)
	}
	a.unregister("t/u/c", first)
	if got := a.get("t/u/c"); got != nil {
		t.Fatalf("a finished run is still indexed: %+v", got)
	}
	if a.cancel("t/u/c", func(*activeRun) bool { return true }) {
		t.Fatal("a cancel reached a run that ended")
	}

	older := a.register("t/u/c", "r2", history.Source{}, nil)
	newer := a.register("t/u/c", "r3", history.Source{}, nil) // the conversation's next run
	a.unregister("t/u/c", older)
	if got := a.get("t/u/c"); got != newer {
		t.Fatalf("unregistering the older run dropped the newer one: get = %+v", got)
	}
	if !a.cancel("t/u/c", func(r *activeRun) bool { return r.requestID == "r3" }) || !newer.isCancelled() {
		t.Fatal("a cancel did not reach the conversation's current run")
	}
}
