package worker

import (
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/schema"
	"github.com/segmentio/kafka-go"

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
func (w *Worker) handle(genCtx context.Context, e *entry) error {
	w.metrics.records.Inc()
	m, req := e.m, e.req
	if e.err != nil {
		return w.deadLetter(genCtx, genCtx, m, nil, e.err, 1)
	}
	ctx, span := w.tracing.Start(w.tracing.FromKafka(context.WithoutCancel(genCtx), m.Headers), "worker.request",
		attribute.String("turnpike.tenant", req.Tenant), attribute.String("turnpike.conversation", req.Conversation),
		attribute.String("turnpike.request_id", req.RequestID), attribute.Int("messaging.kafka.partition", m.Partition),
		attribute.Int64("messaging.kafka.offset", m.Offset))
	defer span.End()
	backoff := w.cfg.RetryBackoffMin
	for attempt, recordAttempts := 1, 1; ; attempt++ {
		err := w.run(genCtx, ctx, m, req)
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
			return w.deadLetter(genCtx, ctx, m, &req, err, recordAttempts)
		case classRetryRecord:
			if recordAttempts >= w.cfg.MaxAttempts {
				return w.deadLetter(genCtx, ctx, m, &req, err, recordAttempts)
			}
			recordAttempts++
		}
		w.metrics.retries.Inc()
		w.log.Warn("attempt failed, retrying", identityAttr(req.Identity()), slog.String("request_id", req.RequestID), slog.Int("attempt", attempt),
			slog.Duration("backoff", backoff), slog.Any("error", err))
		if !sleep(genCtx, backoff) {
			return errAbandoned
		}
		backoff = min(2*backoff, w.cfg.RetryBackoffMax)
	}
}

// complete ends a request without running it (rejected, or cancelled
// while queued): the outcome is recorded (the first decision about a
// request id wins, so a re-delivery ends the same way) and run.completed
// emitted with it.
func (w *Worker) complete(genCtx context.Context, e *entry, status events.Status) error {
	w.metrics.records.Inc()
	id := e.req.Identity()
	log := w.log.With(identityAttr(id), slog.String("request_id", e.req.RequestID))
	return w.retryInfra(genCtx, log, func(ctx context.Context) error {
		c, err := w.store.RecordOutcome(ctx, id, e.req.RequestID, status)
		if err != nil {
			return fmt.Errorf("record %s: %w", status, err)
		}
		w.metrics.runs.WithLabelValues(string(c.Status)).Inc()
		// Its run.completed continues the record's trace.
		return w.completed(w.tracing.FromKafka(ctx, e.m.Headers), id, e.req.RequestID, c.Status)
	})
}

// completed emits run.completed for a request that ended without a run of
// its own, and tells ingest it ended.
func (w *Worker) completed(ctx context.Context, id events.Identity, requestID string, status events.Status) error {
	sink := w.stream.run(w.tracing.KafkaHeaders(ctx))
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
func (w *Worker) deadLetter(genCtx, traced context.Context, m kafka.Message, req *events.Request, cause error, attempts int) error {
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
		return w.completed(trace.ContextWithSpanContext(ctx, trace.SpanContextFromContext(traced)), id, req.RequestID, c.Status)
	})
}

