package worker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
)

// DLQ header names of API.md.
const (
	HeaderDLQReason       = "turnpike-dlq-reason"
	HeaderSourceTopic     = "turnpike-source-topic"
	HeaderSourcePartition = "turnpike-source-partition"
	HeaderSourceOffset    = "turnpike-source-offset"
	// HeaderDLQAttempts is how many times the record was run before it was
	// dead-lettered (1 for a record that failed validation).
	HeaderDLQAttempts = "turnpike-dlq-attempts"
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
	headers := make([]kafka.Header, 0, len(m.Headers)+4)
	for _, h := range m.Headers {
		switch h.Key {
		case HeaderDLQReason, HeaderSourceTopic, HeaderSourcePartition, HeaderSourceOffset, HeaderDLQAttempts:
			continue // a redriven record's old coordinates are replaced
		}
		headers = append(headers, h)
	}
	headers = append(headers,
		kafka.Header{Key: HeaderDLQReason, Value: []byte(reason)},
		kafka.Header{Key: HeaderSourceTopic, Value: []byte(m.Topic)},
		kafka.Header{Key: HeaderSourcePartition, Value: []byte(strconv.Itoa(m.Partition))},
		kafka.Header{Key: HeaderSourceOffset, Value: []byte(strconv.FormatInt(m.Offset, 10))},
		kafka.Header{Key: HeaderDLQAttempts, Value: []byte(strconv.Itoa(attempts))},
	)
	err := d.w.WriteMessages(ctx, kafka.Message{Key: m.Key, Value: m.Value, Headers: headers, Time: m.Time})
	if err != nil {
		return fmt.Errorf("dead-letter %s/%d/%d: %w", m.Topic, m.Partition, m.Offset, err)
	}
	return nil
}

func (d *deadLetters) Close() error { return d.w.Close() }
