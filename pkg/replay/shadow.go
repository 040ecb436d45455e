package replay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// shadowBufferSize is the bridge buffer of a shadow run. The bridge's
// default (1,000 items, ~100 KB a run) is sized for slow sinks; the shadow
// sink never blocks, and the allocation dominated the per-request cost.
const shadowBufferSize = 32

// discardSink is the shadow runs' stream: events go nowhere (the report
// gets the run's result). Nothing reaches the stream topic.
type discardSink struct{}

func (discardSink) Emit(context.Context, events.Identity, events.Event) error { return nil }

// job is one request of a shadow replay.
type job struct {
	src  coordinates
	at   *coordinates // origin of a dead letter
	key  string
	req  events.Request
	drv  bool
	part int
}

// conv is the queue of one conversation: its jobs run one at a time, in
// topic order.
type conv struct {
	// guarded by shadowRun.mu
	jobs   []*job
	active bool // queued on ready or held by a runner
}

// shadowRun is the state of a shadow replay.
type shadowRun struct {
	*run
	// step runs each request: the worker's run step.
	step  stepRunner
	store history.Store
	// abortCtx ends when the drain deadline after an interrupt passed:
	// runs still going are aborted (and replayed on resume).
	abortCtx    context.Context
	cancelAbort context.CancelFunc

	mu    sync.Mutex // guards convs
	convs map[string]*conv
	ready chan *conv
	// inflight bounds the jobs read and not done (MaxInflight).
	inflight chan struct{}
}

