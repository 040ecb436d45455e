package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Header names. The DLQ ones are the worker's (docs/api.md); the replay ones are
// added to every redriven record.
const (
	headerDLQReason       = "turnpike-dlq-reason"
	headerSourceTopic     = topic.HeaderSourceTopic
	headerSourcePartition = topic.HeaderSourcePartition
	headerSourceOffset    = topic.HeaderSourceOffset
	headerDLQAttempts     = "turnpike-dlq-attempts"

	headerReplayID              = "turnpike-replay-id"
	headerReplaySourceTopic     = "turnpike-replay-source-topic"
	headerReplaySourcePartition = "turnpike-replay-source-partition"
	headerReplaySourceOffset    = "turnpike-replay-source-offset"
)

// coordinates locate one record.
type coordinates struct {
	Topic     string    `json:"topic"`
	Partition int       `json:"partition"`
	Offset    int64     `json:"offset"`
	Time      time.Time `json:"time,omitzero"`
}

func coordinatesOf(m kafka.Message) coordinates {
	return coordinates{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Time: m.Time}
}

// origin returns the coordinates the worker saw the record at: its own, or
// for a dead letter those of its turnpike-source-* headers (the DLQ keeps
// the original timestamp). ok is false for a record that names no valid
// origin, which then stands for itself.
func origin(m kafka.Message) (c coordinates, fromHeaders bool) {
	t, p, o, fromHeaders := topic.Origin(m)
	return coordinates{Topic: t, Partition: p, Offset: o, Time: m.Time}, fromHeaders
}

// decoded is a record decoded as the worker decodes it.
type decoded struct {
	req events.Request
	// derived is true when the record carried no request id and req's is
	// derived from its origin.
	derived bool
}

// decodeRequest validates a record the way the worker does (strict schema,
// key matching the identity) and fills what the worker fills: the request
// id derived from the record's origin, created_at from its timestamp, the
// default strategy.
func decodeRequest(m kafka.Message, at coordinates, maxContent int) (decoded, error) {
	req, err := events.DecodeRequest(m.Value, maxContent)
	if err != nil {
		return decoded{}, err
	}
	if key := req.Identity().Key(); string(m.Key) != key {
		return decoded{}, fmt.Errorf("%w key: %q does not match the record's identity %q", events.ErrInvalid, truncate(string(m.Key), 64), key)
	}
	d := decoded{req: req}
	if req.RequestID == "" {
		d.req.RequestID = events.DerivedRequestID(at.Partition, at.Offset, at.Time)
		d.derived = true
	}
	if d.req.CreatedAt.IsZero() {
		d.req.CreatedAt = at.Time
	}
	if d.req.Strategy == "" {
		d.req.Strategy = events.StrategyEnqueue
	}
	return d, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// readerIdle is how long a fetch may wait before the reader checks whether
// it has passed the end of its range (offsets may have gaps: transaction
// markers, compaction).
const readerIdle = 2 * time.Second

// newPartitionReader reads one partition from offset start, without a
// consumer group (nothing is committed).
func newPartitionReader(brokers []string, topic string, partition int, start int64) (*kafka.Reader, error) {
	cfg := kafka.ReaderConfig{
		Brokers:       brokers,
		Topic:         topic,
		Partition:     partition,
		MinBytes:      1,
		MaxBytes:      16 << 20,
		MaxWait:       250 * time.Millisecond,
		QueueCapacity: 1024,
	}
	if err := cfg.Validate(); err != nil { // kafka.NewReader panics on a bad config
		return nil, fmt.Errorf("kafka reader: %w", err)
	}
	r := kafka.NewReader(cfg)
	if err := r.SetOffset(start); err != nil {
		r.Close()
		return nil, fmt.Errorf("kafka reader: %w", err)
	}
	return r, nil
}

// readRange calls fn with each record of partition r.Partition in
// [r.Next, r.End), in order, until the end, an error of fn, or ctx ends.
func readRange(ctx context.Context, brokers []string, topic string, r partitionRange, fn func(kafka.Message) error) error {
	if r.Next >= r.End {
		return nil
	}
	rd, err := newPartitionReader(brokers, topic, r.Partition, r.Next)
	if err != nil {
		return err
	}
	defer rd.Close()
	for {
		fctx, cancel := context.WithTimeout(ctx, readerIdle)
		m, err := rd.FetchMessage(fctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			if rd.Offset() >= r.End {
				return nil // the rest of the range holds no record
			}
			continue
		case err != nil:
			return fmt.Errorf("read %s/%d: %w", topic, r.Partition, err)
		}
		if m.Offset >= r.End {
			return nil
		}
		if err := fn(m); err != nil {
			return err
		}
		if m.Offset+1 >= r.End {
			return nil
		}
	}
}
