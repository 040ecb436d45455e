package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// A request record belongs in its key's home partition (topic.Home over
// the requests topic's partition count): there, and only there, it is run,
// in order with its conversation's other requests. A record a producer put
// elsewhere (another partitioner: librdkafka's CRC32, sarama's FNV-1a) is
// misplaced: the worker copies it to its home partition and commits it,
// and the copy runs when the home partition reaches it.
//
// The partition count is read once per generation of the consumer group,
// and a change of it ends the generation (watchPartitions); since the
// group's rebalances are eager, no run of one generation overlaps a run of
// the next. Every worker of a generation places by the same count: each
// compares the count it reads when the generation starts (after the
// group's assignment) with the last one it read before it joined
// (countBeforeJoin), and only when they are equal starts its partitions;
// otherwise it rejoins at once. All joins of a generation precede all its
// starts, and a topic's partition count only grows, so two workers that
// both start saw the count unchanged across the same instant: they agree.

// requestPartitions reads the partition count of the requests topic.
func (w *consumer) requestPartitions(ctx context.Context) (int, error) {
	ids, err := topic.Partitions(ctx, w.cfg.Brokers, w.topics.Requests)
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, fmt.Errorf("metadata %s: no partitions", w.topics.Requests)
	}
	return len(ids), nil
}

// runGeneration places records by the requests topic's partition count,
// read once, for the whole generation: it reads it (retrying for as long as
// the generation lasts), starts one goroutine per assigned partition, and
// then watches the count. Started with the generation's Start, its return
// ends the generation.
func (w *consumer) runGeneration(genCtx context.Context, gen *kafka.Generation) {
	var n int
	backoff := w.cfg.RetryBackoffMin
	for {
		var err error
		if n, err = w.requestPartitions(genCtx); err == nil {
			break
		}
		if genCtx.Err() != nil {
			return
		}
		w.log.Warn("read the requests topic's partitions", slog.Any("error", err))
		if !sleep(genCtx, backoff) {
			return
		}
		backoff = min(2*backoff, w.cfg.RetryBackoffMax)
	}
	// Whatever happens next, n was read before this worker's next join
	// (the group rejoins only after every goroutine of the generation
	// returned).
	defer func() { w.countBeforeJoin.Store(int64(n)) }()
	if before := int(w.countBeforeJoin.Load()); n != before {
		w.log.Info("the requests topic's partition count changed around the rebalance: rejoining, so that every worker places by the same count",
			slog.Int("partitions_before", before), slog.Int("partitions", n))
		return
	}
	assigned := gen.Assignments[w.topics.Requests]
	w.log.Info("partitions assigned", slog.Int("generation", int(gen.ID)), slog.Int("partitions", len(assigned)),
		slog.Int("requests_partitions", n))
	for _, pa := range assigned {
		gen.Start(func(genCtx context.Context) {
			w.consumePartition(genCtx, gen, pa, n)
		})
	}
	if changed := w.watchPartitions(genCtx, n); changed > 0 {
		n = changed
	}
}

// watchPartitions returns the requests topic's new partition count when it
// is no longer n, checked every PartitionWatchInterval, or 0 when genCtx
// ends. Its return ends the generation: the worker drains, rejoins, and
// places by the new count in the next one.
func (w *consumer) watchPartitions(genCtx context.Context, n int) int {
	t := time.NewTicker(w.cfg.PartitionWatchInterval)
	defer t.Stop()
	for {
		select {
		case <-genCtx.Done():
			return 0
		case <-t.C:
		}
		now, err := w.requestPartitions(genCtx)
		if err != nil {
			if genCtx.Err() == nil {
				w.log.Warn("read the requests topic's partitions", slog.Any("error", err))
			}
			continue
		}
		if now != n {
			w.log.Info("the requests topic's partition count changed: rebalancing, then placing by the new count",
				slog.Int("partitions_before", n), slog.Int("partitions", now))
			return now
		}
	}
}

// place marks e to be moved when it decoded and its partition is not
// its key's home. A record that does not decode is dead-lettered where it
// is: it never runs, so its place does not matter.
func (p *partition) place(e *entry) {
	if e.err != nil {
		return
	}
	if home := topic.Home(e.m.Key, p.partitions); home != p.id {
		e.move, e.home = true, home
	}
}

