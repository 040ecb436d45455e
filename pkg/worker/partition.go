package worker

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// partition consumes one assigned partition for the length of one
// generation. The fetch loop (the goroutine kafka-go's Generation.Start
// runs) dispatches each record to the queue of its key; one goroutine per
// key with work runs that key's records in topic order; a committer
// goroutine commits the highest contiguous completed offset. The fetch loop
// starts the others and waits for all of them before it returns, so none
// outlives the partition.
type partition struct {
	w   *consumer
	gen *kafka.Generation
	id  int
	// partitions is the requests topic's partition count this generation
	// places records by (see home.go).
	partitions int
	log        *slog.Logger
	// slots bounds this partition's records fetched and not yet done.
	slots chan struct{}

	mu sync.Mutex // guards keys, busy, their queues' entries, and offsets
	// keys holds the queue of every ordering key with a record queued or
	// running; a key's goroutine removes it when the queue runs empty.
	keys map[string]*keyQueue
	// busy counts each conversation's records queued or running (by
	// identity key), for the reject and interrupt strategies.
	busy    map[string]int
	offsets *offsetTracker
}

// interruption is how an interrupting request reaches a record that came
// before it: done is closed (by interruptLocked, under partition.mu).
// Queued, the record completes cancelled without running; running, its
// run is cancelled, or cancels itself as it registers when it was not
// registered yet (taken off its queue a moment ago, or waiting between
// two attempts: done also ends that wait).
type interruption struct {
	done chan struct{}
	// counted: the run's cancel is counted in cancelled_runs_total, by the
	// interrupt or by a run cancelling itself, whichever took effect.
	counted atomic.Bool
}

// interrupted reports whether an interrupting request came.
func (i *interruption) interrupted() bool {
	select {
	case <-i.done:
		return true
	default:
		return false
	}
}

// count counts the interruption's cancel once.
func (i *interruption) count(m *metrics) {
	if i.counted.CompareAndSwap(false, true) {
		m.cancelled.Inc()
	}
}

// keyQueue is one ordering key's records in topic order; the first is the
// one running.
type keyQueue struct {
	entries []*entry // guarded by partition.mu
}

// entry is a fetched record, decoded once at dispatch.
type entry struct {
	m         kafka.Message
	req       events.Request
	err       error // the record failed validation
	interrupt interruption
	// move: the record is not in its key's home partition; it is copied
	// to home (partition home) instead of run, and never counted busy.
	move bool
	home int
	// fetched is when the record was fetched (turnpike_worker_*_seconds
	// stage metrics).
	fetched time.Time
	// gen is the consumer group generation that fetched it (its runs'
	// owner tokens start with it).
	gen int32
}

func (w *consumer) consumePartition(genCtx context.Context, gen *kafka.Generation, pa kafka.PartitionAssignment, partitions int) {
	p := &partition{
		w:          w,
		gen:        gen,
		id:         pa.ID,
		partitions: partitions,
		log:        w.log.With(slog.Int("partition", pa.ID)),
		slots:      make(chan struct{}, w.cfg.ReadAhead),
		keys:       make(map[string]*keyQueue),
		busy:       make(map[string]int),
		offsets:    newOffsetTracker(),
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:   w.cfg.Brokers,
		Topic:     w.topics.Requests,
		Partition: pa.ID,
		MinBytes:  1,
		MaxBytes:  10 << 20,
		MaxWait:   500 * time.Millisecond,
		// An idle poll answered late is no error, so no backoff delays the
		// next request (topic.ReaderDialer).
		Dialer: topic.ReaderDialer(w.requestsDial, nil),
	})
	defer r.Close()
	if err := r.SetOffset(pa.Offset); err != nil {
		p.log.Error("set offset", slog.Int64("offset", pa.Offset), slog.Any("error", err))
		return
	}
	p.log.Debug("partition started", slog.Int64("offset", pa.Offset))

	var runners sync.WaitGroup
	commitCtx, stopCommitting := context.WithCancel(context.Background())
	committed := make(chan struct{})
	go func() {
		defer close(committed)
		p.commitLoop(commitCtx, r)
	}()

	for p.acquire(genCtx) {
		m, err := r.FetchMessage(genCtx)
		if err != nil {
			<-p.slots
			if genCtx.Err() != nil {
				break
			}
			p.log.Warn("fetch", slog.Any("error", err))
			sleep(genCtx, w.cfg.RetryBackoffMin)
			continue
		}
		if !p.admit(genCtx) {
			// The generation ended: m stays uncommitted, for the
			// partition's next owner.
			<-p.slots
			break
		}
		p.dispatch(genCtx, m, &runners)
	}
	// The generation ended: nothing more is fetched. Runs in flight finish
	// within the drain deadline (or are aborted); queued records stay
	// uncommitted for the partition's next owner.
	p.log.Info("partition revoked or worker stopping: draining", slog.Duration("drain_timeout", w.cfg.DrainTimeout))
	runners.Wait()
	stopCommitting()
	<-committed
	p.commit() // what finished while draining
}

