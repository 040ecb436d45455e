package pushgw

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turnpike-dev/turnpike/internal/auth"
	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/testenv"
)

// Retention that deletes records from under a replay already reading from
// Kafka (the cursor was retained when the subscription began, the records
// after it are gone by the time they are fetched) must expire the cursor:
// resuming after the gap would lose events silently.
func TestAReplayThatRetentionOvertakesMidRangeExpiresTheCursor(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	f := newFixtureOn(t, ctx, []string{k.Addr()})
	conv, id := aliceConv(t)
	p := partitionOf(id)
	f.produce(ctx, id, "r", 1, 10) // offsets 0..9 of a fresh partition: seq n at offset n-1
	// No ring: the replay of cursor 2 reads offsets 3..9 from Kafka.
	f.start(ctx, func(c *Config) { c.RingBytes = 1 }, nil)

	// When the replay fetches offset 3, retention deletes offsets 0..5
	// first: offsets 3, 4 and 5 of the range are gone.
	var deleted atomic.Bool
	cluster := k.Cluster()
	cluster.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := r.(*kmsg.FetchRequest)
		for _, tp := range req.Topics {
			for _, pp := range tp.Partitions {
				if tp.Topic == f.topic && int(pp.Partition) == p && pp.FetchOffset == 3 && deleted.CompareAndSwap(false, true) {
					cluster.SleepControl(func() {
						if err := cluster.DeleteRecords(f.topic, int32(p), 6); err != nil {
							t.Errorf("delete records: %v", err)
						}
					})
				}
			}
		}
		return nil, nil, false
	})

	c := f.dial(ctx, token(t, auth.DefaultTenant, "alice"))
	c.subscribe(conv, FormatCursor(p, 2))
	c.expect(ctx, "subscribed") // the cursor was retained when the replay began
	if fr := c.expect(ctx, "error"); fr.Code != "cursor_expired" {
		t.Fatalf("got %+v after the gap, want cursor_expired", fr)
	}
	if !deleted.Load() {
		t.Fatal("the replay never fetched offset 3: retention did not overtake it")
	}
	// What is left resumes from the earliest retained event.
	c.subscribed(ctx, conv, "earliest")
	checkSeqs(t, c.events(ctx, 4), "r", 7, 10)
}
