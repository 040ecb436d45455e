package worker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/topic"
)

// The dead letters' header names (docs/api.md#dead-letters).
const (
	headerDLQReason       = "turnpike-dlq-reason"
	headerSourceTopic     = topic.HeaderSourceTopic
	headerSourcePartition = topic.HeaderSourcePartition
	headerSourceOffset    = topic.HeaderSourceOffset
	// headerDLQAttempts is how many times the record was run before it was
	// dead-lettered (1 for a record that failed validation).
	headerDLQAttempts = "turnpike-dlq-attempts"
)

// deadLetters writes records that cannot be processed to the DLQ topic with
// their original key, value and headers, plus the reason and source
// coordinates.
type deadLetters struct {
	w *kafka.Writer
}

func newDeadLetters(brokers []string, topic string) *deadLetters {
	return &deadLetters{w: &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        topic,
		Balancer:     &kafka.Murmur2Balancer{},
		BatchTimeout: time.Millisecond,
		RequiredAcks: kafka.RequireAll,
		MaxAttempts:  5,
		WriteTimeout: 10 * time.Second,
	}}
}

func (d *deadLetters) send(ctx context.Context, m kafka.Message, reason string, attempts int) error {
	const maxReason = 1024
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	// The source coordinates are where the record was first written: a
	// record moved to its home partition names its original placement,
	// from which a missing request id is derived.
	headers := append(topic.SourceHeaders(m, headerDLQReason, headerDLQAttempts),
		kafka.Header{Key: headerDLQReason, Value: []byte(reason)},
		kafka.Header{Key: headerDLQAttempts, Value: []byte(strconv.Itoa(attempts))},
	)
	err := d.w.WriteMessages(ctx, kafka.Message{Key: m.Key, Value: m.Value, Headers: headers, Time: m.Time})
	if err != nil {
		return fmt.Errorf("dead-letter %s/%d/%d: %w", m.Topic, m.Partition, m.Offset, err)
	}
	return nil
}

func (d *deadLetters) Close() error { return d.w.Close() }
