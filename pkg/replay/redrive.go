package replay

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// lookupConcurrency bounds the live-store lookups of one redrive batch.
const lookupConcurrency = 16

// maxReruns bounds the fresh ids tried for one failed request.
const maxReruns = 100

// redrive re-publishes the plan's records, one goroutine per partition,
// batch by batch: a batch is published (acks=all) before its report lines
// are written and its records are marked done. Interrupted, it stops
// between batches.
func (r *run) redrive(ctx context.Context) error {
	w := &kafka.Writer{
		Addr:         kafka.TCP(r.cfg.Brokers...),
		Topic:        r.cfg.Topics().Requests,
		Balancer:     &kafka.Murmur2Balancer{}, // the producers' balancer: a conversation keeps its partition
		BatchTimeout: time.Millisecond,
		BatchSize:    r.cfg.RedriveBatch,
		RequiredAcks: kafka.RequireAll,
		MaxAttempts:  10,
		WriteTimeout: 30 * time.Second,
	}
	defer w.Close()
	g, gctx := errgroup.WithContext(ctx)
	for _, rg := range r.cp.Plan.Ranges {
		g.Go(func() error { return r.redrivePartition(gctx, ctx, w, rg) })
	}
	err := g.Wait()
	if ctx.Err() != nil {
		return errInterrupted
	}
	return err
}

