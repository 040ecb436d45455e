package replay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// decisions looks up how a request was decided in the live store: a
// committed turn or a recorded outcome. history.Store implements it.
type decisions interface {
	Lookup(ctx context.Context, id events.Identity, requestID string) (history.Committed, bool, error)
}

// stepRunner runs one request against a store: worker.Step is one.
type stepRunner interface {
	Run(ctx context.Context, req events.Request, store history.Store, sink bridge.Sink) (bridge.Result, error)
}

// deps are a replay's collaborators.
type deps struct {
	// Decisions (redrive) is the live store, read only: requests already
	// decided are skipped, failed ones re-run with config.RerunFailed.
	// Required for redrive.
	Decisions decisions
	// Step (shadow) runs each request as the worker does: the worker's
	// own run step (worker.Step), against the shadow store with a sink
	// that keeps nothing. Default: the step of the settings' agent
	// (newStep). It is called concurrently for requests of different
	// conversations, one at a time for each conversation.
	Step stepRunner
	// ShadowStore (shadow) keeps the rebuilt histories. Default: a fresh
	// history.MemoryStore, rebuilt from the report on resume. Never the
	// live store.
	ShadowStore history.Store
	// Logger. Default: discard.
	Logger *slog.Logger
	// Progress, if set, receives the progress display: a progress bar when
	// ProgressTTY, otherwise a line every config.ProgressInterval.
	Progress    io.Writer
	ProgressTTY bool
	// Now is the clock. Default time.Now.
	Now func() time.Time

	// afterRecord, if set, is called after each record is done (tests).
	afterRecord func()
	// afterDispatch, if set, is called after a shadow replay's reader has
	// queued a request behind its conversation's earlier ones (tests).
	afterDispatch func()
}

// errInterrupted is returned (with the summary) when the context ended
// before the replay finished; the checkpoint holds where it stopped.
var errInterrupted = errors.New("replay interrupted: continue it with -resume")

// errCheckpointExists is returned when a checkpoint exists and the replay
// is not resumed.
var errCheckpointExists = errors.New("checkpoint exists")

// runReplay runs the replay cfg describes until it is done or ctx ends, and
// returns its summary. On interruption it returns the summary so far and
// errInterrupted; the checkpoint and the report let a runReplay with
// config.Resume continue exactly where it stopped.
func runReplay(ctx context.Context, cfg config, d deps) (*summary, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if cfg.DryRun {
		return dryRun(ctx, cfg, d)
	}
	if cfg.Mode == modeRedrive && d.Decisions == nil {
		return nil, errors.New("redrive needs the live store to look decisions up (set -mongo-uri or TURNPIKE_MONGO_URI)")
	}
	r, err := newRun(ctx, cfg, d)
	if err != nil {
		return nil, err
	}
	return r.run(ctx)
}

// run is one replay in progress.
type run struct {
	cfg     config
	d       deps
	cp      checkpoint
	filter  filter
	resumed bool

	trackers map[int]*tracker
	report   *reportWriter
	// doneBefore holds the records the resumed replay's report already
	// has at or after the checkpoint's positions: they are skipped.
	doneBefore map[[2]int64]struct{}
	// seed collects the report's shadow turns (resume with the in-memory
	// shadow store), committed before the replay goes on.
	seed []reportLine

	scanned, selected, alreadyDone, doneCount atomic.Int64
	stats                                     stats
}

// stats are the counters of the summary, mode by mode.
type stats struct {
	mu       sync.Mutex // guards statuses
	statuses map[string]int64

	published, skipped, derived, reruns, invalid atomic.Int64
	tokens                                       atomic.Int64
	lat                                          latencies
}

func (s *stats) status(st string) {
	s.mu.Lock()
	if s.statuses == nil {
		s.statuses = map[string]int64{}
	}
	s.statuses[st]++
	s.mu.Unlock()
}

