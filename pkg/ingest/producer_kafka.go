package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/tracing"
)

// Settings of the KafkaProducer's writer. Together they keep a write to an
// unreachable broker well inside DefaultProduceTimeout; the caller's ctx is
// the hard bound either way.
const (
	kafkaDialTimeout  = 3 * time.Second
	kafkaWriteTimeout = 5 * time.Second
	kafkaMaxAttempts  = 3
	kafkaBackoffMin   = 50 * time.Millisecond
	kafkaBackoffMax   = 500 * time.Millisecond
	// kafkaBatchTimeout is how long a batch waits for more records:
	// kafka-go's default of 1s would add a second to every POST.
	kafkaBatchTimeout = time.Millisecond
)

// kafkaProducer is the Producer of a kafka-go Writer: synchronous, acks=all,
// records placed by the Murmur2 hash of their key (the placement the worker
// and push gateway rely on). The topic must exist; it is not auto-created.
type kafkaProducer struct {
	w         *kafka.Writer
	transport *kafka.Transport
	// tracing, when set, carries ctx's trace context in the record headers.
	tracing *tracing.Tracing
}

// withTracing makes Produce carry ctx's trace context in the record's
// headers, for the worker to continue the trace. It returns p.
func (p *kafkaProducer) withTracing(t *tracing.Tracing) *kafkaProducer {
	p.tracing = t
	return p
}

// newKafkaProducer returns a producer writing to topic on brokers. It does
// not connect until the first Produce.
func newKafkaProducer(brokers []string, topic string) (*kafkaProducer, error) {
	var errs []error
	if len(brokers) == 0 {
		errs = append(errs, errors.New("no brokers"))
	}
	if topic == "" {
		errs = append(errs, errors.New("no topic"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("kafka producer: %w", errors.Join(errs...))
	}
	t := &kafka.Transport{DialTimeout: kafkaDialTimeout, ClientID: "turnpike-ingest"}
	w := &kafka.Writer{
		Addr:            kafka.TCP(brokers...),
		Topic:           topic,
		Balancer:        &kafka.Murmur2Balancer{},
		RequiredAcks:    kafka.RequireAll,
		BatchTimeout:    kafkaBatchTimeout,
		MaxAttempts:     kafkaMaxAttempts,
		WriteBackoffMin: kafkaBackoffMin,
		WriteBackoffMax: kafkaBackoffMax,
		ReadTimeout:     kafkaWriteTimeout,
		WriteTimeout:    kafkaWriteTimeout,
		Transport:       t,
	}
	return &kafkaProducer{w: w, transport: t}, nil
}

// Produce writes one record and returns once every in-sync replica has it,
// or with an error when ctx ends first or the write fails.
func (p *kafkaProducer) Produce(ctx context.Context, key, value []byte) error {
	if err := p.w.WriteMessages(ctx, kafka.Message{Key: key, Value: value, Headers: p.tracing.KafkaHeaders(ctx)}); err != nil {
		return fmt.Errorf("produce to %s: %w", p.w.Topic, err)
	}
	return nil
}

// Close waits for writes in flight (a batch gives up after kafkaMaxAttempts
// attempts of at most kafkaWriteTimeout each), then closes the producer's
// connections.
func (p *kafkaProducer) Close() error {
	err := p.w.Close()
	p.transport.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("close kafka producer: %w", err)
	}
	return nil
}
