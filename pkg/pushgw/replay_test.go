package pushgw

import (
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// aliceConvWhere is aliceConv in a partition for which ok holds.
func aliceConvWhere(t *testing.T, ok func(partition int) bool) (string, events.Identity) {
	t.Helper()
	for {
		if conv, id := aliceConv(t); ok(partitionOf(id)) {
			return conv, id
		}
	}
}

// TestKafkaReplaysAreBoundedPerReplica: docs/pushgw.md "How far back a
// client can resume": a replica reads at most ReplayConcurrency replays
// from Kafka at once (64 by default; 2 here). A replay beyond the bound
// waits for a slot without reading Kafka, and takes the slot of a replay
// that ends.
func TestKafkaReplaysAreBoundedPerReplica(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	f := newFixtureOn(t, ctx, []string{k.Addr()})
	tok := token(t, auth.DefaultTenant, "alice")
	// The replays of a and b are held at the broker; those of c and d, on
	// the other partitions, would not be.
	convA, idA := aliceConv(t)
	pa := partitionOf(idA)
	convB, idB := aliceConvWhere(t, func(p int) bool { return p != pa })
	pb := partitionOf(idB)
	convC, idC := aliceConvWhere(t, func(p int) bool { return p != pa && p != pb })
	convD, idD := aliceConvWhere(t, func(p int) bool { return p != pa && p != pb })
	for _, id := range []events.Identity{idA, idB, idC, idD} {
		f.produce(ctx, id, "r", 1, 3) // before the start: only Kafka has them
	}
	f.start(ctx, func(c *Config) { c.ReplayConcurrency = 2 }, nil)

	// A fetch of partition pa or pb below offset 3 (the live readers fetch
	// from 3 on) is a replay's: it sleeps at the broker until released.
	type hold struct {
		fetching, release chan struct{}
		once, free        sync.Once
	}
	holds := map[int]*hold{pa: {fetching: make(chan struct{}), release: make(chan struct{})}, pb: {fetching: make(chan struct{}), release: make(chan struct{})}}
	releaseAll := func() {
		for _, h := range holds {
			h.free.Do(func() { close(h.release) })
		}
	}
	t.Cleanup(releaseAll)
	cluster := k.Cluster()
	cluster.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		for _, tp := range r.(*kmsg.FetchRequest).Topics {
			for _, pp := range tp.Partitions {
				h := holds[int(pp.Partition)]
				if tp.Topic != f.topic || h == nil || pp.FetchOffset >= 3 {
					continue
				}
				h.once.Do(func() { close(h.fetching) })
				cluster.SleepControl(func() {
					select {
					case <-h.release:
					case <-ctx.Done():
					}
				})
			}
		}
		return nil, nil, false
	})
	awaitFetching := func(p int) {
		t.Helper()
		select {
		case <-holds[p].fetching:
		case <-ctx.Done():
			t.Fatalf("no replay fetched partition %d", p)
		}
	}

	a := f.dial(ctx, tok).subscribed(ctx, convA, "earliest")
	b := f.dial(ctx, tok).subscribed(ctx, convB, "earliest")
	awaitFetching(pa)
	awaitFetching(pb)
	checkMetric(t, f.reg, "turnpike_pushgw_replays_total", 2)

	// A third replay waits for a slot: ended while it waits, it never read
	// Kafka.
	c := f.dial(ctx, tok).subscribed(ctx, convC, "earliest")
	c.send(`{"op":"unsubscribe","conversation":"` + convC + `"}`)
	c.ping(ctx) // the unsubscribe has ended the replay
	checkMetric(t, f.reg, "turnpike_pushgw_replays_total", 2)

	// Another waits, and takes a's slot once a's replay ends.
	d := f.dial(ctx, tok).subscribed(ctx, convD, "earliest")
	holds[pa].free.Do(func() { close(holds[pa].release) })
	checkSeqs(t, a.events(ctx, 3), "r", 1, 3)
	checkSeqs(t, d.events(ctx, 3), "r", 1, 3)
	checkMetric(t, f.reg, "turnpike_pushgw_replays_total", 3)
	releaseAll()
	checkSeqs(t, b.events(ctx, 3), "r", 1, 3)
}
