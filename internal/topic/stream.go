package topic

import (
	"fmt"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// The stream topic's client settings live here so that the worker, the push
// gateway and the load generator's raw-broker floor use exactly the same.

// StreamBatchSize is the most stream events one produce request of a
// partition carries.
const StreamBatchSize = 32

// StreamWriter returns the writer of stream events: keyed by identity with
// the Murmur2 balancer (one partition per conversation), acks=all, and a
// short batch timeout because token latency matters more than batch size.
// It is synchronous: WriteMessages returns once the batch is acknowledged.
func StreamWriter(brokers []string, topic string, batchTimeout time.Duration) *kafka.Writer {
	return &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        topic,
		Balancer:     &kafka.Murmur2Balancer{},
		BatchTimeout: batchTimeout,
		// kafka-go allocates room for BatchSize messages in every batch,
		// even a one-record one (152 bytes a message): 1000 cost 150 KB per
		// batch, about 7 % of a loaded devstack's CPU in zeroing, and 100
		// still made it the devstack's largest allocation (a quarter of all
		// bytes at 100 streams, about 2.2 events a batch). A worker keeps at
		// most two events of a run unacknowledged, so a partition's batch
		// holds at most twice its runs; beyond 32 the rest goes in the next
		// batch of the same partition, in order.
		BatchSize:    StreamBatchSize,
		RequiredAcks: kafka.RequireAll,
		MaxAttempts:  5,
		WriteTimeout: 10 * time.Second,
	}
}

// LiveMaxWait is the long-poll wait of a live partition reader's fetches
// (the push gateway's live readers, the load generator's floor readers).
// With MinBytes 1 a fetch returns as soon as a record arrives; this only
// bounds idle polls.
const LiveMaxWait = 500 * time.Millisecond

// PartitionReaderMaxBytes caps one fetch of a partition reader; a stream
// event is at most 64 KiB.
const PartitionReaderMaxBytes = 1 << 20

// PartitionReader returns a reader of one partition without a consumer
// group (nothing is committed). With MinBytes 1 a fetch returns as soon as a
// record arrives; maxWait only bounds idle long polls, and an idle poll
// answered late is no error (ReaderDialer). logf, if set, receives the
// reader's error logs.
func PartitionReader(brokers []string, topic string, partition int, maxWait time.Duration, logf func(msg string, args ...any)) (*kafka.Reader, error) {
	return NewPartitionReader(ReaderOptions{Brokers: brokers, Topic: topic, Partition: partition, MaxWait: maxWait, Logf: logf})
}

// ReaderOptions configure NewPartitionReader.
type ReaderOptions struct {
	Brokers   []string
	Topic     string
	Partition int
	MaxWait   time.Duration
	// Logf, if set, receives the reader's error logs.
	Logf func(msg string, args ...any)
	// Dial and ConnState are ReaderDialer's dial and state.
	Dial      DialFunc
	ConnState func(error)
	// EmptyFetch, if set, is called after every fetch that the broker
	// answered without records at the end of its wait: the reader's
	// fetches succeed though the partition is idle.
	EmptyFetch func()
}

// emptyFetchLog is the start of the message kafka-go v0.4.51's Reader
// logs (to its Logger, not its ErrorLogger) when the broker answered a
// fetch with no record within its wait (the "RequestTimedOut" case of
// reader.run, an ordinary idle long poll).
const emptyFetchLog = "no messages received from kafka within the allocated time"

// NewPartitionReader is PartitionReader with every option.
func NewPartitionReader(o ReaderOptions) (*kafka.Reader, error) {
	cfg := kafka.ReaderConfig{
		Brokers:   o.Brokers,
		Topic:     o.Topic,
		Partition: o.Partition,
		MinBytes:  1,
		MaxBytes:  PartitionReaderMaxBytes,
		MaxWait:   o.MaxWait,
		Dialer:    ReaderDialer(o.Dial, o.ConnState),
	}
	if o.Logf != nil {
		cfg.ErrorLogger = kafka.LoggerFunc(o.Logf)
	}
	if o.EmptyFetch != nil {
		empty := o.EmptyFetch
		cfg.Logger = kafka.LoggerFunc(func(msg string, _ ...any) {
			if strings.HasPrefix(msg, emptyFetchLog) {
				empty()
			}
		})
	}
	if err := cfg.Validate(); err != nil { // kafka.NewReader panics on a bad config
		return nil, fmt.Errorf("kafka reader: %w", err)
	}
	return kafka.NewReader(cfg), nil
}
