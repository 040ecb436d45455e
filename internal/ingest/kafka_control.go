package ingest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// KafkaPositions finds a conversation's partition of the requests topic
// (Murmur2 over the partition ids, as every producer places it) and that
// partition's end offset. Partition ids are cached for a minute.
type KafkaPositions struct {
	brokers []string
	topic   string
	client  *kafka.Client

	mu    sync.Mutex // guards parts and at
	parts []int
	at    time.Time
}

// NewKafkaPositions returns positions in requestsTopic.
func NewKafkaPositions(brokers []string, requestsTopic string) *KafkaPositions {
	return &KafkaPositions{brokers: brokers, topic: requestsTopic, client: &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}}
}

// End implements Positions.
func (k *KafkaPositions) End(ctx context.Context, key []byte) (string, int, int64, error) {
	parts, err := k.partitions(ctx)
	if err != nil {
		return "", 0, 0, err
	}
	p := topic.Home(key, len(parts))
	resp, err := k.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{
		k.topic: {kafka.LastOffsetOf(p)},
	}})
	if err != nil {
		return "", 0, 0, fmt.Errorf("list offsets: %w", err)
	}
	for _, po := range resp.Topics[k.topic] {
		if po.Partition == p {
			if po.Error != nil {
				return "", 0, 0, fmt.Errorf("list offsets of %s/%d: %w", k.topic, p, po.Error)
			}
			return k.topic, p, po.LastOffset, nil
		}
	}
	return "", 0, 0, fmt.Errorf("list offsets of %s/%d: no answer", k.topic, p)
}

func (k *KafkaPositions) partitions(ctx context.Context) ([]int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.parts != nil && time.Since(k.at) < time.Minute {
		return k.parts, nil
	}
	parts, err := topic.Partitions(ctx, k.brokers, k.topic)
	if err != nil {
		return nil, err
	}
	k.parts, k.at = parts, time.Now()
	return parts, nil
}

// KafkaCompletions reads the completions workers announce on the control
// topic, from every partition, starting at the end.
type KafkaCompletions struct {
	brokers []string
	topic   string
}

// NewKafkaCompletions returns a reader of controlTopic.
func NewKafkaCompletions(brokers []string, controlTopic string) *KafkaCompletions {
	return &KafkaCompletions{brokers: brokers, topic: controlTopic}
}

// Run calls done with the request id of every completion until ctx ends.
func (k *KafkaCompletions) Run(ctx context.Context, done func(requestID string)) error {
	return topic.Tail(ctx, k.brokers, k.topic, func(m kafka.Message) {
		if c, err := events.DecodeControl(m.Value); err == nil && c.Type == events.ControlCompleted {
			done(c.RequestID)
		}
	}, nil)
}
