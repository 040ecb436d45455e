package worker

import (
	"context"
	"errors"
	"fmt"
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

// consumePartition processes one partition in topic order until the
// generation ends. It commits each record's offset once the record's side
// effects are durable.
func (w *Worker) consumePartition(genCtx context.Context, gen *kafka.Generation, pa kafka.PartitionAssignment) {
	log := w.log.With(slog.Int("partition", pa.ID))
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
		log.Error("set offset", slog.Int64("offset", pa.Offset), slog.Any("error", err))
		return
	}
	log.Debug("partition started", slog.Int64("offset", pa.Offset))
	for {
		m, err := r.FetchMessage(genCtx)
		if err != nil {
			if genCtx.Err() != nil {
				return
			}
			log.Warn("fetch", slog.Any("error", err))
			sleep(genCtx, w.cfg.RetryBackoffMin)
			continue
		}
		if err := w.handle(genCtx, m); err != nil {
			log.Info("record left for redelivery", slog.Int64("offset", m.Offset), slog.Any("reason", err))
			return
		}
		if err := gen.CommitOffsets(map[string]map[int]int64{m.Topic: {m.Partition: m.Offset + 1}}); err != nil {
			// The record is done; if the commit is lost it is re-delivered
			// and recognised as a duplicate.
			log.Warn("commit offset", slog.Int64("offset", m.Offset), slog.Any("error", err))
		}
	}
}

// handle takes one record to a durable end: dead-lettered, or run and
// committed (or recognised as a duplicate). Retriable failures are retried
// with capped exponential backoff for as long as the partition is ours; it
// returns errAbandoned when it is not any more.
func (w *Worker) handle(genCtx context.Context, m kafka.Message) error {
	w.metrics.records.Inc()
	req, err := w.decode(m)
	if err != nil {
		w.metrics.deadLettered.Inc()
		w.log.Warn("dead-letter invalid record", slog.Int("partition", m.Partition), slog.Int64("offset", m.Offset), slog.Any("reason", err))
		return w.retry(genCtx, func(ctx context.Context) error { return w.dlq.send(ctx, m, err.Error()) })
	}
	return w.retry(genCtx, func(ctx context.Context) error { return w.run(genCtx, ctx, req) })
}

// retry runs f until it succeeds, sleeping with capped exponential backoff
// between attempts, for as long as genCtx lives.
func (w *Worker) retry(genCtx context.Context, f func(ctx context.Context) error) error {
	ctx := context.WithoutCancel(genCtx)
	backoff := w.cfg.RetryBackoffMin
	for attempt := 1; ; attempt++ {
		err := f(ctx)
		if err == nil {
			return nil
		}
		if errors.Is(err, errAbandoned) {
			return err
		}
		w.metrics.retries.Inc()
		w.log.Warn("attempt failed, retrying", slog.Int("attempt", attempt), slog.Duration("backoff", backoff), slog.Any("error", err))
		if !sleep(genCtx, backoff) {
			return errAbandoned
		}
		backoff = min(2*backoff, w.cfg.RetryBackoffMax)
	}
}

// decode validates a record. Every error it returns is permanent: the
// record goes to the dead-letter topic.
func (w *Worker) decode(m kafka.Message) (events.Request, error) {
	req, err := events.DecodeRequest(m.Value, w.cfg.MaxContentBytes)
	if err != nil {
		return events.Request{}, err
	}
	if key := req.Identity().Key(); string(m.Key) != key {
		return events.Request{}, fmt.Errorf("%w key: %q does not match the record's identity %q", events.ErrInvalid, truncateKey(m.Key), key)
	}
	if req.RequestID == "" {
		req.RequestID = events.DerivedRequestID(m.Partition, m.Offset, m.Time)
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
func (w *Worker) run(genCtx, ctx context.Context, req events.Request) error {
	id := req.Identity()
	log := w.log.With(slog.String("request_id", req.RequestID), slog.String("tenant", id.Tenant), slog.String("conversation", id.Conversation))

	// A request already committed (a redelivery, a duplicate record) is
	// completed as it was the first time, without running the model again.
	if c, ok, err := w.store.Lookup(ctx, id, req.RequestID); err != nil {
		return fmt.Errorf("lookup request: %w", err)
	} else if ok {
		log.Info("duplicate request", slog.Int64("turn", c.N), slog.String("status", string(c.Status)))
		w.metrics.duplicates.Inc()
		return bridge.NewEmitter(w.sink, id, req.RequestID, newRunID(), w.now).Completed(ctx, c.Status)
	}

	runID := newRunID()
	log = log.With(slog.String("run_id", runID))
	start := w.now()
	runCtx, stopGeneration := context.WithTimeout(ctx, w.cfg.RunTimeout)
	defer stopGeneration()
	pending := history.Begin(w.store, id, req.RequestID, req.Content, req.CreatedAt)
	window, err := pending.Window(ctx, w.cfg.WindowMessages)
	if err != nil {
		return fmt.Errorf("load window: %w", err)
	}
	w.metrics.inflight.Inc()
	defer w.metrics.inflight.Dec()
	iter := w.runner.Run(runCtx, toMessages(window))
	h := w.bridge.Start(ctx, bridge.Run{
		Identity:       id,
		RequestID:      req.RequestID,
		RunID:          runID,
		Turn:           pending,
		StopGeneration: stopGeneration,
	}, iter)
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
	if errors.Is(err, bridge.ErrAborted) {
		return errAbandoned
	}
	if err != nil {
		return fmt.Errorf("run %s: %w", runID, err)
	}
	w.metrics.runs.WithLabelValues(string(res.Status)).Inc()
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
			out = append(out, schema.AssistantMessage(m.Content, nil))
		}
	}
	return out
}