func newRun(ctx context.Context, cfg config, d deps) (*run, error) {
	r := &run{cfg: cfg, d: d, filter: cfg.filter(), trackers: map[int]*tracker{}, doneBefore: map[[2]int64]struct{}{}}
	fp := cfg.fingerprint()
	if cfg.Resume {
		cp, err := readCheckpoint(cfg.Checkpoint)
		if err != nil {
			return nil, err
		}
		switch {
		case cp.Fingerprint != fp || cp.Mode != cfg.Mode:
			return nil, fmt.Errorf("%w: %s was written by a %s replay of %s with other settings; resume with the same flags, or start a new replay with another -report",
				errCheckpointMismatch, cfg.Checkpoint, cp.Mode, cp.Plan.Topic)
		case cfg.ReplayID != "" && cfg.ReplayID != cp.ReplayID:
			return nil, fmt.Errorf("%w: replay id %s, the checkpoint's is %s", errCheckpointMismatch, cfg.ReplayID, cp.ReplayID)
		}
		r.cp, r.resumed = cp, true
	} else {
		if _, err := os.Stat(cfg.Checkpoint); err == nil {
			return nil, fmt.Errorf("%w: %s: pass -resume to continue that replay, or remove it", errCheckpointExists, cfg.Checkpoint)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		plan, err := resolve(ctx, cfg, d.Now())
		if err != nil {
			return nil, err
		}
		id := cfg.ReplayID
		if id == "" {
			id = newReplayID(d.Now())
		}
		now := d.Now().UTC()
		r.cp = checkpoint{Version: checkpointVersion, ReplayID: id, Mode: cfg.Mode, Fingerprint: fp, Plan: plan, StartedAt: now, UpdatedAt: now}
	}
	next := map[int]int64{}
	for _, rg := range r.cp.Plan.Ranges {
		next[rg.Partition] = rg.Next
		r.trackers[rg.Partition] = newTracker(rg)
	}
	seedShadow := cfg.Mode == modeShadow && d.ShadowStore == nil
	rep, err := openReport(cfg.Report, r.resumed, func(l reportLine) error {
		if l.Source.Topic == r.cp.Plan.Topic {
			if n, ok := next[l.Source.Partition]; ok && l.Source.Offset >= n {
				r.doneBefore[[2]int64{int64(l.Source.Partition), l.Source.Offset}] = struct{}{}
			}
		}
		if sl, ok := seedLine(l); seedShadow && ok {
			r.seed = append(r.seed, sl)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.report = rep
	if err := r.save(false); err != nil { // a crash from here on is resumable
		_ = rep.close()
		return nil, err
	}
	return r, nil
}

// newReplayID returns rp-<utc time>-<random>.
func newReplayID(now time.Time) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return "rp-" + now.UTC().Format("20060102t150405") + "-" + hex.EncodeToString(b[:])
}

// save writes the checkpoint: the trackers' positions first, then the
// report's lines up to them are flushed, then the checkpoint is renamed in.
func (r *run) save(final bool) error {
	_, err := r.saveState(final)
	return err
}

// saveState is save, also reporting whether every record is done.
func (r *run) saveState(final bool) (complete bool, err error) {
	plan := r.cp.Plan
	plan.Ranges = make([]partitionRange, len(r.cp.Plan.Ranges))
	complete = true
	for i, rg := range r.cp.Plan.Ranges {
		rg.Next = r.trackers[rg.Partition].resumeAt()
		complete = complete && rg.Next >= rg.End
		plan.Ranges[i] = rg
	}
	if err := r.report.flush(final); err != nil {
		return false, err
	}
	cp := r.cp
	cp.Plan, cp.UpdatedAt, cp.Complete = plan, r.d.Now().UTC(), complete
	return complete, writeCheckpoint(r.cfg.Checkpoint, cp)
}

// recordDone notes a record done: its report line is written (or it needs
// none).
func (r *run) recordDone(p int, off int64) {
	r.trackers[p].done(off)
	r.doneCount.Add(1)
	if r.d.afterRecord != nil {
		r.d.afterRecord()
	}
}

// skipDone reports whether the record is already in the resumed report.
func (r *run) skipDone(p int, off int64) bool {
	if len(r.doneBefore) == 0 {
		return false
	}
	_, ok := r.doneBefore[[2]int64{int64(p), off}]
	return ok
}

// run drives the replay: progress, periodic checkpoints, the mode.
func (r *run) run(ctx context.Context) (*summary, error) {
	sum := &summary{Mode: r.cfg.Mode, ReplayID: r.cp.ReplayID, Topic: r.cp.Plan.Topic, Report: r.cfg.Report, Resumed: r.resumed}
	if r.cp.Complete {
		r.d.Logger.Info("the checkpoint's replay is already complete", slog.String("replay_id", r.cp.ReplayID))
		return sum, r.report.close()
	}
	if r.cfg.MeasureRaw {
		raw, err := rawRead(ctx, r.cfg.Brokers, r.cp.Plan)
		if err != nil {
			_ = r.report.close()
			return nil, err
		}
		sum.Raw = raw
	}

	var bg sync.WaitGroup
	bgCtx, stopBg := context.WithCancel(context.Background())
	prog := progress{w: r.d.Progress, tty: r.d.ProgressTTY, interval: r.cfg.ProgressInterval, label: r.cfg.Mode,
		total: r.cp.Plan.Remaining(), now: r.d.Now}
	bg.Go(func() { prog.run(bgCtx, r.doneCount.Load) })
	saveErr := make(chan error, 1)
	bg.Go(func() {
		t := time.NewTicker(r.cfg.CheckpointInterval)
		defer t.Stop()
		for {
			select {
			case <-bgCtx.Done():
				return
			case <-t.C:
				if err := r.save(false); err != nil {
					saveErr <- err
					return
				}
			}
		}
	})

	start := time.Now()
	var err error
	switch r.cfg.Mode {
	case modeRedrive:
		err = r.redrive(ctx)
	case modeShadow:
		err = r.shadow(ctx)
	}
	sum.Elapsed = time.Since(start)
	stopBg()
	bg.Wait()
	select {
	case perr := <-saveErr:
		err = errors.Join(err, perr)
	default:
	}
	complete, serr := r.saveState(true)
	switch {
	case complete && errors.Is(err, errInterrupted):
		err = nil // the interrupt came after the last record
	case !complete && err == nil && ctx.Err() != nil:
		err = errInterrupted
	}
	err = errors.Join(err, serr, r.report.close())
	r.fill(sum)
	sum.Interrupted = errors.Is(err, errInterrupted)
	return sum, err
}

// fill copies the counters into sum.
func (r *run) fill(sum *summary) {
	sum.Scanned, sum.Selected, sum.AlreadyDone = r.scanned.Load(), r.selected.Load(), r.alreadyDone.Load()
	s := &r.stats
	sum.Published, sum.Skipped, sum.Derived = s.published.Load(), s.skipped.Load(), s.derived.Load()
	sum.Reruns, sum.Invalid, sum.Tokens = s.reruns.Load(), s.invalid.Load(), s.tokens.Load()
	s.mu.Lock()
	if len(s.statuses) > 0 {
		sum.Statuses = make(map[string]int64, len(s.statuses))
		for k, v := range s.statuses {
			sum.Statuses[k] = v
			switch k {
			case string(events.StatusComplete):
				sum.Completed += v
			case string(events.StatusIncomplete), string(events.StatusCancelled):
				sum.Incomplete += v
			case string(events.StatusFailed), statusError, statusInvalid:
				sum.Failed += v
			}
		}
	}
	s.mu.Unlock()
	sum.Latency = s.lat.summary()
	if sum.Elapsed > 0 {
		sum.RecordsPerSec = float64(sum.Selected) / sum.Elapsed.Seconds()
	}
	if sum.Raw != nil && sum.Raw.RecordsPerSec > 0 {
		sum.RatioToRaw = sum.RecordsPerSec / sum.Raw.RecordsPerSec
	}
}
