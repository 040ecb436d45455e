package e2e

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/testenv/stacktest"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/devstack"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// The default partitioners of the clients whose placement differs from
// ingest's Murmur2. The placements are implemented here (no sarama or
// librdkafka in the module; interop_test.go and examples/producers run the
// real clients and check these placements): librdkafka's consistent_random, kcat's
// default, is CRC32 (IEEE) of the key modulo the partition count, which is
// kafka-go's CRC32Balancer with Consistent set; sarama's HashPartitioner is
// FNV-1a 32 of the key, as an int32 modulo the count, negated when negative.
var (
	librdkafkaPlacement = kafka.CRC32Balancer{Consistent: true}
	saramaPlacement     = kafka.BalancerFunc(func(m kafka.Message, partitions ...int) int {
		h := fnv.New32a()
		h.Write(m.Key)
		p := int32(h.Sum32()) % int32(len(partitions))
		if p < 0 {
			p = -p
		}
		return partitions[p]
	})
)

func newForeignProducers(t *testing.T, brokers []string, requests string) (librdkafka, sarama *kafka.Writer) {
	t.Helper()
	mk := func(b kafka.Balancer) *kafka.Writer {
		w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: requests, Balancer: b, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
		t.Cleanup(func() { w.Close() })
		return w
	}
	return mk(librdkafkaPlacement), mk(saramaPlacement)
}

// produceDirect writes one request record with w; an empty requestID
// leaves the id to the worker (derived from the record's coordinates).
func produceDirect(t *testing.T, ctx context.Context, w *kafka.Writer, id events.Identity, requestID, content string, strategy events.Strategy) {
	t.Helper()
	v, err := events.EncodeRequest(events.Request{V: events.Version, RequestID: requestID, Tenant: id.Tenant, User: id.User,
		Conversation: id.Conversation, Content: content, Strategy: strategy})
	if err != nil {
		t.Fatal(err)
	}
	// A writer's first metadata may not list a topic created a moment ago:
	// retried until it does, or until ctx ends.
	for {
		err := w.WriteMessages(ctx, kafka.Message{Key: []byte(id.Key()), Value: v})
		if err == nil {
			return
		}
		if !errors.Is(err, kafka.UnknownTopicOrPartition) || ctx.Err() != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%v, until %v", err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// partitionIDs returns 0..n-1, the partition ids of a topic of n
// partitions, as kafka-go's balancers take them.
func partitionIDs(n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	return ids
}

// mixedConversation returns a conversation whose key three placements put
// in three different partitions: ingest's Murmur2 (its home), librdkafka's
// CRC32 and sarama's FNV-1a.
func mixedConversation(t *testing.T, tenant, user, prefix string, partitions int) (events.Identity, int) {
	t.Helper()
	ids := partitionIDs(partitions)
	for i := range 1000 {
		id := events.Identity{Tenant: tenant, User: user, Conversation: fmt.Sprintf("%s-%d", prefix, i)}
		m := kafka.Message{Key: []byte(id.Key())}
		home, crc, fnv := topic.Home(m.Key, partitions), librdkafkaPlacement.Balance(m, ids...), saramaPlacement.Balance(m, ids...)
		if home != crc && home != fnv && crc != fnv {
			return id, home
		}
	}
	t.Fatal("no conversation with three distinct placements")
	return events.Identity{}, 0
}

// homeRequestIDs reads partition home of the requests topic from the start
// until it holds n records of conv, and returns their request ids (derived
// from the first placement when a record carries none), in topic order.
func homeRequestIDs(t *testing.T, ctx context.Context, brokers []string, requests string, home int, conv events.Identity, n int) []string {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: requests, Partition: home, MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	var ids []string
	for len(ids) < n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("read home partition %d after %d records of %s: %v", home, len(ids), conv, err)
		}
		if string(m.Key) != conv.Key() {
			continue
		}
		req, err := events.DecodeRequest(m.Value, 0)
		if err != nil {
			t.Fatalf("record in the home partition does not decode: %v", err)
		}
		if req.RequestID == "" {
			_, p, o, _ := topic.Origin(m)
			req.RequestID = events.DerivedRequestID(p, o, m.Time)
		}
		ids = append(ids, req.RequestID)
	}
	return ids
}

