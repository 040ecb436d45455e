package worker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// kafkaSink writes stream events to the stream topic, keyed by identity so
// that a conversation's events stay in one partition, in order.
type kafkaSink struct {
	w    *kafka.Writer
	bufs sync.Pool
}

func newKafkaSink(brokers []string, streamTopic string, batchTimeout time.Duration) *kafkaSink {
	return &kafkaSink{
		w:    topic.StreamWriter(brokers, streamTopic, batchTimeout),
		bufs: sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }},
	}
}

// Emit writes one event and returns once the broker acknowledged it.
func (s *kafkaSink) Emit(ctx context.Context, id events.Identity, e events.Event) error {
	bp := s.bufs.Get().(*[]byte)
	buf := events.AppendEvent((*bp)[:0], e)
	// The writer holds the message until WriteMessages returns (synchronous
	// mode), so the buffer can be reused afterwards.
	err := s.w.WriteMessages(ctx, kafka.Message{Key: []byte(id.Key()), Value: buf})
	*bp = buf
	s.bufs.Put(bp)
	if err != nil {
		return fmt.Errorf("write stream event: %w", err)
	}
	return nil
}

func (s *kafkaSink) Close() error { return s.w.Close() }