// move copies a misplaced record to its home partition (acks=all: the same
// key, value, timestamp and headers, plus the turnpike-source-* headers
// naming where it was first written) and reports it done, so that its
// offset is committed. Kafka outages are retried for as long as the
// partition is ours. A crash between the copy and the commit copies it
// again; both copies carry the same request id (a missing one is derived
// from the first placement), so it runs once.
func (w *consumer) move(genCtx context.Context, e *entry) error {
	m := e.m
	out := kafka.Message{Key: m.Key, Value: m.Value, Time: m.Time, Partition: e.home, Headers: topic.SourceHeaders(m)}
	srcTopic, srcPart, srcOff, _ := topic.Origin(m)
	id := e.req.Identity()
	log := w.log.With(identityAttr(id), slog.String("request_id", e.req.RequestID))
	err := w.retryInfra(genCtx, log, func(ctx context.Context) error {
		if err := w.mover.w.WriteMessages(ctx, out); err != nil {
			return fmt.Errorf("move %s/%d/%d to partition %d: %w", m.Topic, m.Partition, m.Offset, e.home, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	w.metrics.moved.Inc()
	log.Info("misplaced record moved to its home partition",
		slog.String("topic", m.Topic), slog.Int("partition", m.Partition), slog.Int64("offset", m.Offset),
		slog.Int("home_partition", e.home),
		slog.String("source_topic", srcTopic), slog.Int("source_partition", srcPart), slog.Int64("source_offset", srcOff))
	return nil
}

// moverMetadataTTL is how long the mover trusts its view of the requests
// topic's partitions: a partition added to it is written to at most this
// long after the generation placing by it started (writes before fail and
// are retried).
const moverMetadataTTL = time.Second

// mover writes the copies of misplaced records: each to the partition it
// names (its home), with acks=all, over a transport of its own.
type mover struct {
	w  *kafka.Writer
	tr *kafka.Transport
}

func newMover(brokers []string, requests string) *mover {
	tr := &kafka.Transport{MetadataTTL: moverMetadataTTL}
	return &mover{tr: tr, w: &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        requests,
		Balancer:     kafka.BalancerFunc(func(m kafka.Message, _ ...int) int { return m.Partition }),
		BatchTimeout: time.Millisecond,
		RequiredAcks: kafka.RequireAll,
		MaxAttempts:  5,
		WriteTimeout: 10 * time.Second,
		Transport:    tr,
	}}
}

// Close flushes the writer and closes its connections.
func (m *mover) Close() error {
	err := m.w.Close()
	m.tr.CloseIdleConnections()
	return err
}

// derivedRequestID is the request id of a record that carries none, from
// the coordinates it was first written at: a moved copy keeps its
// original's id.
func derivedRequestID(m kafka.Message) string {
	_, p, o, _ := topic.Origin(m)
	return events.DerivedRequestID(p, o, m.Time)
}

// origin returns where m was first written when the worker moved it home
// (its turnpike-source-* headers), or nil.
func origin(m kafka.Message) *history.Source {
	t, p, o, moved := topic.Origin(m)
	if !moved {
		return nil
	}
	return &history.Source{Topic: t, Partition: p, Offset: o, Time: m.Time}
}

// originCancelled reports whether a recorded cancel covers a record moved
// home where it was first written (false for one never moved): ingest
// records every cancel in every partition with that partition's end
// offset, so a record written to another partition before a cancel is
// cancelled even when it was moved home after it. Where it runs is checked
// by Pending.Start before the run and by the control topic's match during
// it; this second point read is made only for moved records.
func (w *consumer) originCancelled(ctx context.Context, id events.Identity, requestID string, origin *history.Source) (bool, error) {
	if origin == nil {
		return false, nil
	}
	return w.store.Cancelled(ctx, id, requestID, *origin)
}

// cancelElsewhere cancels the conversation's run when the cancel of
// everything does not name where it runs, and a recorded cancel covers it.
// Ingest names the home partition by the count it sees; while partitions
// are being added, a run placed by the old count is in another one. And a
// moved record runs at an offset of its home past the end ingest read
// there, while the cancel covers it where it was first written. Ingest
// records the cancel in every partition before it publishes it, so the
// store decides. The read is made on the control topic's reader, only in
// those cases, and bounded.
func (w *consumer) cancelElsewhere(ctl events.Control) bool {
	id := ctl.Identity()
	r := w.active.get(id.Key())
	if r == nil || (r.src.Partition == ctl.Partition && r.origin == nil) {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), cancelReadTimeout)
	defer cancel()
	covered, err := w.store.Cancelled(ctx, id, r.requestID, r.src)
	if err == nil && !covered {
		covered, err = w.originCancelled(ctx, id, r.requestID, r.origin)
	}
	if err != nil {
		w.log.Warn("read cancels for a run in another partition", slog.String("request_id", r.requestID), slog.Any("error", err))
		return false
	}
	return covered && w.active.cancel(id.Key(), func(x *activeRun) bool { return x == r })
}

// cancelReadTimeout bounds cancelElsewhere's read of the store.
const cancelReadTimeout = 5 * time.Second
