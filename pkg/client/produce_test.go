package client_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

func TestProducerWritesValidatedRequestsKeyedByIdentity(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	name := testenv.Name(t, "requests")
	if err := topic.Ensure(ctx, stack.Brokers, 1, name); err != nil {
		t.Fatal(err)
	}
	p := client.NewProducer(stack.Brokers, name)
	id := events.Identity{Tenant: "acme", User: "batch", Conversation: "ticket-1"}

	explicit, err := p.Produce(ctx, id, "first", client.ProduceOptions{RequestID: "job-1", Strategy: "reject"})
	if err != nil || explicit != "job-1" {
		t.Fatalf("Produce = %q, %v; want job-1", explicit, err)
	}
	generated, err := p.Produce(ctx, id, "second", client.ProduceOptions{})
	if err != nil || !strings.HasPrefix(generated, "p-") || len(generated) != 2+32 {
		t.Fatalf("Produce = %q, %v; want a generated p-<32 hex> id", generated, err)
	}
	again, err := p.Produce(ctx, id, "third", client.ProduceOptions{})
	if err != nil || again == generated {
		t.Fatalf("two generated ids are %q and %q (%v)", generated, again, err)
	}
	// Invalid requests are refused before anything is written.
	for _, bad := range []struct {
		name    string
		id      events.Identity
		content string
		o       client.ProduceOptions
	}{
		{"an identity without a tenant", events.Identity{User: "batch", Conversation: "c"}, "x", client.ProduceOptions{}},
		{"empty content", id, "", client.ProduceOptions{}},
		{"an unknown strategy", id, "x", client.ProduceOptions{Strategy: "shout"}},
		{"a request id breaking the ID rule", id, "x", client.ProduceOptions{RequestID: "has space"}},
	} {
		if _, err := p.Produce(ctx, bad.id, bad.content, bad.o); !errors.Is(err, events.ErrInvalid) {
			t.Errorf("%s: Produce = %v, want an error wrapping events.ErrInvalid", bad.name, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: stack.Brokers, Topic: name, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	for i, want := range []struct {
		requestID, content string
		strategy           events.Strategy
	}{{"job-1", "first", events.StrategyReject}, {generated, "second", ""}, {again, "third", ""}} {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		req, err := events.DecodeRequest(m.Value, 0)
		if err != nil {
			t.Fatalf("record %d does not decode: %v", i, err)
		}
		if string(m.Key) != id.Key() || req.Identity() != id || req.RequestID != want.requestID || req.Content != want.content ||
			req.Strategy != want.strategy || req.CreatedAt.IsZero() {
			t.Fatalf("record %d: key %q, %+v; want %+v", i, m.Key, req, want)
		}
	}
	if lag, err := r.ReadLag(ctx); err != nil || lag != 0 {
		t.Fatalf("%d records more than produced (%v): an invalid request was written", lag, err)
	}
}

// docs/api.md, "The home partition": the Producer places each request in
// the home partition of its key (topic.Home: murmur2, the Java client's
// default). Nothing here moves a misplaced record: each partition is read
// as written.
func TestProducerPlacesEachRequestInItsHomePartition(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	const partitions = 6
	name := testenv.Name(t, "requests")
	if err := topic.Ensure(ctx, stack.Brokers, partitions, name); err != nil {
		t.Fatal(err)
	}
	p := client.NewProducer(stack.Brokers, name)
	homes := map[int]int{}
	for c := range 24 {
		id := events.Identity{Tenant: "acme", User: "batch", Conversation: fmt.Sprintf("home-%d", c)}
		homes[topic.Home([]byte(id.Key()), partitions)]++
		if _, err := p.Produce(ctx, id, "placed", client.ProduceOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if len(homes) < 3 {
		t.Fatalf("the keys' homes %v: want keys of several homes", homes)
	}
	for part := range partitions {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: stack.Brokers, Topic: name, Partition: part, MaxWait: 100 * time.Millisecond})
		n, err := r.ReadLag(ctx) // from the start: every record of the partition
		if err != nil {
			t.Fatalf("partition %d: %v", part, err)
		}
		for range n {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("partition %d: %v", part, err)
			}
			if home := topic.Home(m.Key, partitions); m.Partition != home {
				t.Errorf("%s is in partition %d, its home is %d", m.Key, m.Partition, home)
			}
		}
		if n != int64(homes[part]) {
			t.Errorf("partition %d holds %d records, want %d: the keys whose home it is", part, n, homes[part])
		}
		r.Close()
	}
}
