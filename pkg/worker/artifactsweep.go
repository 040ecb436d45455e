package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Config.ArtifactSweepInterval's and Config.ArtifactSweepAge's defaults,
// and the age's floor.
const (
	defaultArtifactSweepInterval = time.Hour
	defaultArtifactSweepAge      = 24 * time.Hour
	minArtifactSweepAge          = time.Hour
)

// sweepClock is the clock the artifact sweeps are scheduled on (a
// testenv.Clock in tests): Now, and f run in its own goroutine once d has
// passed unless stop was called first.
type sweepClock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// systemSweepClock is the system clock.
type systemSweepClock struct{}

func (systemSweepClock) Now() time.Time { return time.Now() }

func (systemSweepClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// artifactSweeps is the schedule of a worker's artifact sweeps: due
// receives when one is due (nil: none is ever due).
type artifactSweeps struct {
	due  chan struct{}
	mu   sync.Mutex // guards stop
	stop func() bool
}

// scheduleArtifactSweeps schedules the worker's artifact sweeps, one each
// Config.ArtifactSweepInterval on the sweep clock until ctx ends, when the
// worker has an artifact service and the interval is not negative. Each
// timer schedules the next one before it makes a sweep due, so that a
// test that stepped the clock past a sweep finds the next one scheduled.
func (w *consumer) scheduleArtifactSweeps(ctx context.Context) *artifactSweeps {
	s := &artifactSweeps{}
	if w.step.artifacts == nil || w.cfg.ArtifactSweepInterval < 0 {
		return s
	}
	clock := w.sweepClock
	if clock == nil {
		clock = systemSweepClock{}
	}
	s.due = make(chan struct{}, 1)
	var arm func()
	arm = func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		s.stop = clock.AfterFunc(w.cfg.ArtifactSweepInterval, func() {
			arm()
			select {
			case s.due <- struct{}{}:
			default: // one is due already
			}
		})
	}
	arm()
	return s
}

// sweepArtifacts runs the artifact sweeps of s until ctx ends: each drops
// the uncommitted saves older than Config.ArtifactSweepAge (by the sweep
// clock) and counts them in turnpike_worker_artifacts_swept_total. A
// failed sweep is logged; the next one tries again.
func (w *consumer) sweepArtifacts(ctx context.Context, s *artifactSweeps) {
	defer func() {
		s.mu.Lock()
		if s.stop != nil {
			s.stop()
		}
		s.mu.Unlock()
	}()
	clock := w.sweepClock
	if clock == nil {
		clock = systemSweepClock{}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.due:
		}
		n, err := w.step.artifacts.SweepArtifacts(ctx, clock.Now().Add(-w.cfg.ArtifactSweepAge))
		w.metrics.artifactsSwept.Add(float64(n))
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("artifact sweep", slog.Any("error", err))
			}
			continue
		}
		if n > 0 {
			w.log.Info("artifact sweep", slog.Int("swept", n))
		}
	}
}
