package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// request is a request record as docs/api.md ("Request records") gives
// it: the identity triple as the key, the JSON record as the value.
type request struct {
	key, value []byte
}

// newRequest encodes a request to conversation id with pkg/events. A
// request id makes re-sending the same record idempotent; without one the
// worker derives one from where the record was written.
func newRequest(id events.Identity, requestID, content string) (request, error) {
	v, err := events.EncodeRequest(events.Request{V: events.Version, RequestID: requestID,
		Tenant: id.Tenant, User: id.User, Conversation: id.Conversation, Content: content})
	if err != nil {
		return request{}, err
	}
	return request{key: []byte(id.Key()), value: v}, nil
}

// placed is where a producer's record landed.
type placed struct {
	partition int
	offset    int64
}

// producer writes request records to the requests topic, each
// acknowledged by all in-sync replicas before Produce returns.
type producer interface {
	Produce(ctx context.Context, r request) (placed, error)
	Close() error
}

// saramaConfig is sarama's producer configuration for Turnpike: acks=all,
// successes returned (for a SyncProducer) and the home partition. sarama's
// default, NewHashPartitioner (FNV-1a), places most keys elsewhere.
//
// sarama v1.50.0 and later have NewMurmur2Partitioner; with an older
// sarama, give its custom hash partitioner Kafka's murmur2, with the
// Java client's "absolute value first" (h & 0x7fffffff), as in
// saramaCustomMurmur2.
func saramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Partitioner = sarama.NewMurmur2Partitioner
	return c
}

// saramaCustomMurmur2 is the home partition for a sarama before v1.50.0.
var saramaCustomMurmur2 = sarama.NewCustomPartitioner(sarama.WithAbsFirst(), sarama.WithCustomHashFunction(newMurmur2))

type saramaProducer struct {
	p     sarama.SyncProducer
	topic string
	// manual: the partitioner is NewManualPartitioner, and Produce
	// names the home partition itself.
	manual     bool
	partitions int
	client     sarama.Client // the manual producer's, closed after it
}

// newSaramaProducer returns a producer with sarama, configured by c
// (saramaConfig, typically).
func newSaramaProducer(brokers []string, topic string, c *sarama.Config) (*saramaProducer, error) {
	p, err := sarama.NewSyncProducer(brokers, c)
	if err != nil {
		return nil, fmt.Errorf("sarama producer: %w", err)
	}
	return &saramaProducer{p: p, topic: topic}, nil
}

// newSaramaManualProducer returns a sarama producer that sets each
// record's partition to its home itself (NewManualPartitioner), by the
// topic's partition count as it starts. Partitions added later move keys:
// restart it then.
func newSaramaManualProducer(brokers []string, topic string) (*saramaProducer, error) {
	c := saramaConfig()
	c.Producer.Partitioner = sarama.NewManualPartitioner
	cl, err := sarama.NewClient(brokers, c)
	if err != nil {
		return nil, fmt.Errorf("sarama client: %w", err)
	}
	parts, err := cl.Partitions(topic)
	if err == nil && len(parts) == 0 {
		err = fmt.Errorf("no partitions")
	}
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("sarama: partitions of %s: %w", topic, err)
	}
	p, err := sarama.NewSyncProducerFromClient(cl)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("sarama producer: %w", err)
	}
	return &saramaProducer{p: p, topic: topic, manual: true, partitions: len(parts), client: cl}, nil
}

func (p *saramaProducer) Produce(_ context.Context, r request) (placed, error) {
	m := &sarama.ProducerMessage{Topic: p.topic, Key: sarama.ByteEncoder(r.key), Value: sarama.ByteEncoder(r.value)}
	if p.manual {
		m.Partition = int32(homePartition(r.key, p.partitions))
	}
	part, off, err := p.p.SendMessage(m)
	if err != nil {
		return placed{}, fmt.Errorf("sarama send: %w", err)
	}
	return placed{partition: int(part), offset: off}, nil
}

func (p *saramaProducer) Close() error {
	err := p.p.Close()
	if p.client != nil {
		err = errors.Join(err, p.client.Close())
	}
	return err
}

// franzProducer writes with franz-go. Its default partitioner,
// UniformBytesPartitioner(64<<10, true, true, nil), places keyed records
// by Kafka's murmur2: the home partition, with no setting.
type franzProducer struct{ c *kgo.Client }

// newFranzProducer returns a producer with franz-go's kgo; opts are added
// to the defaults (for a partitioner of your own: it must hash keys with
// kgo.KafkaHasher and murmur2, as StickyKeyPartitioner(nil) does).
func newFranzProducer(brokers []string, topic string, opts ...kgo.Opt) (*franzProducer, error) {
	c, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks())}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("franz-go client: %w", err)
	}
	return &franzProducer{c: c}, nil
}

func (p *franzProducer) Produce(ctx context.Context, r request) (placed, error) {
	rec, err := p.c.ProduceSync(ctx, &kgo.Record{Key: r.key, Value: r.value}).First()
	if err != nil {
		return placed{}, fmt.Errorf("franz-go produce: %w", err)
	}
	return placed{partition: int(rec.Partition), offset: rec.Offset}, nil
}

func (p *franzProducer) Close() error { p.c.Close(); return nil }

// kafkaGoProducer writes with kafka-go. Its Writer's default balancer,
// RoundRobin, ignores the key: set Balancer to &kafka.Murmur2Balancer{}.
type kafkaGoProducer struct{ w *kafka.Writer }

// newKafkaGoProducer returns a producer with kafka-go placing by balancer
// (&kafka.Murmur2Balancer{} for the home partition; nil is kafka-go's
// default).
func newKafkaGoProducer(brokers []string, topic string, balancer kafka.Balancer) *kafkaGoProducer {
	return &kafkaGoProducer{w: &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: balancer,
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}}
}

func (p *kafkaGoProducer) Produce(ctx context.Context, r request) (placed, error) {
	// kafka-go reports no partition or offset for a written message.
	if err := p.w.WriteMessages(ctx, kafka.Message{Key: r.key, Value: r.value}); err != nil {
		return placed{partition: -1, offset: -1}, fmt.Errorf("kafka-go write: %w", err)
	}
	return placed{partition: -1, offset: -1}, nil
}

func (p *kafkaGoProducer) Close() error { return p.w.Close() }
