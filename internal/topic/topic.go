package topic

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/segmentio/kafka-go"
)

// DefaultPrefix is the default topic name prefix (TURNPIKE_TOPIC_PREFIX).
const DefaultPrefix = "turnpike."

// DefaultPartitions is the partition count of topics created at start.
const DefaultPartitions = 12

// Names are the topic names under one prefix.
type Names struct {
	Requests string // user messages, keyed by identity
	DLQ      string // request records that failed validation or processing
	Stream   string // stream events, keyed by identity
	Control  string // cancel and other control records
}

// NewNames returns the topic names under prefix.
func NewNames(prefix string) Names {
	return Names{
		Requests: prefix + "requests",
		DLQ:      prefix + "requests.dlq",
		Stream:   prefix + "stream",
		Control:  prefix + "control",
	}
}

// All lists every topic.
func (n Names) All() []string { return []string{n.Requests, n.DLQ, n.Stream, n.Control} }

// StreamPartitions is the partition count of the stream topic created at
// start: stream (TURNPIKE_STREAM_PARTITIONS) when set (> 0), else
// partitions (TURNPIKE_PARTITIONS), the other topics' count. The stream
// topic may have a count of its own because every reader and writer of it
// places a key by the stream topic's own partition list: the push gateway
// sizes it by its replicas (docs/pushgw.md "Sizing partitions"), the
// worker's consumer group the others.
func StreamPartitions(partitions, stream int) int {
	if stream > 0 {
		return stream
	}
	return partitions
}

// Ensure creates each topic that does not exist yet, with the given
// partition count and the broker's default replication factor. Existing
// topics are left as they are.
func Ensure(ctx context.Context, brokers []string, partitions int, topics ...string) error {
	if len(brokers) == 0 {
		return errors.New("ensure topics: no brokers")
	}
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	cfgs := make([]kafka.TopicConfig, 0, len(topics))
	for _, t := range topics {
		cfgs = append(cfgs, kafka.TopicConfig{Topic: t, NumPartitions: partitions, ReplicationFactor: -1})
	}
	resp, err := cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: cfgs})
	if err != nil {
		return fmt.Errorf("ensure topics: %w", err)
	}
	var errs []error
	for t, err := range resp.Errors {
		if err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
			errs = append(errs, fmt.Errorf("create topic %s: %w", t, err))
		}
	}
	return errors.Join(errs...)
}

// Partitions returns the partition ids of topic, as the cluster has them
// now: it asks a broker over a transport of its own (kafka-go's shared
// transport answers metadata requests from a cache that may not know a
// partition added seconds ago).
func Partitions(ctx context.Context, brokers []string, topic string) ([]int, error) {
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second, Transport: tr}
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata %s: %w", topic, err)
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("metadata %s: %w", topic, t.Error)
		}
		ids := make([]int, len(t.Partitions))
		for i, p := range t.Partitions {
			ids[i] = p.ID
		}
		return ids, nil
	}
	return nil, fmt.Errorf("metadata %s: topic not found", topic)
}

// Ping checks that a broker answers, for readiness probes.
func Ping(ctx context.Context, brokers []string) error {
	var d net.Dialer
	var errs []error
	for _, b := range brokers {
		c, err := d.DialContext(ctx, "tcp", b)
		if err == nil {
			dl, ok := ctx.Deadline()
			if !ok {
				dl = time.Now().Add(5 * time.Second)
			}
			_ = c.SetDeadline(dl)
			conn := kafka.NewConn(c, "", 0)
			_, err = conn.ApiVersions()
			conn.Close()
			if err == nil {
				return nil
			}
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("kafka unreachable: %w", errors.Join(errs...))
}
