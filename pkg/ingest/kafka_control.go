package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// KafkaPositions finds a conversation's home partition of the requests
// topic (topic.Home, as every Turnpike producer places it) and the end
// offset of every partition. The partition count is read with every call,
// so a cancel made after partitions were added sees all of them.
type KafkaPositions struct {
	brokers []string
	topic   string
	client  *kafka.Client
}

// NewKafkaPositions returns positions in requestsTopic.
func NewKafkaPositions(brokers []string, requestsTopic string) *KafkaPositions {
	// A transport of its own, whose view of the partitions is at most a
	// second old: a cancel soon after partitions were added lists their
	// offsets too.
	tr := &kafka.Transport{MetadataTTL: time.Second}
	return &KafkaPositions{brokers: brokers, topic: requestsTopic, client: &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second, Transport: tr}}
}

// End implements Positions.
func (k *KafkaPositions) End(ctx context.Context, key []byte) (Position, error) {
	parts, err := topic.Partitions(ctx, k.brokers, k.topic)
	if err != nil {
		return Position{}, err
	}
	reqs := make([]kafka.OffsetRequest, len(parts))
	for i, p := range parts {
		reqs[i] = kafka.LastOffsetOf(p)
	}
	resp, err := k.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{k.topic: reqs}})
	if err != nil {
		return Position{}, fmt.Errorf("list offsets: %w", err)
	}
	pos := Position{Topic: k.topic, Partition: topic.Home(key, len(parts)), Ends: make([]int64, len(parts))}
	seen := 0
	for _, po := range resp.Topics[k.topic] {
		if po.Partition < 0 || po.Partition >= len(parts) {
			continue
		}
		if po.Error != nil {
			return Position{}, fmt.Errorf("list offsets of %s/%d: %w", k.topic, po.Partition, po.Error)
		}
		pos.Ends[po.Partition] = po.LastOffset
		seen++
	}
	if seen != len(parts) {
		return Position{}, fmt.Errorf("list offsets of %s: %d of %d partitions answered", k.topic, seen, len(parts))
	}
	return pos, nil
}

// kafkaCompletions reads the completions workers announce on the control
// topic, from every partition, starting at the end.
type kafkaCompletions struct {
	brokers []string
	topic   string
	log     *slog.Logger
}

// newKafkaCompletions returns a reader of controlTopic, which logs a failed
// read (retried) to log at warn, or discards it when log is nil.
func newKafkaCompletions(brokers []string, controlTopic string, log *slog.Logger) *kafkaCompletions {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &kafkaCompletions{brokers: brokers, topic: controlTopic, log: log}
}

// Run calls done with the request id of every completion until ctx ends.
func (k *kafkaCompletions) Run(ctx context.Context, done func(requestID string)) error {
	return topic.Tail(ctx, k.brokers, k.topic, func(m kafka.Message) {
		if c, err := events.DecodeControl(m.Value); err == nil && c.Type == events.ControlCompleted {
			done(c.RequestID)
		}
	}, func(err error) { k.log.Warn("read control topic", slog.Any("error", err)) })
}
