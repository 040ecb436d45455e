package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// DefaultRequestsTopic is the requests topic under the default prefix.
const DefaultRequestsTopic = "turnpike.requests"

// Producer writes requests straight to the requests topic, for asynchronous
// producers that do not go through the HTTP API (batch jobs, other
// services). It is trusted: it names the tenant and user itself. It is safe
// for concurrent use.
type Producer struct {
	w *kafka.Writer
}

// NewProducer returns a producer writing to topic (DefaultRequestsTopic when
// empty) on brokers, with acks=all and the Murmur2 key balancer the workers
// and the push gateway rely on.
func NewProducer(brokers []string, topic string) *Producer {
	if topic == "" {
		topic = DefaultRequestsTopic
	}
	return &Producer{w: &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        topic,
		Balancer:     &kafka.Murmur2Balancer{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond,
		MaxAttempts:  5,
		WriteTimeout: 10 * time.Second,
	}}
}

// ProduceOptions are the optional parts of Produce.
type ProduceOptions struct {
	// RequestID makes the request idempotent: the same id is persisted at
	// most once. Default: a random one (pass one for retries).
	RequestID string
	// Strategy is enqueue (default), reject or interrupt.
	Strategy string
}

// Produce validates the request and writes it, returning once the broker
// acknowledged it. It returns the request id.
func (p *Producer) Produce(ctx context.Context, id events.Identity, content string, o ProduceOptions) (string, error) {
	if o.RequestID == "" {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		o.RequestID = "p-" + hex.EncodeToString(b[:])
	}
	req := events.Request{V: events.Version, RequestID: o.RequestID, Tenant: id.Tenant, User: id.User,
		Conversation: id.Conversation, Content: content, Strategy: events.Strategy(o.Strategy), CreatedAt: time.Now().UTC()}
	if err := req.Validate(0); err != nil {
		return "", fmt.Errorf("turnpike: produce: %w", err)
	}
	v, err := events.EncodeRequest(req)
	if err != nil {
		return "", err
	}
	if err := p.w.WriteMessages(ctx, kafka.Message{Key: []byte(id.Key()), Value: v}); err != nil {
		return "", fmt.Errorf("turnpike: produce: %w", err)
	}
	return o.RequestID, nil
}

// Close flushes and closes the producer.
func (p *Producer) Close() error { return p.w.Close() }
