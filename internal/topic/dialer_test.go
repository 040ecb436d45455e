package topic_test

import (
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
)

// TestAnIdleFetchAnsweredAfterMaxWaitIsNoErrorAndTheNextRecordIsFetchedWithoutABackoff:
// DESIGN.md "Fetching without stalls" (issue 25). The reader's fetch on an
// idle partition gets its empty answer only after MaxWait (the broker or
// the machine was slow); the reader must take it as an empty fetch, not a
// broken connection: no error, no second dial (kafka-go dials again only
// after the backoff that follows an error), and the record produced
// meanwhile is fetched on the same connection.
func TestAnIdleFetchAnsweredAfterMaxWaitIsNoErrorAndTheNextRecordIsFetchedWithoutABackoff(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	brokers := testenv.Kafka(t)
	name := testenv.Name(t, "idle")
	if err := topic.Ensure(ctx, brokers, 1, name); err != nil {
		t.Fatal(err)
	}
	const maxWait = 100 * time.Millisecond
	h := &testenv.HeldConns{}
	empty := make(chan struct{}, 1)
	r, err := topic.NewPartitionReader(topic.ReaderOptions{
		Brokers: brokers, Topic: name, MaxWait: maxWait, Dial: h.Dial,
		EmptyFetch: func() {
			select {
			case empty <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := make(chan kafka.Message, 1)
	go func() {
		if m, err := r.ReadMessage(ctx); err == nil {
			got <- m
		}
	}()

	// The partition is idle: one long poll ended empty. Hold the answer of
	// a later one past the reader's MaxWait deadline.
	select {
	case <-empty:
	case <-ctx.Done():
		t.Fatal("no empty fetch on the idle partition")
	}
	// The held read began after its fetch was sent, so its answer, coming
	// 1.5 MaxWait after the read began, is past kafka-go's MaxWait deadline
	// (HeldConns applies the connection's deadline to that instant: nothing
	// waits for it).
	held, release := h.Arm(maxWait + maxWait/2)
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("no fetch held")
	}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: name, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("after the idle poll")}); err != nil {
		t.Fatal(err)
	}
	close(release)

	select {
	case m := <-got:
		if string(m.Value) != "after the idle poll" {
			t.Fatalf("fetched %q", m.Value)
		}
	case <-ctx.Done():
		t.Fatal("the record was not fetched")
	}
	if s := r.Stats(); s.Dials != 1 || s.Errors != 0 {
		t.Fatalf("reader stats: %d dials, %d errors; want 1 dial and no error (a late empty answer taken as a broken connection is an error, a backoff and a second dial)", s.Dials, s.Errors)
	}
}
