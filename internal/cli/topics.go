package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
)

// topicsRetryMax caps the pause between attempts while Kafka is not ready.
const topicsRetryMax = 5 * time.Second

// errTooFewPartitions marks a topic that exists with fewer partitions than
// asked: retrying cannot help.
var errTooFewPartitions = errors.New("fewer partitions than asked")

// runTopics is `turnpike topics`: it creates every Turnpike topic that does
// not exist yet (topic.Ensure), then checks that each has at least the
// partitions asked, retrying while Kafka is not ready. It is what the
// topic-creation Job of deploy/k8s runs.
func runTopics(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("turnpike topics", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: turnpike topics [flags]\n\nCreate the Turnpike topics that do not exist yet and check their partitions.\n\n")
		fs.PrintDefaults()
	}
	set := flagenv.New(fs, lookup)
	var (
		brokers    []string
		prefix     string
		partitions int
		stream     int
		timeout    time.Duration
	)
	set.List(&brokers, "kafka-brokers", "TURNPIKE_KAFKA_BROKERS", nil, "Kafka bootstrap brokers")
	set.String(&prefix, "topic-prefix", "TURNPIKE_TOPIC_PREFIX", topic.DefaultPrefix, "prefix of the topic names")
	set.Int(&partitions, "partitions", "TURNPIKE_PARTITIONS", topic.DefaultPartitions, "partitions of each topic created (replication: the brokers' default)")
	set.Int(&stream, "stream-partitions", "TURNPIKE_STREAM_PARTITIONS", 0, "partitions of the stream topic (0: -partitions)")
	set.Duration(&timeout, "timeout", "", 2*time.Minute, "how long to retry while Kafka does not answer")
	if err := set.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "turnpike topics:", err)
		return 2
	}
	var problems []error
	if len(brokers) == 0 {
		problems = append(problems, errors.New("no brokers: pass -kafka-brokers or set TURNPIKE_KAFKA_BROKERS"))
	}
	if partitions < 1 {
		problems = append(problems, fmt.Errorf("-partitions %d: want at least 1", partitions))
	}
	if stream < 0 {
		problems = append(problems, fmt.Errorf("-stream-partitions %d: want at least 1 (0: -partitions)", stream))
	}
	if timeout <= 0 {
		problems = append(problems, fmt.Errorf("-timeout %v: want a positive duration", timeout))
	}
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if err := errors.Join(problems...); err != nil {
		fmt.Fprintln(stderr, "turnpike topics:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	names := topic.NewNames(prefix)
	want := map[string]int{names.Requests: partitions, names.DLQ: partitions, names.Control: partitions,
		names.Stream: topic.StreamPartitions(partitions, stream)}
	counts, err := ensureTopics(ctx, brokers, want, names.All(), stderr)
	if err != nil {
		fmt.Fprintln(stderr, "turnpike topics:", err)
		return 1
	}
	for i, name := range names.All() {
		fmt.Fprintf(stdout, "%s\t%d partitions\n", name, counts[i])
	}
	return 0
}

// ensureTopics creates the missing topics, each with its count in want,
// and returns each topic's partition count, retrying transient failures (Kafka not reachable yet, a
// topic's metadata not propagated yet) until ctx ends.
func ensureTopics(ctx context.Context, brokers []string, want map[string]int, names []string, stderr io.Writer) ([]int, error) {
	pause := 250 * time.Millisecond
	for {
		counts, err := ensureOnce(ctx, brokers, want, names)
		if err == nil || permanent(err) {
			return counts, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("kafka not ready in time: %w", err)
		}
		fmt.Fprintf(stderr, "turnpike topics: %v (retrying in %v)\n", err, pause)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("kafka not ready in time: %w", err)
		case <-t.C:
		}
		pause = min(2*pause, topicsRetryMax)
	}
}

func ensureOnce(ctx context.Context, brokers []string, want map[string]int, names []string) ([]int, error) {
	for _, name := range names {
		if err := topic.Ensure(ctx, brokers, want[name], name); err != nil {
			return nil, err
		}
	}
	counts := make([]int, len(names))
	var errs []error
	for i, name := range names {
		partitions := want[name]
		ids, err := topic.Partitions(ctx, brokers, name)
		switch {
		case err != nil:
			errs = append(errs, err)
		case len(ids) < partitions:
			// Adding partitions moves conversations to other partitions
			// (their key hashes anew), so it is an operator's decision.
			errs = append(errs, fmt.Errorf("topic %s has %d partitions, %w (%d): add them with your Kafka tooling (with Strimzi: the KafkaTopic's spec.partitions) or lower -partitions (the stream topic: -stream-partitions)",
				name, len(ids), errTooFewPartitions, partitions))
		}
		counts[i] = len(ids)
	}
	return counts, errors.Join(errs...)
}

// permanent reports whether err cannot go away by retrying: too few
// partitions, or Kafka refusing the request itself (an invalid replication
// factor or topic name, no permission, a policy). Everything else (no
// broker reachable yet, metadata not propagated yet) is retried.
func permanent(err error) bool {
	if errors.Is(err, errTooFewPartitions) {
		return true
	}
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return false
	}
	switch kerr {
	case kafka.InvalidTopic, kafka.InvalidPartitionNumber, kafka.InvalidReplicationFactor, kafka.InvalidReplicaAssignment,
		kafka.InvalidConfiguration, kafka.InvalidRequest, kafka.PolicyViolation, kafka.UnsupportedVersion,
		kafka.TopicAuthorizationFailed, kafka.ClusterAuthorizationFailed:
		return true
	}
	return false
}
