package pushgw

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/topic"
)

// Start-up retry delays while the stream topic is unreachable.
const (
	startRetryMin = 100 * time.Millisecond
	startRetryMax = 5 * time.Second
)

// newReader returns a reader of one partition of the stream topic, without
// consumer group (nothing is committed).
func (g *gateway) newReader(partition int, maxWait time.Duration) (*kafka.Reader, error) {
	return topic.PartitionReader(g.cfg.Brokers, g.cfg.Topic, partition, maxWait, func(msg string, args ...any) {
		g.log.Warn("kafka reader: "+fmt.Sprintf(msg, args...), "partition", partition)
	})
}

// newLiveReader returns the live reader of partition, positioned at start,
// and its part of readiness.
func (g *gateway) newLiveReader(partition int, start int64) (*kafka.Reader, *liveHealth, error) {
	h := &liveHealth{g: g, partition: partition}
	r, err := topic.NewPartitionReader(topic.ReaderOptions{
		Brokers: g.cfg.Brokers, Topic: g.cfg.Topic, Partition: partition, MaxWait: topic.LiveMaxWait,
		Logf: func(msg string, args ...any) {
			g.log.Warn("kafka reader: "+fmt.Sprintf(msg, args...), "partition", partition)
		},
		Dial:       g.dialKafka,
		ConnState:  h.conn,
		EmptyFetch: h.fetched,
	})
	if err != nil {
		return nil, nil, err
	}
	if err := r.SetOffset(start); err != nil {
		r.Close()
		return nil, nil, fmt.Errorf("live reader %d: seek: %w", partition, err)
	}
	return r, h, nil
}

// liveHealth is one live reader's part of readiness. The reader is failing
// while its last read from the broker failed (a refused dial, a broken
// connection, an answer later than MaxWait plus topic.ReadDeadlineMargin:
// failures kafka-go retries by itself without telling FetchMessage) or its
// last fetch returned an error, and no longer once bytes arrive again and a
// fetch succeeds, with a record or empty at the end of an idle poll.
type liveHealth struct {
	g         *gateway
	partition int

	mu sync.Mutex
	// Guarded by mu.
	connFailing  bool // the last read or dial of a broker connection failed
	fetchFailing bool // the last fetch FetchMessage returned failed
	counted      bool // counted in g.failingReaders
	closed       bool // the reader is done: never counted again
}

func (h *liveHealth) update(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f()
	failing := !h.closed && (h.connFailing || h.fetchFailing)
	if failing == h.counted {
		return
	}
	h.counted = failing
	if failing {
		h.g.failingReaders.Add(1)
	} else {
		h.g.failingReaders.Add(-1)
	}
}

// conn is told of every read and dial of the reader's broker connections.
func (h *liveHealth) conn(err error) {
	h.update(func() {
		if err != nil && !h.connFailing && !h.closed {
			h.g.log.Warn("live reader: broker connection failed, retrying", "partition", h.partition, "err", err)
		}
		h.connFailing = err != nil
	})
}

// fetched: a fetch succeeded (a record, or an idle poll that ended empty).
func (h *liveHealth) fetched() { h.update(func() { h.fetchFailing = false }) }

// fetchFailed: FetchMessage returned an error.
func (h *liveHealth) fetchFailed() { h.update(func() { h.fetchFailing = true }) }

// close takes the reader out of readiness for good.
func (h *liveHealth) close() { h.update(func() { h.closed = true }) }

// startLive implements liveReaders: it starts partition's live reader at
// offset, as a goroutine Run waits for, dispatching to the hub as
// generation gen until stop. It refuses (errStopped) once Run is shutting
// down. It does not block (the hub calls it under a shard lock).
func (g *gateway) startLive(partition int, offset int64, gen uint64) (func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.hub == nil || g.closing {
		return nil, errStopped
	}
	r, h, err := g.newLiveReader(partition, offset)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(g.ctx)
	hb := g.hub
	g.readers.Add(1)
	go func() { // owned: Run waits on g.readers
		defer g.readers.Done()
		if err := g.readLive(ctx, hb, partition, gen, r, h); err != nil {
			g.readerFailed(err)
		}
	}()
	return stop, nil
}

// readerFailed records a live reader that stopped for good and stops Run.
func (g *gateway) readerFailed(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.readerErrs = append(g.readerErrs, err)
	g.stopRun()
}