func (r *run) redrivePartition(gctx, ctx context.Context, w *kafka.Writer, rg partitionRange) error {
	tr := r.trackers[rg.Partition]
	batch := make([]kafka.Message, 0, r.cfg.RedriveBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		// A batch read is published whole, even when an interrupt comes
		// meanwhile, so that what is done is exactly what is published.
		err := r.publish(context.WithoutCancel(gctx), w, batch)
		batch = batch[:0]
		return err
	}
	err := readRange(gctx, r.cfg.Brokers, r.cp.Plan.Topic, rg, func(m kafka.Message) error {
		r.scanned.Add(1)
		tr.read(m.Offset)
		switch {
		case r.skipDone(m.Partition, m.Offset):
			r.alreadyDone.Add(1)
			r.recordDone(m.Partition, m.Offset)
			return nil
		case !r.filter.match(m.Key):
			r.recordDone(m.Partition, m.Offset)
			return nil
		}
		r.selected.Add(1)
		batch = append(batch, m)
		if len(batch) >= r.cfg.RedriveBatch {
			return flush()
		}
		return nil
	})
	if err != nil {
		// Records read but not published stay not done: a resume reads
		// them again.
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := flush(); err != nil {
		return err
	}
	tr.finish()
	return nil
}

// redriven is one record of a batch and what to do with it.
type redriven struct {
	m    kafka.Message
	line reportLine
	out  *kafka.Message // nil: skipped
}

// publish decides each record of batch (decoding it, looking its request
// up), publishes those to re-run, then writes the report lines and marks
// the batch done.
func (r *run) publish(ctx context.Context, w *kafka.Writer, batch []kafka.Message) error {
	items := make([]redriven, len(batch))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(lookupConcurrency)
	for i := range batch {
		g.Go(func() error {
			it, err := r.decide(gctx, batch[i])
			items[i] = it
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	msgs := make([]kafka.Message, 0, len(items))
	for i := range items {
		if items[i].out != nil {
			msgs = append(msgs, *items[i].out)
		}
	}
	if len(msgs) > 0 {
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			return fmt.Errorf("publish to %s: %w", w.Topic, err)
		}
	}
	for i := range items {
		it := &items[i]
		if err := r.report.write(&it.line); err != nil {
			return err
		}
		switch {
		case it.out == nil:
			r.stats.skipped.Add(1)
		default:
			r.stats.published.Add(1)
		}
		r.recordDone(it.m.Partition, it.m.Offset)
	}
	return nil
}

// decide works out what to publish for m.
func (r *run) decide(ctx context.Context, m kafka.Message) (redriven, error) {
	src := coordinatesOf(m)
	at, fromHeaders := origin(m)
	it := redriven{m: m, line: reportLine{Source: src, Key: string(m.Key), Action: actionPublished}}
	if fromHeaders {
		it.line.Origin = &at
	}
	d, err := decodeRequest(m, at, r.cfg.MaxContentBytes)
	if err != nil {
		// The worker will judge it again (a fixed validator, a raised
		// content limit): byte for byte.
		r.stats.invalid.Add(1)
		it.line.Status, it.line.Error = statusInvalid, err.Error()
		it.out = r.outgoing(m, m.Value)
		return it, nil
	}
	req := d.req
	id := req.Identity()
	it.line.Tenant, it.line.User, it.line.Conversation, it.line.RequestID = id.Tenant, id.User, id.Conversation, req.RequestID
	it.line.DerivedID = d.derived

	c, decided, err := r.d.Decisions.Lookup(ctx, id, req.RequestID)
	if err != nil {
		return it, fmt.Errorf("look up %s: %w", req.RequestID, err)
	}
	if decided && (c.Status != events.StatusFailed || !r.cfg.RerunFailed) {
		it.line.Action, it.line.Status = actionSkipped, string(c.Status)
		return it, nil
	}
	if decided { // failed, and asked to re-run it
		rerunID, st, err := r.rerunID(ctx, id, req.RequestID)
		if err != nil {
			return it, err
		}
		if rerunID == "" { // an earlier re-run already decided it
			it.line.Action, it.line.Status = actionSkipped, string(st)
			return it, nil
		}
		it.line.OriginalRequestID, it.line.RequestID = req.RequestID, rerunID
		req.RequestID = rerunID
		r.stats.reruns.Add(1)
	}
	value := m.Value
	if d.derived || decided {
		if value, err = events.EncodeRequest(req); err != nil {
			return it, err
		}
		if d.derived {
			r.stats.derived.Add(1)
		}
	}
	it.out = r.outgoing(m, value)
	return it, nil
}

// rerunSuffix matches a re-run id's suffix, so that re-running a re-run
// continues the original's chain instead of starting one of its own.
var rerunSuffix = regexp.MustCompile(`^(.+)-rd([0-9]+)$`)

// rerunID picks the id a failed request re-runs under: the first of
// <id>-rd1, <id>-rd2, … that is not decided. A re-run that is decided
// and not failed means the request was already re-run: rerunID returns ""
// and that status. The ids are deterministic, so redriving the same
// records twice publishes the same id twice, which runs once.
func (r *run) rerunID(ctx context.Context, id events.Identity, requestID string) (string, events.Status, error) {
	base, k := requestID, 1
	if m := rerunSuffix.FindStringSubmatch(requestID); m != nil {
		n, err := strconv.Atoi(m[2])
		if err == nil && n < maxReruns {
			base, k = m[1], n+1
		}
	}
	for ; k <= maxReruns; k++ {
		cand := base + "-rd" + strconv.Itoa(k)
		if err := events.ValidateID("request_id", cand); err != nil {
			return "", "", fmt.Errorf("re-run id of %s: %w", requestID, err)
		}
		c, ok, err := r.d.Decisions.Lookup(ctx, id, cand)
		if err != nil {
			return "", "", fmt.Errorf("look up %s: %w", cand, err)
		}
		if !ok {
			return cand, "", nil
		}
		if c.Status != events.StatusFailed {
			return "", c.Status, nil
		}
	}
	return "", "", fmt.Errorf("re-run of %s: %d re-runs failed already: %w", requestID, maxReruns, errTooManyReruns)
}

var errTooManyReruns = errors.New("too many re-runs")

// outgoing is the record to publish for m: its key, the given value, its
// headers without the DLQ and earlier replay headers, and this replay's.
func (r *run) outgoing(m kafka.Message, value []byte) *kafka.Message {
	headers := make([]kafka.Header, 0, len(m.Headers)+4)
	for _, h := range m.Headers {
		switch h.Key {
		case headerDLQReason, headerSourceTopic, headerSourcePartition, headerSourceOffset, headerDLQAttempts,
			headerReplayID, headerReplaySourceTopic, headerReplaySourcePartition, headerReplaySourceOffset:
			continue
		}
		headers = append(headers, h)
	}
	headers = append(headers,
		kafka.Header{Key: headerReplayID, Value: []byte(r.cp.ReplayID)},
		kafka.Header{Key: headerReplaySourceTopic, Value: []byte(m.Topic)},
		kafka.Header{Key: headerReplaySourcePartition, Value: []byte(strconv.Itoa(m.Partition))},
		kafka.Header{Key: headerReplaySourceOffset, Value: []byte(strconv.FormatInt(m.Offset, 10))},
	)
	return &kafka.Message{Key: m.Key, Value: value, Headers: headers}
}