// shadow runs the plan's requests through the agent: concurrently across
// conversations (Concurrency runners), in topic order within each.
func (r *run) shadow(ctx context.Context) error {
	s := &shadowRun{run: r, store: r.d.ShadowStore,
		convs: map[string]*conv{}, ready: make(chan *conv, r.cfg.Concurrency), inflight: make(chan struct{}, r.cfg.MaxInflight)}
	if s.store == nil {
		mem := history.NewMemoryStore()
		if err := seed(ctx, mem, r.seed); err != nil {
			return err
		}
		r.seed = nil
		s.store = mem
	}
	s.abortCtx, s.cancelAbort = context.WithCancel(context.Background())
	defer s.cancelAbort()
	if s.step = r.d.Step; s.step == nil {
		st, err := newStep(r.cfg, r.d.Logger, nil)
		if err != nil {
			return err
		}
		s.step = st
	}

	// After an interrupt, running requests get DrainTimeout to finish.
	finished := make(chan struct{})
	var drainWG sync.WaitGroup
	drainWG.Add(1)
	stopDrain := context.AfterFunc(ctx, func() {
		defer drainWG.Done()
		t := time.NewTimer(r.cfg.DrainTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			s.cancelAbort()
		case <-finished:
		}
	})
	defer func() {
		close(finished)
		if stopDrain() {
			drainWG.Done()
		}
		drainWG.Wait()
	}()

	runCtx, fail := context.WithCancelCause(context.WithoutCancel(ctx))
	defer fail(nil)
	var runners sync.WaitGroup
	for range r.cfg.Concurrency {
		runners.Go(func() { s.runner(ctx, runCtx, fail) })
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, rg := range r.cp.Plan.Ranges {
		g.Go(func() error { return s.readPartition(gctx, runCtx, rg) })
	}
	readErr := g.Wait()
	close(s.ready)
	runners.Wait()
	if cause := context.Cause(runCtx); cause != nil {
		return cause
	}
	if ctx.Err() != nil {
		return errInterrupted
	}
	return readErr
}

// seed commits the turns of a resumed replay's report to a fresh shadow
// store, in report order (which is each conversation's topic order).
func seed(ctx context.Context, store history.Store, lines []reportLine) error {
	for _, l := range lines {
		id := events.Identity{Tenant: l.Tenant, User: l.User, Conversation: l.Conversation}
		st := events.Status(l.Status)
		if !st.Persisted() {
			continue
		}
		t := history.Turn{RequestID: l.RequestID, User: l.Content, UserAt: l.Source.Time, Status: st}
		if t.Parts = l.historyParts(); t.Parts == nil {
			t.Answer, t.Agent = l.Answer, l.Agent
		}
		if _, err := store.Commit(ctx, id, t); err != nil {
			return fmt.Errorf("rebuild shadow history from the report: %w", err)
		}
	}
	return nil
}

// readPartition reads one partition and hands its requests to their
// conversations' queues.
func (s *shadowRun) readPartition(ctx, runCtx context.Context, rg partitionRange) error {
	tr := s.trackers[rg.Partition]
	err := readRange(ctx, s.cfg.Brokers, s.cp.Plan.Topic, rg, func(m kafka.Message) error {
		s.scanned.Add(1)
		tr.read(m.Offset)
		switch {
		case s.skipDone(m.Partition, m.Offset):
			s.alreadyDone.Add(1)
			s.recordDone(m.Partition, m.Offset)
			return nil
		case !s.filter.match(m.Key):
			s.recordDone(m.Partition, m.Offset)
			return nil
		}
		s.selected.Add(1)
		src := coordinatesOf(m)
		at, fromHeaders := origin(m)
		d, err := decodeRequest(m, at, s.cfg.MaxContentBytes)
		if err != nil {
			l := reportLine{Source: src, Key: string(m.Key), Status: statusInvalid, Error: err.Error()}
			if fromHeaders {
				l.Origin = &at
			}
			return s.finish(runCtx, m.Partition, m.Offset, &l)
		}
		j := &job{src: src, key: string(m.Key), req: d.req, drv: d.derived, part: m.Partition}
		if fromHeaders {
			j.at = &at
		}
		select {
		case s.inflight <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		case <-runCtx.Done():
			return context.Cause(runCtx)
		}
		s.dispatch(j)
		if s.d.afterDispatch != nil {
			s.d.afterDispatch()
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted: what was not read is replayed on resume
		}
		return err
	}
	tr.finish()
	return nil
}

// dispatch queues j behind its conversation's earlier jobs.
func (s *shadowRun) dispatch(j *job) {
	s.mu.Lock()
	c := s.convs[j.key]
	if c == nil {
		c = &conv{}
		s.convs[j.key] = c
	}
	c.jobs = append(c.jobs, j)
	wake := !c.active
	c.active = true
	s.mu.Unlock()
	if wake {
		s.ready <- c // runners drain ready until it is closed
	}
}

// next pops c's next job, or marks c idle (and forgets it) when it has none.
func (s *shadowRun) next(c *conv, key string) *job {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(c.jobs) == 0 {
		c.active = false
		if key != "" && s.convs[key] == c {
			delete(s.convs, key)
		}
		return nil
	}
	j := c.jobs[0]
	c.jobs[0] = nil
	c.jobs = c.jobs[1:]
	return j
}

// runner runs conversations from ready, each until its queue is empty.
// After an interrupt it runs nothing more; queued jobs stay not done.
func (s *shadowRun) runner(ctx, runCtx context.Context, fail context.CancelCauseFunc) {
	for c := range s.ready {
		key := ""
		for {
			j := s.next(c, key)
			if j == nil {
				break
			}
			key = j.key
			if ctx.Err() != nil || runCtx.Err() != nil {
				<-s.inflight
				continue
			}
			l, ok := s.runJob(runCtx, j)
			if ok {
				if err := s.finish(runCtx, j.part, j.src.Offset, &l); err != nil {
					fail(err)
				}
			}
			<-s.inflight
		}
	}
}

// finish writes a record's report line and marks it done.
func (s *shadowRun) finish(_ context.Context, p int, off int64, l *reportLine) error {
	if err := s.report.write(l); err != nil {
		return err
	}
	s.stats.status(l.Status)
	if l.Status == statusInvalid {
		s.stats.invalid.Add(1)
	}
	s.recordDone(p, off)
	return nil
}

// runJob runs one request against the shadow store. ok is false when the
// run was abandoned (aborted after an interrupt): it is not done.
func (s *shadowRun) runJob(ctx context.Context, j *job) (reportLine, bool) {
	req := j.req
	id := req.Identity()
	l := reportLine{Source: j.src, Origin: j.at, Key: j.key, Tenant: id.Tenant, User: id.User, Conversation: id.Conversation,
		RequestID: req.RequestID, DerivedID: j.drv, Content: req.Content}
	start := time.Now()
	// A request already decided in the shadow store (a duplicate record,
	// or a replay resumed on a MongoDB shadow store) ends as it did.
	if c, ok, err := s.store.Lookup(ctx, id, req.RequestID); err != nil {
		l.Status, l.Error = statusError, fmt.Sprintf("lookup: %v", err)
		return l, true
	} else if ok {
		l.Status, l.Error = string(c.Status), "duplicate request id: decided before, not run again"
		return l, true
	}
	return s.runStep(ctx, l, start, req)
}

// runStep runs req through the worker's run step, aborted when the drain deadline
// after an interrupt passed or when ctx ends (a failed replay).
func (s *shadowRun) runStep(ctx context.Context, l reportLine, start time.Time, req events.Request) (reportLine, bool) {
	stepCtx, cancel := context.WithCancel(s.abortCtx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	res, err := s.step.Run(stepCtx, req, s.store, discardSink{})
	lat := time.Since(start)
	if errors.Is(err, bridge.ErrAborted) || (err != nil && stepCtx.Err() != nil) {
		return l, false
	}
	l.Answer, l.Agent, l.Parts, l.Tokens = res.Answer, res.Agent, reportParts(res.Parts), res.Tokens
	l.LatencyMS = float64(lat.Microseconds()) / 1000
	l.Status = string(res.Status)
	switch {
	case errors.Is(err, bridge.ErrModelRetry):
		// The worker would retry it; a shadow replay reports the failure.
		l.Status, l.Error = string(events.StatusFailed), err.Error()
	case err != nil:
		l.Status, l.Error = statusError, err.Error()
	case res.ModelErr != nil:
		l.Error = res.ModelErr.Error()
		if res.Answer == "" {
			l.Status = string(events.StatusFailed)
		}
	}
	s.stats.tokens.Add(int64(res.Tokens))
	s.stats.lat.add(lat)
	return l, true
}