// acquire takes a read-ahead slot of the partition before a fetch, waiting
// while ReadAhead of its records are fetched and not done: a full
// partition stops fetching.
func (p *partition) acquire(ctx context.Context) bool {
	select {
	case p.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// admit takes a worker-wide in-flight slot for a fetched record, waiting
// while MaxInflight records are in flight: a full worker stops fetching.
// It is taken after the fetch, so that a partition waiting for its next
// record holds none: idle partitions never take the slots a busy one
// needs, and turnpike_worker_inflight_records counts records only.
func (p *partition) admit(ctx context.Context) bool {
	select {
	case p.w.inflight <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// dispatchedLocked counts an admitted record in flight (the gauge and its
// peak) once its strategy is applied and it is queued. p.mu must be held:
// the record's runner takes it from the queue under p.mu, and a rejected
// record's completion starts after the caller unlocks, so its release
// comes after the count.
func (p *partition) dispatchedLocked() {
	// The slots taken (this record's among them) are never fewer than
	// the records counted, so the peak is never below the gauge.
	p.w.notePeak()
	p.w.metrics.inflight.Inc()
}

// release gives back a dispatched record's slots: it is done, or dropped
// uncommitted.
func (p *partition) release() {
	p.w.metrics.inflight.Dec()
	<-p.w.inflight
	<-p.slots
}

// keyOf is the ordering key of a record: its conversation, or one key for
// the whole partition under partition ordering.
func (p *partition) keyOf(m kafka.Message) string {
	if p.w.cfg.Ordering == orderingPartition {
		return ""
	}
	return string(m.Key)
}

// dispatch decides what m's strategy asks for and queues it behind the
// records of its key, starting the key's runner if it has none. Strategies
// are applied here, in the partition's order: reject completes the record
// at once when its conversation has a record running or queued ahead;
// interrupt cancels the conversation's running record and every queued
// one ahead of it, then queues itself.
func (p *partition) dispatch(genCtx context.Context, m kafka.Message, runners *sync.WaitGroup) {
	e := &entry{m: m, fetched: time.Now(), interrupt: interruption{done: make(chan struct{})}}
	if p.gen != nil {
		e.gen = p.gen.ID
	}
	if !m.Time.IsZero() {
		p.w.metrics.fetchLag.Observe(max(0, e.fetched.Sub(m.Time).Seconds()))
	}
	e.req, e.err = p.w.decode(m)
	p.place(e)
	key := p.keyOf(m)
	conv := string(m.Key)
	p.mu.Lock()
	p.offsets.add(m.Offset)
	if e.err == nil && !e.move && p.busy[conv] > 0 && !p.queuedLocked(key, e.req.RequestID) {
		switch e.req.Strategy {
		case events.StrategyReject:
			p.dispatchedLocked()
			p.mu.Unlock()
			runners.Add(1)
			go func() {
				defer runners.Done()
				p.finish(e, p.w.complete(genCtx, e, events.StatusRejected))
			}()
			return
		case events.StrategyInterrupt:
			p.interruptLocked(key, conv)
		}
	}
	if !e.move {
		p.busy[conv]++
	}
	q, running := p.keys[key]
	if !running {
		q = &keyQueue{}
		p.keys[key] = q
	}
	q.entries = append(q.entries, e)
	p.dispatchedLocked()
	p.mu.Unlock()
	if !running {
		runners.Add(1)
		go func() {
			defer runners.Done()
			p.runKey(genCtx, key, q)
		}()
	}
}

// queuedLocked reports whether a record of the same request id is queued
// or running under key: a duplicate is never rejected or interrupting, it
// completes as its original did. p.mu must be held.
func (p *partition) queuedLocked(key, requestID string) bool {
	if q := p.keys[key]; q != nil {
		for _, e := range q.entries {
			if e.err == nil && !e.move && e.req.RequestID == requestID {
				return true
			}
		}
	}
	return false
}

// interruptLocked cancels conv's running record (counted, as a cancel
// from the control topic is, in cancelled_runs_total) and marks its queued
// ones cancelled. p.mu must be held.
func (p *partition) interruptLocked(key, conv string) {
	q := p.keys[key]
	if q == nil {
		return
	}
	for i, e := range q.entries {
		if string(e.m.Key) != conv || e.move || e.interrupt.interrupted() {
			continue
		}
		close(e.interrupt.done)
		// The first may be running: its run is cancelled here if it is
		// registered, else it cancels itself as it registers. Queued, it
		// completes cancelled without running.
		if i == 0 && p.w.active.cancel(conv, func(*activeRun) bool { return true }) {
			e.interrupt.count(p.w.metrics)
		}
	}
}

// runKey runs the records of one key in order until its queue is empty or
// the generation ends.
func (p *partition) runKey(genCtx context.Context, key string, q *keyQueue) {
	for {
		p.mu.Lock()
		if len(q.entries) == 0 || genCtx.Err() != nil {
			// Records still queued when the generation ended stay
			// uncommitted, for the partition's next owner.
			p.dropLocked(key, q)
			p.mu.Unlock()
			return
		}
		e := q.entries[0]
		cancelled := e.interrupt.interrupted()
		p.mu.Unlock()

		var err error
		if e.move {
			err = p.w.move(genCtx, e)
		} else if cancelled && e.err == nil {
			err = p.w.complete(genCtx, e, events.StatusCancelled)
		} else {
			err = p.w.handle(genCtx, e)
		}
		abandoned := err != nil && classify(err) == classAbandoned
		if err != nil {
			p.log.Info("record not done", identityAttr(e.req.Identity()), slog.String("request_id", e.req.RequestID),
				slog.Int64("offset", e.m.Offset), slog.Any("reason", err))
		}
		p.mu.Lock()
		q.entries = q.entries[1:]
		p.unbusyLocked(e)
		p.mu.Unlock()
		if abandoned {
			p.release()
			// A later record of this key must not run before this one: stop
			// the key; the next owner resumes from the committed offset.
			p.mu.Lock()
			p.dropLocked(key, q)
			p.mu.Unlock()
			return
		}
		p.finish(e, nil)
	}
}

// finish marks a record done (committable) and gives back its slots; err
// is logged when the record could not be completed.
func (p *partition) finish(e *entry, err error) {
	if err != nil && classify(err) == classAbandoned {
		p.release()
		return
	}
	p.mu.Lock()
	p.offsets.done(e.m.Offset)
	p.mu.Unlock()
	p.release()
}

// dropLocked forgets key and gives back the slots of its queued records,
// which stay uncommitted. p.mu must be held.
func (p *partition) dropLocked(key string, q *keyQueue) {
	for _, e := range q.entries {
		p.release()
		p.unbusyLocked(e)
	}
	q.entries = nil
	delete(p.keys, key)
}

// unbusyLocked uncounts e from its conversation's records queued or
// running. p.mu must be held.
func (p *partition) unbusyLocked(e *entry) {
	if e.move {
		return
	}
	if p.busy[string(e.m.Key)]--; p.busy[string(e.m.Key)] <= 0 {
		delete(p.busy, string(e.m.Key))
	}
}

// commitLoop commits the partition's progress every CommitInterval, and
// reports its lag, until ctx ends.
func (p *partition) commitLoop(ctx context.Context, r *kafka.Reader) {
	t := time.NewTicker(p.w.cfg.CommitInterval)
	defer t.Stop()
	label := strconv.Itoa(p.id)
	defer p.w.metrics.lag.DeleteLabelValues(label)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.commit()
			p.w.metrics.lag.WithLabelValues(label).Set(float64(max(r.Lag(), 0)))
		}
	}
}

// commit commits one past the highest offset below which every fetched
// record is done, if it moved. A lost commit only means re-delivery, which
// is idempotent.
func (p *partition) commit() {
	p.mu.Lock()
	next, moved := p.offsets.advance()
	p.mu.Unlock()
	if !moved {
		return
	}
	if err := p.gen.CommitOffsets(map[string]map[int]int64{p.w.topics.Requests: {p.id: next}}); err != nil {
		p.log.Warn("commit offset", slog.Int64("offset", next), slog.Any("error", err))
		return
	}
	p.w.metrics.committed.Inc()
}