// completions reads events until n run.completed arrived and returns how
// many times each request started, and the status each completed with
// last.
func (w *watcher) completions(ctx context.Context, n int) (started map[string]int, status map[string]events.Status) {
	w.t.Helper()
	started, status = map[string]int{}, map[string]events.Status{}
	for done := 0; done < n; {
		switch e := w.next(ctx).(type) {
		case *events.RunStartedEvent:
			started[e.RequestID]++
		case *events.RunCompletedEvent:
			status[e.RequestID] = e.Status
			done++
		}
	}
	return started, status
}

// untilStatus is until, failing unless the request completed with want.
func (w *watcher) untilStatus(ctx context.Context, requestID string, want events.Status) run {
	w.t.Helper()
	r := w.until(ctx, requestID)
	if r.status != want {
		w.t.Fatalf("request %s completed %s, want %s", requestID, r.status, want)
	}
	return r
}

// sendRunning holds w's conversation at a gate after two words, sends
// content (a long answer, with pauses) to it, and returns its request id
// and the gate once it has streamed them.
func (w *watcher) sendRunning(ctx context.Context, gates *stacktest.Gates, c *client.Client, content string) (string, *stacktest.Gate) {
	w.t.Helper()
	gate := gates.Hold(w.conv, 2)
	id := send(w.t, ctx, c, w.conv, content)
	w.waitWords(ctx, id, 2)
	return id, gate
}

// oneAtATime fails unless the conversation's runs were one at a time.
func oneAtATime(t *testing.T, seen []events.Event) {
	t.Helper()
	if err := testenv.OneRunAtATime(seen); err != nil {
		t.Fatal(err)
	}
}

