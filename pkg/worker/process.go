package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// errAbandoned means a record was left unfinished because its partition
// was revoked or the worker is stopping; it is not committed, so its next
// owner re-runs it.
var errAbandoned = errors.New("abandoned: partition revoked or worker stopping")

// handle takes one record to a durable end: dead-lettered, or run and
// committed (or recognised as already decided). What a failure means is
// classify's decision: infrastructure failures are retried for as long as
// the partition is ours, transient model failures up to MaxAttempts, and
// permanent ones dead-letter the record. It returns nil when the record is
// done (its offset may be committed), and an error classified abandoned
// otherwise.
func (w *consumer) handle(genCtx context.Context, e *entry) error {
	w.metrics.records.Inc()
	m, req := e.m, e.req
	if e.err != nil {
		return w.deadLetter(genCtx, genCtx, e, nil, e.err, 1)
	}
	ctx, span := w.tracing.Start(w.tracing.FromKafka(context.WithoutCancel(genCtx), m.Headers), "worker.request",
		attribute.String("turnpike.tenant", req.Tenant), attribute.String("turnpike.conversation", req.Conversation),
		attribute.String("turnpike.request_id", req.RequestID), attribute.Int("messaging.kafka.partition", m.Partition),
		attribute.Int64("messaging.kafka.offset", m.Offset))
	defer span.End()
	// The first attempt whose agent starts ends the record's start delay.
	startSeen := false
	agentStarted := func() {
		if !startSeen && !e.fetched.IsZero() {
			startSeen = true
			w.metrics.startDelay.Observe(time.Since(e.fetched).Seconds())
		}
	}
	backoff := w.cfg.RetryBackoffMin
	wake := e.interrupt.done // an interrupt cuts one backoff short
	for attempt, recordAttempts := 1, 1; ; attempt++ {
		err := w.run(genCtx, ctx, m, req, w.ownerToken(e.gen), &e.interrupt, agentStarted)
		if err == nil {
			return nil
		}
		switch classify(err) {
		case classAbandoned:
			return err
		case classFenced:
			w.metrics.fenced.Inc()
			w.log.Warn("fenced: a newer request of the conversation is committed; this worker lost the partition",
				identityAttr(req.Identity()), slog.String("request_id", req.RequestID), slog.Int("partition", m.Partition), slog.Int64("offset", m.Offset))
			return nil
		case classPermanent:
			return w.deadLetter(genCtx, ctx, e, &req, err, recordAttempts)
		case classRetryRecord:
			if recordAttempts >= w.cfg.MaxAttempts {
				return w.deadLetter(genCtx, ctx, e, &req, err, recordAttempts)
			}
			recordAttempts++
		}
		w.metrics.retries.Inc()
		w.log.Warn("attempt failed, retrying", identityAttr(req.Identity()), slog.String("request_id", req.RequestID), slog.Int("attempt", attempt),
			slog.Duration("backoff", backoff), slog.Any("error", err))
		// An interrupting request cuts the wait short: the next attempt
		// ends cancelled without running the agent. Only once: should that
		// attempt fail too (the store or the stream down), its retries back
		// off as any.
		if !sleepUnless(genCtx, backoff, wake) {
			return errAbandoned
		}
		if e.interrupt.interrupted() {
			wake = nil
		}
		backoff = min(2*backoff, w.cfg.RetryBackoffMax)
	}
}

// complete ends a request without running it (rejected, or cancelled
// while queued): the outcome is recorded (the first decision about a
// request id wins, so a re-delivery ends the same way) and run.completed
// emitted with it.
func (w *consumer) complete(genCtx context.Context, e *entry, status events.Status) error {
	w.metrics.records.Inc()
	id := e.req.Identity()
	log := w.log.With(identityAttr(id), slog.String("request_id", e.req.RequestID))
	return w.retryInfra(genCtx, log, func(ctx context.Context) error {
		c, err := w.store.RecordOutcome(ctx, id, e.req.RequestID, status)
		if err != nil {
			return fmt.Errorf("record %s: %w", status, err)
		}
		// An earlier run of the request may have left a step journal.
		w.step.dropJournal(ctx, w.store, id, e.req.RequestID, w.ownerToken(e.gen), &history.Steps{}, log)
		w.metrics.runs.WithLabelValues(string(c.Status)).Inc()
		// Its run.completed continues the record's trace.
		return w.completed(w.tracing.FromKafka(ctx, e.m.Headers), id, e.req.RequestID, c.Status)
	})
}

// completed emits run.completed for a request that ended without a run of
// its own, and tells ingest it ended.
func (w *consumer) completed(ctx context.Context, id events.Identity, requestID string, status events.Status) error {
	sink := w.stream.run(w.tracing.KafkaHeaders(ctx), time.Time{})
	if err := bridge.NewEmitter(sink, id, requestID, newRunID(), w.now).Completed(ctx, status); err != nil {
		return err
	}
	if err := sink.Flush(); err != nil {
		return err
	}
	w.control.completed(id, requestID, status)
	return nil
}

