package worker

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// controlChannel is the worker's side of the control topic: it reads
// cancels (every worker reads every partition, from the end: a cancel that
// was written before this worker started is found in the store instead) and
// writes a completion for every request that ended, for ingest's count of
// queued requests.
type controlChannel struct {
	w      *consumer
	writer *kafka.Writer
	// pending counts completions handed to the writer and not yet written:
	// the asynchronous writer would buffer without bound while Kafka is
	// unreachable, so past maxPendingCompletions they are dropped (ingest
	// expires what it never hears about).
	pending atomic.Int64
}

// maxPendingCompletions bounds the completions waiting to be written.
const maxPendingCompletions = 10_000

func newControlChannel(w *consumer) *controlChannel {
	c := &controlChannel{w: w}
	c.writer = &kafka.Writer{
		Addr:     kafka.TCP(w.cfg.Brokers...),
		Topic:    w.topics.Control,
		Balancer: &kafka.Murmur2Balancer{},
		// Completions only feed ingest's queued counts, which expire on
		// their own: written asynchronously, off the request's path.
		Async:        true,
		BatchTimeout: 5 * time.Millisecond,
		RequiredAcks: kafka.RequireOne,
		Completion: func(msgs []kafka.Message, err error) {
			c.pending.Add(-int64(len(msgs)))
			if err != nil {
				w.log.Debug("write completion", slog.Any("error", err))
			}
		},
	}
	return c
}

// completed announces that a request ended.
func (c *controlChannel) completed(id events.Identity, requestID string, status events.Status) {
	if c == nil {
		return
	}
	v, err := events.EncodeControl(events.Control{V: events.Version, Type: events.ControlCompleted, Tenant: id.Tenant, User: id.User,
		Conversation: id.Conversation, RequestID: requestID, Status: status, At: c.w.now().UTC()})
	if err != nil {
		return
	}
	if c.pending.Add(1) > maxPendingCompletions {
		c.pending.Add(-1)
		c.w.metrics.completionsDropped.Inc()
		return
	}
	if err := c.writer.WriteMessages(context.Background(), kafka.Message{Key: []byte(id.Key()), Value: v}); err != nil {
		c.pending.Add(-1) // never reached the writer
	}
}

// run reads cancels from every partition of the control topic until ctx
// ends.
func (c *controlChannel) run(ctx context.Context) error {
	return topic.Tail(ctx, c.w.cfg.Brokers, c.w.topics.Control, func(m kafka.Message) {
		if ctl, err := events.DecodeControl(m.Value); err == nil && ctl.Type == events.ControlCancel {
			c.cancel(ctl)
		}
	}, func(err error) { c.w.log.Warn("read control topic", slog.Any("error", err)) })
}

// cancel cancels this worker's run that ctl covers, if any. Queued records
// it covers are found in the store when they come up.
func (c *controlChannel) cancel(ctl events.Control) {
	requests := c.w.topics.Requests
	hit := c.w.active.cancel(ctl.Identity().Key(), func(r *activeRun) bool {
		if ctl.RequestID != "" {
			return r.requestID == ctl.RequestID
		}
		return r.src.Topic == requests && r.src.Partition == ctl.Partition && r.src.Offset < ctl.Before
	})
	if !hit && ctl.RequestID == "" {
		hit = c.w.cancelElsewhere(ctl)
	}
	if hit {
		c.w.metrics.cancelled.Inc()
		c.w.log.Info("run cancelled", identityAttr(ctl.Identity()), slog.String("request_id", ctl.RequestID))
	}
}

func (c *controlChannel) Close() error { return c.writer.Close() }