// readLive feeds hub with the records of r (partition's live reader of
// generation gen) until ctx ends (then it returns nil). It closes r. Fetch
// errors are retried (the reader backs off and resumes at its offset, so
// nothing is skipped); while they last, and while the reader's broker
// connections fail, Ready reports the gateway unready (liveHealth).
func (g *gateway) readLive(ctx context.Context, hb *hub, partition int, gen uint64, r *kafka.Reader, h *liveHealth) error {
	defer func() {
		h.close()
		r.Close()
	}()
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("live reader %d: closed", partition)
			}
			h.fetchFailed()
			g.log.Warn("live reader: fetch failed, retrying", "partition", partition, "err", err)
			continue
		}
		h.fetched()
		g.metrics.liveRecords.Inc()
		g.metrics.liveBytes.Add(float64(len(m.Key) + len(m.Value)))
		if g.beforeDispatch != nil {
			g.beforeDispatch(partition, m.Offset)
		}
		hb.dispatch(partition, gen, m.Offset, m.Key, m.Value, m.Time)
	}
}

// watchPartitions reads the stream topic's partition list every
// PartitionWatch until ctx ends. When partitions were added the hub places
// conversations by the new count from then on (hub.grow), and each
// subscription whose conversation moved is ended with an unavailable error
// frame (session.moved): its new events go to its new home, which the
// client's next subscribe reads, from its cursor on.
func (g *gateway) watchPartitions(ctx context.Context, h *hub) {
	t := time.NewTicker(g.cfg.PartitionWatch)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		parts, err := g.topicPartitions(ctx)
		if err != nil {
			if ctx.Err() == nil {
				g.log.Warn("push gateway: cannot read the stream topic's partitions", "topic", g.cfg.Topic, "err", err)
			}
			continue
		}
		added, moved := h.grow(parts)
		if added == 0 {
			continue
		}
		g.metrics.partitions.Set(float64(len(parts)))
		g.log.Info("stream topic partitions added: conversations placed by the new count",
			"topic", g.cfg.Topic, "partitions", len(parts), "added", added, "moved_subscriptions", len(moved))
		for _, sub := range moved {
			sub.sink.moved(sub)
		}
	}
}

// awaitPartitions returns the partitions of the stream topic, retrying
// while Kafka or the topic is not there yet. It fails only when ctx ends.
func (g *gateway) awaitPartitions(ctx context.Context) ([]int, error) {
	delay := startRetryMin
	for {
		parts, err := g.topicPartitions(ctx)
		if err == nil {
			return parts, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		g.log.Warn("push gateway: stream topic not readable yet", "topic", g.cfg.Topic, "err", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, startRetryMax)
	}
}

// topicPartitions asks the brokers for the stream topic's metadata and
// returns its partition ids: what the gateway needs to place keys (and
// what readiness checks). It needs no partition leader to answer.
func (g *gateway) topicPartitions(ctx context.Context) ([]int, error) {
	md, err := g.kafka.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{g.cfg.Topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata %s: %w", g.cfg.Topic, err)
	}
	var parts []int
	for _, t := range md.Topics {
		if t.Name != g.cfg.Topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("metadata %s: %w", g.cfg.Topic, t.Error)
		}
		for _, p := range t.Partitions {
			parts = append(parts, p.ID)
		}
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("metadata %s: no partitions", g.cfg.Topic)
	}
	return parts, nil
}

// firstOffset returns the first retained offset of partition.
func (g *gateway) firstOffset(ctx context.Context, partition int) (int64, error) {
	offs, err := g.listOffsets(ctx, []kafka.OffsetRequest{kafka.FirstOffsetOf(partition)})
	if err != nil {
		return 0, err
	}
	for _, po := range offs {
		if po.Partition == partition {
			return po.FirstOffset, nil
		}
	}
	return 0, fmt.Errorf("list offsets %s: no answer for partition %d", g.cfg.Topic, partition)
}

// endOffset returns the end offset of partition: the offset its next
// record will get.
func (g *gateway) endOffset(ctx context.Context, partition int) (int64, error) {
	offs, err := g.listOffsets(ctx, []kafka.OffsetRequest{kafka.LastOffsetOf(partition)})
	if err != nil {
		return 0, err
	}
	for _, po := range offs {
		if po.Partition == partition {
			return po.LastOffset, nil
		}
	}
	return 0, fmt.Errorf("list offsets %s: no answer for partition %d", g.cfg.Topic, partition)
}

func (g *gateway) listOffsets(ctx context.Context, reqs []kafka.OffsetRequest) ([]kafka.PartitionOffsets, error) {
	resp, err := g.kafka.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{g.cfg.Topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("list offsets %s: %w", g.cfg.Topic, err)
	}
	offs := resp.Topics[g.cfg.Topic]
	var errs []error
	for _, po := range offs {
		if po.Error != nil {
			errs = append(errs, fmt.Errorf("list offsets %s/%d: %w", g.cfg.Topic, po.Partition, po.Error))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return offs, nil
}