// deadLetter sends m to the DLQ, then — for a record that decoded — records
// its outcome as failed and completes it failed on the stream. A DLQ write
// that fails is retried like any infrastructure failure; a crash before the
// outcome is recorded re-delivers the record, which may then be
// dead-lettered twice (at least once, never lost). The run.completed
// continues traced's trace (the request's span).
func (w *consumer) deadLetter(genCtx, traced context.Context, e *entry, req *events.Request, cause error, attempts int) error {
	m := e.m
	w.metrics.deadLettered.Inc()
	log := w.log
	if req != nil {
		log = log.With(identityAttr(req.Identity()), slog.String("request_id", req.RequestID))
	}
	log.Warn("dead-letter record", slog.Int("partition", m.Partition), slog.Int64("offset", m.Offset),
		slog.Int("attempts", attempts), slog.Any("reason", cause))
	return w.retryInfra(genCtx, log, func(ctx context.Context) error {
		if err := w.dlq.send(ctx, m, cause.Error(), attempts); err != nil {
			return err
		}
		if req == nil {
			return nil
		}
		id := req.Identity()
		c, err := w.store.RecordOutcome(ctx, id, req.RequestID, events.StatusFailed)
		if err != nil {
			return fmt.Errorf("record outcome: %w", err)
		}
		// The request's durable end: its step journal, if any, goes.
		w.step.dropJournal(ctx, w.store, id, req.RequestID, w.ownerToken(e.gen), &history.Steps{}, log)
		return w.completed(trace.ContextWithSpanContext(ctx, trace.SpanContextFromContext(traced)), id, req.RequestID, c.Status)
	})
}

// retryInfra runs f until it succeeds, with capped exponential backoff, for
// as long as genCtx lives. Failures are logged on log (which carries the
// request's identity).
func (w *consumer) retryInfra(genCtx context.Context, log *slog.Logger, f func(ctx context.Context) error) error {
	ctx := context.WithoutCancel(genCtx)
	backoff := w.cfg.RetryBackoffMin
	for attempt := 1; ; attempt++ {
		err := f(ctx)
		if err == nil {
			return nil
		}
		w.metrics.retries.Inc()
		log.Warn("attempt failed, retrying", slog.Int("attempt", attempt), slog.Duration("backoff", backoff), slog.Any("error", err))
		if !sleep(genCtx, backoff) {
			return errAbandoned
		}
		backoff = min(2*backoff, w.cfg.RetryBackoffMax)
	}
}

// decode validates a record. Every error it returns is permanent.
func (w *consumer) decode(m kafka.Message) (events.Request, error) {
	req, err := events.DecodeRequest(m.Value, w.cfg.MaxContentBytes)
	if err != nil {
		return events.Request{}, err
	}
	if key := req.Identity().Key(); string(m.Key) != key {
		return events.Request{}, fmt.Errorf("%w key: %q does not match the record's identity %q", events.ErrInvalid, truncateKey(m.Key), key)
	}
	if req.RequestID == "" {
		req.RequestID = derivedRequestID(m)
	}
	if req.CreatedAt.IsZero() {
		req.CreatedAt = m.Time
	}
	if req.Strategy == "" {
		req.Strategy = events.StrategyEnqueue
	}
	return req, nil
}

func truncateKey(k []byte) string {
	if len(k) > 64 {
		return string(k[:64]) + "…"
	}
	return string(k)
}

// run runs one request once, through the step. genCtx says whether the
// partition is still ours; ctx (detached from it) carries the work. owner
// is the run's owner token (ownerToken). intr is the record's
// interruption. agentStarted is called when the agent starts.
func (w *consumer) run(genCtx, ctx context.Context, m kafka.Message, req events.Request, owner int64, intr *interruption, agentStarted func()) error {
	id := req.Identity()
	// Register before looking for a durable cancel: ingest records the
	// cancel before it publishes it, so a cancel is either in the store
	// now or reaches this registration through the control topic.
	src := history.Source{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Time: m.Time}
	ar := w.active.register(id.Key(), req.RequestID, src, origin(m))
	defer w.active.unregister(id.Key(), ar)
	// An interrupt that came before the registration (the record was
	// taken off its queue, or waited between two attempts) found no run to
	// cancel: the run cancels itself. One that comes after finds it.
	if intr.interrupted() && ar.cancel() {
		intr.count(w.metrics)
	}
	sink := w.stream.run(w.tracing.KafkaHeaders(ctx), m.Time)
	res, err := w.step.run(ctx, req, w.store, sink, stepRun{
		source: &src,
		cancelled: func(ctx context.Context) (bool, error) {
			if c, err := w.originCancelled(ctx, id, req.RequestID, ar.origin); err != nil || c {
				return c, err
			}
			return ar.isCancelled(), nil
		},
		started:      ar.started,
		agentStarted: agentStarted,
		stop:         genCtx,
		drain:        w.cfg.DrainTimeout,
		owner:        owner,
	})
	if err != nil {
		return err
	}
	w.control.completed(id, req.RequestID, res.Status)
	return nil
}
