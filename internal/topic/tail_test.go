package topic_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
)

func TestTailSeesEveryPartitionFromNowOn(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	brokers := testenv.Kafka(t)
	name := testenv.Name(t, "tail")
	if err := topic.Ensure(ctx, brokers, 4, name); err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: name, Balancer: &kafka.Murmur2Balancer{}, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	write := func(prefix string) {
		t.Helper()
		var msgs []kafka.Message
		for i := range 20 {
			msgs = append(msgs, kafka.Message{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("%s-%d", prefix, i))})
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	write("before")

	var mu sync.Mutex
	seen := map[string]bool{}
	partitions := map[int]bool{}
	tailCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- topic.Tail(tailCtx, brokers, name, func(m kafka.Message) {
			mu.Lock()
			defer mu.Unlock()
			seen[string(m.Value)] = true
			partitions[m.Partition] = true
		}, nil)
	}()
	// Tail starts at each partition's end once it has its readers; write
	// until the records after that arrive.
	for {
		write("after")
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= 20 || ctx.Err() != nil {
			break
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Tail: %v", err)
	}
	for v := range seen {
		if len(v) >= 6 && v[:6] == "before" {
			t.Fatalf("Tail delivered %s, written before it started", v)
		}
	}
	if len(seen) < 20 || len(partitions) < 2 {
		t.Fatalf("saw %d records from %d partitions", len(seen), len(partitions))
	}
}

func TestTailOfAMissingTopicFailsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	if err := topic.Tail(ctx, testenv.Kafka(t), "no-such-topic-"+testenv.Name(t, "x"), func(kafka.Message) {}, nil); err == nil {
		t.Fatal("Tail of a missing topic returned nil")
	}
}

// A Tail stopped while it is still listing the partitions has stopped, not
// failed: a service stopped right after it started (the devstack of a test
// that had nothing to do) must not report "metadata <topic>: context
// canceled" as its error. The context ends before Tail begins, so Tail is
// always still starting, even for a topic that does not exist.
func TestTailStoppedWhileStartingReturnsNil(t *testing.T) {
	t.Parallel()
	brokers := testenv.Kafka(t)
	live := testenv.Context(t, 30*time.Second)
	name := testenv.Name(t, "tail")
	if err := topic.Ensure(live, brokers, 4, name); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(live)
	stop()
	for _, name := range []string{name, "no-such-topic-" + testenv.Name(t, "x")} {
		if err := topic.Tail(ctx, brokers, name, func(kafka.Message) { t.Error("a record reached a stopped Tail") }, nil); err != nil {
			t.Errorf("Tail of %s stopped while starting: %v, want nil", name, err)
		}
	}
}
