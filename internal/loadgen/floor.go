package loadgen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// FloorTopicSuffix follows the topic prefix in the floor topic's name.
const FloorTopicSuffix = "loadgen.floor"

// floorDrainTimeout is how long the floor waits for acknowledged records
// that have not been fetched yet, once every producer is done.
const floorDrainTimeout = 15 * time.Second

// floorProducer is one producer of the floor: a conversation's stand-in.
type floorProducer struct {
	name string
	key  []byte
	// next is the seq of the next record expected from it; only the reader
	// of the producer's partition touches it.
	next int64
}

// floor measures kafka-go produce → fetch on the stream path's settings:
// topic.StreamWriter (keyed, Murmur2, acks=all, sync) and one
// topic.PartitionReader per partition with topic.LiveMaxWait, as the worker
// and the push gateway use them.
type floor struct {
	cfg        Config
	topic      string
	log        *slog.Logger
	violations *tally
	errs       *tally

	producers map[string]*floorProducer // by name; read-only once running
	latency   Histogram
	sent      atomic.Int64
	received  atomic.Int64
	lastRecv  atomic.Int64 // unix ns of the last fetch
}

func runFloor(ctx context.Context, cfg Config, runID string, log *slog.Logger, violations, errs *tally) (*FloorResult, error) {
	f := &floor{
		cfg: cfg, topic: cfg.TopicPrefix + FloorTopicSuffix, log: log, violations: violations, errs: errs,
		producers: make(map[string]*floorProducer, cfg.Conversations),
	}
	for i := range cfg.Conversations {
		name := conversationName(cfg.ConversationPrefix+"-floor", runID, i)
		f.producers[name] = &floorProducer{name: name, key: []byte("default/loadgen-floor/" + name), next: 1}
	}
	starts, err := f.prepare(ctx)
	if err != nil {
		return nil, err
	}

	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	var readers sync.WaitGroup
	for p, off := range starts {
		r, err := topic.PartitionReader(cfg.Brokers, f.topic, p, topic.LiveMaxWait, func(msg string, args ...any) {
			log.Warn("floor reader: "+fmt.Sprintf(msg, args...), "partition", p)
		})
		if err == nil {
			err = r.SetOffset(off)
		}
		if err != nil {
			stopReading()
			readers.Wait()
			return nil, fmt.Errorf("floor reader %d: %w", p, err)
		}
		readers.Go(func() { f.read(readCtx, r) })
	}

	expected := int64(cfg.Conversations) * int64(cfg.Messages) * int64(cfg.Tokens)
	progCtx, stopProgress := context.WithCancel(ctx)
	var prog sync.WaitGroup
	prog.Go(func() { newProgress(cfg).run(progCtx, f.progressLine(expected)) })

	start := time.Now()
	f.produce(ctx)
	f.drain(ctx)
	stopReading()
	readers.Wait()
	stopProgress()
	prog.Wait()

	res := &FloorResult{
		Topic: f.topic, Partitions: len(starts), Producers: cfg.Conversations,
		RecordsExpected: expected, Records: f.received.Load(), Latency: f.latency.Summary(),
	}
	if last := f.lastRecv.Load(); last > 0 {
		res.Elapsed = time.Unix(0, last).Sub(start)
	}
	if res.Elapsed > 0 {
		res.RecordsPerSec = float64(res.Records) / res.Elapsed.Seconds()
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if missing := f.sent.Load() - f.received.Load(); missing > 0 {
		violations.addN(KindFloorMissing, "", fmt.Sprintf("%d acknowledged records not fetched within %v", missing, floorDrainTimeout), missing)
	}
	return res, nil
}

// prepare creates the floor topic when missing and returns the end offset
// of each partition, where the readers start. A new topic takes a moment
// to have leaders, so it retries for a while.
func (f *floor) prepare(ctx context.Context) (map[int]int64, error) {
	if err := topic.Ensure(ctx, f.cfg.Brokers, topic.DefaultPartitions, f.topic); err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		starts, err := f.endOffsets(ctx)
		if err == nil {
			return starts, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, fmt.Errorf("floor: %w", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (f *floor) endOffsets(ctx context.Context) (map[int]int64, error) {
	parts, err := topic.Partitions(ctx, f.cfg.Brokers, f.topic)
	if err != nil {
		return nil, err
	}
	reqs := make([]kafka.OffsetRequest, len(parts))
	for i, p := range parts {
		reqs[i] = kafka.LastOffsetOf(p)
	}
	cl := &kafka.Client{Addr: kafka.TCP(f.cfg.Brokers...), Timeout: 10 * time.Second}
	resp, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{f.topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("list offsets %s: %w", f.topic, err)
	}
	starts := make(map[int]int64, len(parts))
	var errs []error
	for _, po := range resp.Topics[f.topic] {
		if po.Error != nil {
			errs = append(errs, fmt.Errorf("list offsets %s/%d: %w", f.topic, po.Partition, po.Error))
			continue
		}
		starts[po.Partition] = po.LastOffset
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(starts) != len(parts) || len(parts) == 0 {
		return nil, fmt.Errorf("list offsets %s: %d of %d partitions answered", f.topic, len(starts), len(parts))
	}
	return starts, nil
}

// produce runs every producer to the end: each writes Messages × Tokens
// records, one every Delay, each after the previous one's acknowledgement.
func (f *floor) produce(ctx context.Context) {
	w := topic.StreamWriter(f.cfg.Brokers, f.topic, f.cfg.StreamBatchTimeout)
	defer func() {
		if err := w.Close(); err != nil {
			f.errs.add("floor_produce", "", fmt.Sprintf("close writer: %v", err))
		}
	}()
	records := f.cfg.Messages * f.cfg.Tokens
	var wg sync.WaitGroup
	for _, p := range f.producers {
		wg.Go(func() {
			// A token event's shape and size, as the worker writes it.
			e := events.TokenEvent{
				Meta:  events.Meta{Conversation: p.name, RequestID: "r-00000000000000000000000000000000", RunID: "u-0000000000000000"},
				Agent: "assistant", Role: "assistant",
			}
			buf := make([]byte, 0, 512)
			var word []byte
			for j := 1; j <= records; j++ {
				if err := pause(ctx, f.cfg.Delay); err != nil {
					return
				}
				word = fmt.Appendf(word[:0], "w%d ", j)
				e.Seq, e.Delta, e.TS = int64(j), string(word), time.Now().UnixNano()
				buf = events.AppendEvent(buf[:0], &e)
				if err := w.WriteMessages(ctx, kafka.Message{Key: p.key, Value: buf}); err != nil {
					if ctx.Err() == nil {
						f.errs.add("floor_produce", p.name, err.Error())
					}
					return
				}
				f.sent.Add(1)
			}
		})
	}
	wg.Wait()
}

// drain waits until every acknowledged record was fetched, or until
// floorDrainTimeout passes without progress.
func (f *floor) drain(ctx context.Context) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	last, since := f.received.Load(), time.Now()
	for f.received.Load() < f.sent.Load() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n := f.received.Load(); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) > floorDrainTimeout {
			return
		}
	}
}

// read fetches one partition until ctx ends, recording each of this run's
// records' latency and checking each producer's order.
func (f *floor) read(ctx context.Context, r *kafka.Reader) {
	defer r.Close()
	var v client.FrameView
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.log.Warn("floor reader: fetch failed, retrying", "partition", r.Config().Partition, "err", err)
			continue
		}
		recv := time.Now()
		if err := v.Decode(m.Value); err != nil {
			f.violations.add(KindBadFrame, "", fmt.Sprintf("floor record %d/%d: %v", m.Partition, m.Offset, err))
			continue
		}
		p := f.producers[string(v.Conversation)]
		if p == nil {
			continue // another run's record
		}
		f.latency.Record(recv.Sub(time.Unix(0, v.TS)))
		if v.Seq != p.next {
			f.violations.add(KindFloorOrder, p.name, fmt.Sprintf("record seq %d, want %d", v.Seq, p.next))
		}
		p.next = v.Seq + 1
		f.received.Add(1)
		f.lastRecv.Store(recv.UnixNano())
	}
}

func (f *floor) progressLine(expected int64) func(elapsed, sinceLast time.Duration) string {
	var last int64
	return func(elapsed, sinceLast time.Duration) string {
		n := f.received.Load()
		rate := float64(n-last) / max(sinceLast.Seconds(), 1e-9)
		last = n
		return fmt.Sprintf("floor %5.0fs  records %d/%d  %.0f records/s  p99 %s  errors %d  violations %d",
			elapsed.Seconds(), n, expected, rate, ms(f.latency.Quantile(0.99)), f.errs.total(), f.violations.total())
	}
}

// pause waits d (nothing for d <= 0) or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
