package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// sweepCall is one SweepArtifacts call a sweepSpy saw, and its result.
type sweepCall struct {
	before time.Time
	n      int
	err    error
}

// sweepSpy is an artifact service that reports each sweep on calls.
type sweepSpy struct {
	history.ArtifactService
	calls chan sweepCall
}

func (s sweepSpy) SweepArtifacts(ctx context.Context, before time.Time) (int, error) {
	n, err := s.ArtifactService.SweepArtifacts(ctx, before)
	s.calls <- sweepCall{before, n, err}
	return n, err
}

// A running worker sweeps the artifact saves no turn committed once per
// -artifact-sweep-interval (1h), only those older than
// -artifact-sweep-age (24h) on its clock, counts them, and keeps the
// published ones; the test steps the sweeps' clock instead of waiting.
func TestARunningWorkerSweepsUncommittedArtifactsOnItsSchedule(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	arts := history.NewMemoryArtifacts(history.ArtifactLimits{})
	spy := sweepSpy{ArtifactService: arts, calls: make(chan sweepCall)}
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "sweep"}
	clock := testenv.NewClock(time.Now())
	kept, err := arts.Stage(ctx, id, history.ArtifactSave{Name: "kept.txt", MIME: "text/plain", Data: []byte("kept")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := arts.Publish(ctx, id, []string{kept}); err != nil {
		t.Fatal(err)
	}
	lost, err := arts.Stage(ctx, id, history.ArtifactSave{Name: "lost.txt", MIME: "text/plain", Data: []byte("never committed")})
	if err != nil {
		t.Fatal(err)
	}

	s := newStack(t, history.NewMemoryStore())
	reg := prometheus.NewRegistry()
	ready := make(chan struct{})
	w := s.newWorker(t, worker.Deps{Artifacts: spy, Registerer: reg, Ready: func() { close(ready) }})
	worker.SetArtifactSweepClock(w, clock)
	s.run(t, ctx, w)
	select {
	case <-ready: // the first sweep is scheduled
	case <-ctx.Done():
		t.Fatal("the worker never got ready")
	}
	sweep := func(step time.Duration) sweepCall {
		t.Helper()
		clock.Advance(step)
		select {
		case c := <-spy.calls:
			if c.err != nil {
				t.Fatalf("SweepArtifacts: %v", c.err)
			}
			if want := clock.Now().Add(-24 * time.Hour); !c.before.Equal(want) {
				t.Fatalf("the sweep dropped what is older than %v, want %v (the clock less -artifact-sweep-age)", c.before, want)
			}
			return c
		case <-ctx.Done():
			t.Fatalf("no sweep %v after the last", step)
			return sweepCall{}
		}
	}
	if c := sweep(time.Hour); c.n != 0 {
		t.Fatalf("the sweep an hour after the saves dropped %d, want 0 (younger than a day)", c.n)
	}
	if c := sweep(24 * time.Hour); c.n != 1 {
		t.Fatalf("the sweep a day after the saves dropped %d, want 1 (the uncommitted one)", c.n)
	}
	if c := sweep(time.Hour); c.n != 0 {
		t.Fatalf("the next sweep dropped %d, want 0", c.n)
	}
	// The next sweep's call means the one before it was counted.
	if got := counterValue(t, reg, "turnpike_worker_artifacts_swept_total"); got != 1 {
		t.Fatalf("turnpike_worker_artifacts_swept_total = %v, want 1", got)
	}
	if got, err := arts.Publish(ctx, id, []string{lost}); err != nil || len(got) != 0 {
		t.Fatalf("Publish of the swept save = %+v, %v; want nothing", got, err)
	}
	if a, data, err := arts.OpenArtifact(ctx, id, "kept.txt", 0); err != nil || string(data) != "kept" || a.Version != 1 {
		t.Fatalf("the published save after the sweeps = %+v %q, %v", a, data, err)
	}
}
