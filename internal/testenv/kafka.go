package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Producer is a writer of records to topic on brokers that places them as
// ingest does (kafka-go's Murmur2Balancer, Kafka's default partitioner: a
// conversation's records go to its home partition), waits for every
// in-sync replica and sends each batch after 1 ms. It has a transport of
// its own (no metadata cached by an earlier writer) and is closed, its
// connections with it, when the test ends. A test may set more fields
// (MaxAttempts, BatchSize) before its first write.
func Producer(t testing.TB, brokers []string, topic string) *kafka.Writer {
	t.Helper()
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Murmur2Balancer{},
		BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll, Transport: tr}
	t.Cleanup(func() {
		_ = w.Close()
		tr.CloseIdleConnections()
	})
	return w
}

// Produce writes msgs to topic with a Producer, in one batch, and fails t
// if the write fails.
func Produce(t testing.TB, ctx context.Context, brokers []string, topic string, msgs ...kafka.Message) {
	t.Helper()
	if err := Producer(t, brokers, topic).WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// Request is the request record ingest would write for content sent by
// id: version 1, enqueued, created now, keyed by the conversation. An
// empty requestID leaves it out.
func Request(id events.Identity, requestID, content string) kafka.Message {
	return Record(events.Request{V: 1, RequestID: requestID, Tenant: id.Tenant, User: id.User, Conversation: id.Conversation,
		Content: content, Strategy: events.StrategyEnqueue, CreatedAt: time.Now().UTC()})
}

// Record is r encoded and keyed by its conversation. It panics when r does
// not encode: a test's own mistake.
func Record(r events.Request) kafka.Message {
	b, err := events.EncodeRequest(r)
	if err != nil {
		panic(err)
	}
	return kafka.Message{Key: []byte(r.Identity().Key()), Value: b}
}

// EndOffsets returns the end offset of each of topic's partitions
// 0 … partitions-1, read with one ListOffsets request; t fails on any
// error.
func EndOffsets(t testing.TB, ctx context.Context, brokers []string, topic string, partitions int) []int64 {
	t.Helper()
	var reqs []kafka.OffsetRequest
	for p := range partitions {
		reqs = append(reqs, kafka.LastOffsetOf(p))
	}
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 5 * time.Second}
	resp, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil || len(resp.Topics[topic]) != partitions {
		t.Fatalf("end offsets of %s: %+v, %v", topic, resp, err)
	}
	ends := make([]int64, partitions)
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			t.Fatalf("end offset of %s/%d: %v", topic, po.Partition, po.Error)
		}
		ends[po.Partition] = po.LastOffset
	}
	return ends
}
