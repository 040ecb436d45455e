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
	w := testenv.Producer(t, brokers, name)
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

// A Tail that cannot list the partitions at start (here: the topic does
// not exist yet, as when the broker asked has not heard of a topic created
// a moment ago) reports it and tries again, and tails the topic once it is
// there: the worker's control reader and ingest's completions would
// otherwise stop for the life of their service.
func TestTailRetriesAFailedStartAndTailsTheTopicOnceItIsThere(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	brokers := testenv.Kafka(t)
	name := testenv.Name(t, "tail-late")
	failed := make(chan error, 1)
	got := make(chan string, 100)
	tailCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- topic.Tail(tailCtx, brokers, name, func(m kafka.Message) { got <- string(m.Value) }, func(err error) {
			select {
			case failed <- err:
			default:
			}
		})
	}()
	select {
	case err := <-failed:
		t.Logf("reported while starting: %v", err)
	case err := <-done:
		t.Fatalf("Tail of a topic that does not exist yet returned %v, want it to retry", err)
	case <-ctx.Done():
		t.Fatal("Tail reported no failure for a topic that does not exist")
	}
	if err := topic.Ensure(ctx, brokers, 2, name); err != nil {
		t.Fatal(err)
	}
	w := testenv.Producer(t, brokers, name)
	// Tail starts at each partition's end once it has its readers; write
	// until a record written after that arrives.
	for i := 0; ; i++ {
		if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("k"), Value: []byte(fmt.Sprint(i))}); err != nil && ctx.Err() != nil {
			t.Fatal(err)
		}
		select {
		case v := <-got:
			t.Logf("tailed record %s", v)
			stop()
			if err := <-done; err != nil {
				t.Fatalf("Tail: %v", err)
			}
			return
		case err := <-done:
			t.Fatalf("Tail returned %v before it tailed a record", err)
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("no record tailed once the topic was there")
		}
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