// retryInfra runs f until it succeeds, with capped exponential backoff, for
// as long as genCtx lives. Failures are logged on log (which carries the
// request's identity).
func (w *Worker) retryInfra(genCtx context.Context, log *slog.Logger, f func(ctx context.Context) error) error {
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
func (w *Worker) decode(m kafka.Message) (events.Request, error) {
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

// run runs one request once. genCtx says whether the partition is still
// ours; ctx (detached from it) carries the work.
func (w *Worker) run(genCtx, ctx context.Context, m kafka.Message, req events.Request) error {
	id := req.Identity()
	log := w.log.With(identityAttr(id), slog.String("request_id", req.RequestID))
	// The agent, its tools and the worker's hooks find the request in ctx
	// (RunInfoFrom): its id keys side effects, as a run may happen more
	// than once.
	ctx = WithRunInfo(ctx, runInfoOf(req))

	// Register before looking for a durable cancel: ingest records the
	// cancel before it publishes it, so a cancel is either in the store
	// now or reaches this registration through the control topic.
	src := history.Source{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Time: m.Time}
	ar := w.active.register(id.Key(), req.RequestID, src, origin(m))
	defer w.active.unregister(id.Key(), ar)
	pending := history.Begin(w.store, id, req.RequestID, req.Content, req.CreatedAt)
	pending.SetSource(src)
	// One round trip: already decided (a redelivery, a duplicate record:
	// completed as it was the first time, without running the model
	// again), cancelled, or the window.
	windowMessages := w.cfg.WindowMessages
	if req.ResumeOf != "" {
		windowMessages = 0 // a resume reads its checkpoint instead
	}
	st, err := pending.Start(ctx, windowMessages)
	if err != nil {
		return fmt.Errorf("start request: %w", err)
	}
	if st.Decided {
		log.Info("duplicate request", slog.Int64("turn", st.Committed.N), slog.String("status", string(st.Committed.Status)))
		w.metrics.duplicates.Inc()
		return w.completed(ctx, id, req.RequestID, st.Committed.Status)
	}
	if !st.Cancelled {
		if st.Cancelled, err = w.originCancelled(ctx, id, req.RequestID, ar.origin); err != nil {
			return fmt.Errorf("read cancels: %w", err)
		}
	}
	if st.Cancelled || ar.isCancelled() {
		log.Info("cancelled before it ran")
		c, err := w.store.RecordOutcome(ctx, id, req.RequestID, events.StatusCancelled)
		if err != nil {
			return fmt.Errorf("record cancelled: %w", err)
		}
		w.metrics.runs.WithLabelValues(string(c.Status)).Inc()
		return w.completed(ctx, id, req.RequestID, c.Status)
	}

	runID := newRunID()
	log = log.With(slog.String("run_id", runID))
	start := w.now()
	runCtx, stopGeneration := context.WithTimeout(ctx, w.cfg.RunTimeout)
	defer stopGeneration()
	var iter *adk.AsyncIterator[*adk.AgentEvent]
	if req.ResumeOf != "" {
		// A resume continues the interrupted run from its checkpoint; the
		// answer is this request's (persisted) user message.
		var err error
		if iter, err = w.resume(runCtx, ctx, id, req); errors.Is(err, errNothingToResume) || errors.As(err, new(badAnswer)) {
			log.Info("resume rejected", slog.String("resume_of", req.ResumeOf), slog.Any("reason", err))
			return w.rejectResume(ctx, id, req.RequestID, err)
		} else if err != nil {
			return fmt.Errorf("resume %s: %w", req.ResumeOf, err)
		}
		w.metrics.resumes.WithLabelValues("resumed").Inc()
	} else {
		input, err := w.compactWindow(ctx, id, st.Window)
		if err != nil {
			return fmt.Errorf("compact window: %w", err)
		}
		runner, err := w.agents.runner(runCtx, runInfoOf(req))
		if err != nil {
			return fmt.Errorf("build agent: %w", err)
		}
		// An interrupt saves the run's checkpoint under this request's id.
		iter = runner.Run(runCtx, input, adk.WithCheckPointID(checkpointKey(id, req.RequestID)))
	}
	w.runStarted()
	defer w.runEnded()
	sink := w.stream.run(w.tracing.KafkaHeaders(ctx))
	h := w.bridge.Start(ctx, bridge.Run{
		Identity:       id,
		RequestID:      req.RequestID,
		RunID:          runID,
		Turn:           pending,
		StopGeneration: stopGeneration,
		Sink:           sink,
	}, iter)
	ar.started(h)
	select {
	case <-h.Done():
	case <-genCtx.Done():
		// The partition is going away: let the run finish within the drain
		// deadline, else abort it (its record will be re-run elsewhere).
		t := time.NewTimer(w.cfg.DrainTimeout)
		select {
		case <-h.Done():
		case <-t.C:
			h.Abort()
		}
		t.Stop()
	}
	res, err := h.Wait()
	// Every event of the run must be in the stream topic before the record
	// is done: a failed write makes the whole record run again (the turn,
	// if committed, is then recognised as a duplicate).
	if ferr := sink.Flush(); ferr != nil && err == nil {
		err = ferr
	}
	if err != nil {
		return fmt.Errorf("run %s: %w", runID, err)
	}
	if res.Committed.N == 0 && !res.Committed.Duplicate {
		// Nothing persisted (discarded, or cancelled before any content):
		// record the outcome so a redelivery does not run the model again.
		// If this fails, a redelivery runs the model once more, which is
		// harmless for a run that kept nothing.
		if _, err := w.store.RecordOutcome(ctx, id, req.RequestID, res.Status); err != nil {
			log.Warn("record outcome", slog.String("status", string(res.Status)), slog.Any("error", err))
		}
	}
	w.control.completed(id, req.RequestID, res.Status)
	w.metrics.runs.WithLabelValues(string(res.Status)).Inc()
	w.countRun(res)
	w.metrics.runSeconds.Observe(w.now().Sub(start).Seconds())
	log.Info("run completed", slog.String("status", string(res.Status)), slog.Int64("turn", res.Committed.N),
		slog.Int("tokens", res.Tokens), slog.Duration("took", w.now().Sub(start)))
	return nil
}

// toMessages converts the history window to the model's input.
func toMessages(window []history.Message) []adk.Message {
	out := make([]adk.Message, 0, len(window))
	for _, m := range window {
		switch m.Role {
		case history.RoleUser:
			out = append(out, schema.UserMessage(m.Content))
		case history.RoleAssistant:
			out = append(out, schema.AssistantMessage(windowText(m), nil))
		}
	}
	return out
}

// windowText is a message's text as the model sees it: an interrupted
// answer ends with the question it asked.
func windowText(m history.Message) string {
	if m.Interrupt == nil || m.Interrupt.Question == "" {
		return m.Content
	}
	if m.Content == "" {
		return m.Interrupt.Question
	}
	return m.Content + "\n\n" + m.Interrupt.Question
}
