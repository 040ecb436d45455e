package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// partition consumes one assigned partition for the length of one
// generation. The fetch loop (the goroutine kafka-go's Generation.Start
// runs) dispatches each record to the queue of its key; one goroutine per
// key with work runs that key's records in topic order; a committer
// goroutine commits the highest contiguous completed offset. The fetch loop
// starts the others and waits for all of them before it returns, so none
// outlives the partition.
type partition struct {
	w   *Worker
	gen *kafka.Generation
	id  int
	log *slog.Logger
	// slots bounds this partition's records fetched and not yet done.
	slots chan struct{}

	mu sync.Mutex // guards keys and offsets
	// keys holds the queue of every key with a record queued or running;
	// a key's goroutine removes it when the queue runs empty.
	keys    map[string]*keyQueue
	offsets *offsetTracker
}

// keyQueue is one conversation's records in topic order; the first is the
// one running.
type keyQueue struct {
	msgs []kafka.Message // guarded by partition.mu
}

func (w *Worker) consumePartition(genCtx context.Context, gen *kafka.Generation, pa kafka.PartitionAssignment) {
	p := &partition{
		w:       w,
		gen:     gen,
		id:      pa.ID,
		log:     w.log.With(slog.Int("partition", pa.ID)),
		slots:   make(chan struct{}, w.cfg.ReadAhead),
		keys:    make(map[string]*keyQueue),
		offsets: newOffsetTracker(),
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:   w.cfg.Brokers,
		Topic:     w.cfg.Topics.Requests,
		Partition: pa.ID,
		MinBytes:  1,
		MaxBytes:  10 << 20,
		MaxWait:   500 * time.Millisecond,
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
		p.commitLoop(commitCtx)
	}()

	for p.acquire(genCtx) {
		m, err := r.FetchMessage(genCtx)
		if err != nil {
			p.release()
			if genCtx.Err() != nil {
				break
			}
			p.log.Warn("fetch", slog.Any("error", err))
			sleep(genCtx, w.cfg.RetryBackoffMin)
			continue
		}
		p.dispatch(genCtx, m, &runners)
	}
	// The generation ended: nothing more is fetched. Runs in flight finish
	// within the drain deadline (or are aborted); queued records stay
	// uncommitted for the partition's next owner.
	runners.Wait()
	stopCommitting()
	<-committed
	p.commit() // what finished while draining
}

// acquire takes a read-ahead slot and a worker-wide in-flight slot, waiting
// while either is exhausted: a full pipeline stops fetching.
func (p *partition) acquire(ctx context.Context) bool {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	select {
	case p.w.inflight <- struct{}{}:
		p.w.metrics.inflight.Inc()
		p.w.notePeak()
		return true
	case <-ctx.Done():
		<-p.slots
		return false
	}
}

func (p *partition) release() {
	select {
	case <-p.w.inflight:
		p.w.metrics.inflight.Dec()
	default:
	}
	<-p.slots
}

// keyOf is the ordering key of a record: its conversation, or one key for
// the whole partition under partition ordering.
func (p *partition) keyOf(m kafka.Message) string {
	if p.w.cfg.Ordering == OrderingPartition {
		return ""
	}
	return string(m.Key)
}

// dispatch queues m behind the records of its key, starting the key's
// runner if it has none.
func (p *partition) dispatch(genCtx context.Context, m kafka.Message, runners *sync.WaitGroup) {
	key := p.keyOf(m)
	p.mu.Lock()
	p.offsets.add(m.Offset)
	q, running := p.keys[key]
	if !running {
		q = &keyQueue{}
		p.keys[key] = q
	}
	q.msgs = append(q.msgs, m)
	p.mu.Unlock()
	if !running {
		runners.Add(1)
		go func() {
			defer runners.Done()
			p.runKey(genCtx, key, q)
		}()
	}
}

// runKey runs the records of one key in order until its queue is empty or
// the generation ends.
func (p *partition) runKey(genCtx context.Context, key string, q *keyQueue) {
	for {
		p.mu.Lock()
		if len(q.msgs) == 0 || genCtx.Err() != nil {
			// Records still queued when the generation ended stay
			// uncommitted, for the partition's next owner.
			p.dropLocked(key, q)
			p.mu.Unlock()
			return
		}
		m := q.msgs[0]
		p.mu.Unlock()

		err := p.w.handle(genCtx, m)
		abandoned := err != nil && classify(err) == classAbandoned
		if err != nil {
			p.log.Info("record not done", slog.Int64("offset", m.Offset), slog.Any("reason", err))
		}

		p.mu.Lock()
		q.msgs = q.msgs[1:]
		if !abandoned {
			p.offsets.done(m.Offset)
		}
		p.mu.Unlock()
		p.release()
		if abandoned {
			// A later record of this key must not run before this one: stop
			// the key; the next owner resumes from the committed offset.
			p.mu.Lock()
			p.dropLocked(key, q)
			p.mu.Unlock()
			return
		}
	}
}

// dropLocked forgets key and gives back the slots of its queued records,
// which stay uncommitted. p.mu must be held.
func (p *partition) dropLocked(key string, q *keyQueue) {
	for range q.msgs {
		p.release()
	}
	q.msgs = nil
	delete(p.keys, key)
}

// commitLoop commits the partition's progress every CommitInterval until
// ctx ends.
func (p *partition) commitLoop(ctx context.Context) {
	t := time.NewTicker(p.w.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.commit()
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
	if err := p.gen.CommitOffsets(map[string]map[int]int64{p.w.cfg.Topics.Requests: {p.id: next}}); err != nil {
		p.log.Warn("commit offset", slog.Int64("offset", next), slog.Any("error", err))
		return
	}
	p.w.metrics.committed.Inc()
}