func TestDirectRecordsOfAnyPartitionerFollowTheirConversation(t *testing.T) {
	var requests string
	const partitions = 4
	gates := stacktest.NewGates() // answers that must still run when the test acts on them
	s := gatedStack(t, gates, func(c *devstack.Config) {
		requests = topic.NewNames(c.Worker.TopicPrefix).Requests
		c.Worker.Partitions = partitions
	})
	ann := s.client(t, "acme", "ann")
	rdk, sarama := newForeignProducers(t, s.Brokers, requests)
	// mixed is a fresh conversation of ann that the three placements put
	// in three partitions, its home partition, and a watcher of it.
	mixed := func(t *testing.T, ctx context.Context, prefix string) (events.Identity, int, *watcher) {
		t.Helper()
		id, home := mixedConversation(t, "acme", "ann", prefix, partitions)
		return id, home, watch(t, ctx, ann, id.Conversation, "")
	}

	t.Run("records placed by CRC32 and FNV-1a run one at a time, in the home partition's order, numbered in sequence", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		id, home, w := mixed(t, ctx, "order")
		// Each answer takes a while, so that a request run beside another
		// would show.
		const slow = " x y z [[delay:15ms]]"
		// The moved records reach the home partition after the POSTs sent
		// with them, in an order the test reads from the partition.
		var want []string // request ids ("" for the derived one), as sent
		want = append(want, send(t, ctx, ann, id.Conversation, "a1"+slow))
		produceDirect(t, ctx, rdk, id, "order-b2", "b2"+slow, "")
		produceDirect(t, ctx, sarama, id, "order-c3", "c3"+slow, "")
		want = append(want, "order-b2", "order-c3", send(t, ctx, ann, id.Conversation, "d4"+slow))
		produceDirect(t, ctx, rdk, id, "", "e5"+slow, "") // no request id: derived from where it was written
		want = append(want, "")
		produceDirect(t, ctx, sarama, id, "order-f6", "f6"+slow, "")
		want = append(want, "order-f6", send(t, ctx, ann, id.Conversation, "g7"+slow))

		started, _ := w.completions(ctx, 7)
		oneAtATime(t, w.seen)
		h := historyOf(t, ctx, ann, id.Conversation)
		if len(h) != 14 {
			t.Fatalf("history has %d messages, want 14", len(h))
		}
		for i := 0; i < len(h); i += 2 {
			user, answer := h[i], h[i+1]
			if want := fmt.Sprintf("echo #%d: %s", i/2+1, strings.TrimSuffix(user.Content, slow)+" x y z"); answer.Content != want {
				t.Fatalf("turn %d answered %q, want %q", i/2+1, answer.Content, want)
			}
		}
		order := homeRequestIDs(t, ctx, s.Brokers, requests, home, id, 7)
		for _, r := range want {
			if r != "" && !slices.Contains(order, r) {
				t.Fatalf("request %s is not in the home partition %d: %v", r, home, order)
			}
		}
		for i, r := range order {
			if started[r] != 1 {
				t.Fatalf("request %s started %d times, want once", r, started[r])
			}
			if h[2*i].RequestID != r || h[2*i+1].RequestID != r {
				t.Fatalf("turn %d is request %s, want %s (the home partition's order %v)", i+1, h[2*i].RequestID, r, order)
			}
		}
		if !slices.ContainsFunc(order, func(r string) bool { return strings.HasPrefix(r, "d-") }) {
			t.Fatalf("no derived request id in %v", order)
		}
	})

	t.Run("cancelling all reaches direct records written before it, moved or not", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		id, _, w := mixed(t, ctx, "cancel-all")
		gates.Hold(id.Conversation, 2)
		produceDirect(t, ctx, rdk, id, "ca-first", "[[tokens:200]][[delay:1ms]]", "")
		w.waitWords(ctx, "ca-first", 2)
		// Whether or not the worker has moved it home yet, a record written
		// before the cancel is cancelled.
		produceDirect(t, ctx, sarama, id, "ca-second", "second", "")
		third := send(t, ctx, ann, id.Conversation, "third")
		cancel(t, ctx, ann, id.Conversation, "")
		_, status := w.completions(ctx, 3)
		for _, r := range []string{"ca-first", "ca-second", third} {
			if status[r] != events.StatusCancelled {
				t.Fatalf("request %s completed %q, want cancelled (%v)", r, status[r], status)
			}
		}
		produceDirect(t, ctx, rdk, id, "ca-after", "after", "")
		w.untilStatus(ctx, "ca-after", events.StatusComplete)
	})

	t.Run("cancelling one moved record by its id cancels it alone", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		id, _, w := mixed(t, ctx, "cancel-one")
		first, gate := w.sendRunning(ctx, gates, ann, "[[tokens:100]][[delay:1ms]]")
		produceDirect(t, ctx, sarama, id, "co-queued", "queued", "")
		produceDirect(t, ctx, rdk, id, "co-kept", "kept", "")
		cancel(t, ctx, ann, id.Conversation, "co-queued") // recorded when it returns: before co-queued can start
		gate.Release()
		started, status := w.completions(ctx, 3)
		if status[first] != events.StatusComplete || status["co-queued"] != events.StatusCancelled || started["co-queued"] != 0 ||
			status["co-kept"] != events.StatusComplete {
			t.Fatalf("completed %v, started %v: want the cancelled one cancelled without running, the others complete", status, started)
		}
		// And a running moved record.
		gates.Hold(id.Conversation, 2)
		produceDirect(t, ctx, rdk, id, "co-running", "[[tokens:200]][[delay:1ms]]", "")
		w.waitWords(ctx, "co-running", 2)
		cancel(t, ctx, ann, id.Conversation, "co-running")
		w.untilStatus(ctx, "co-running", events.StatusCancelled)
	})

	t.Run("reject and interrupt apply to moved records", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		id, _, w := mixed(t, ctx, "strategies")
		first, _ := w.sendRunning(ctx, gates, ann, "[[tokens:200]][[delay:1ms]]")
		produceDirect(t, ctx, rdk, id, "st-rejected", "busy?", events.StrategyReject)
		if got := w.untilStatus(ctx, "st-rejected", events.StatusRejected); got.started != 0 {
			t.Fatalf("rejecting request: rejected after %d run.started, want it rejected without running", got.started)
		}
		produceDirect(t, ctx, sarama, id, "st-interrupting", "now", events.StrategyInterrupt)
		w.untilStatus(ctx, first, events.StatusCancelled)
		w.untilStatus(ctx, "st-interrupting", events.StatusComplete)
		oneAtATime(t, w.seen)
	})

	t.Run("the same request id written to two partitions runs once", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		id, _, w := mixed(t, ctx, "twice")
		produceDirect(t, ctx, rdk, id, "tw-1", "once", "")
		murmur := testenv.Producer(t, s.Brokers, requests)
		produceDirect(t, ctx, murmur, id, "tw-1", "once", "")
		started, _ := w.completions(ctx, 2)
		produceDirect(t, ctx, sarama, id, "tw-next", "next", "")
		w.untilStatus(ctx, "tw-next", events.StatusComplete)
		h := historyOf(t, ctx, ann, id.Conversation)
		if started["tw-1"] != 1 || len(h) != 4 || h[1].Content != "echo #1: once" || h[3].Content != "echo #2: next" {
			t.Fatalf("tw-1 ran %d times, history %+v: want tw-1 run once, then tw-next", started["tw-1"], h)
		}
	})
}
