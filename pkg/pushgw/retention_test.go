package pushgw

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/auth"
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

// A replay from "earliest" that retention overtakes all the way to the
// subscription's live start: the replay reader skips straight to the record
// at liveStart, which the live dispatcher delivers. The replay must stop
// there, so that record arrives once (no duplicate; DESIGN.md "Resume":
// the replay needs exactly [start, liveStart)).
func TestAnEarliestReplayOvertakenUpToItsLiveStartDeliversThatRecordOnce(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	f := newFixtureOn(t, ctx, []string{k.Addr()})
	conv, id := aliceConv(t)
	p := partitionOf(id)
	tok := token(t, auth.DefaultTenant, "alice")
	// The live reader stops before dispatching offset 10 until released,
	// so a subscription registered meanwhile has liveStart 10.
	gate := make(chan struct{})
	f.instance = f.launch(ctx, func(c *Config) { c.RingBytes = 1 }, nil, func(partition int, offset int64) {
		if partition == p && offset == 10 {
			select {
			case <-gate:
			case <-t.Context().Done():
			}
		}
	})
	w := f.dial(ctx, tok).subscribed(ctx, conv, "")
	f.produce(ctx, id, "r", 1, 10) // offsets 0..9
	checkSeqs(t, w.events(ctx, 10), "r", 1, 10)
	f.produce(ctx, id, "r", 11, 11) // offset 10: in Kafka, not dispatched

	// When the replay fetches offset 0, retention deletes offsets 0..9.
	var deleted atomic.Bool
	cluster := k.Cluster()
	cluster.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		for _, tp := range r.(*kmsg.FetchRequest).Topics {
			for _, pp := range tp.Partitions {
				if tp.Topic == f.topic && int(pp.Partition) == p && pp.FetchOffset == 0 && deleted.CompareAndSwap(false, true) {
					cluster.SleepControl(func() {
						if err := cluster.DeleteRecords(f.topic, int32(p), 10); err != nil {
							t.Errorf("delete records: %v", err)
						}
					})
				}
			}
		}
		return nil, nil, false
	})

	c := f.dial(ctx, tok)
	c.subscribe(conv, "earliest") // no ring: the replay of [0, 10) reads Kafka
	c.expect(ctx, "subscribed")   // registered: liveStart is 10
	close(gate)
	checkSeqs(t, c.events(ctx, 1), "r", 11, 11)
	if !deleted.Load() {
		t.Fatal("the replay never fetched offset 0: retention did not overtake it")
	}
	f.produce(ctx, id, "r", 12, 12)
	checkSeqs(t, c.events(ctx, 1), "r", 12, 12) // not seq 11 again
}

// TestSkippedRecordsCountsTheOffsetsRetentionDeletedBeforeTheLiveReaderRead:
// docs/pushgw.md "Metrics": turnpike_pushgw_skipped_records_total counts
// the offsets a live reader never saw. While the live reader of a partition
// cannot fetch, ten records are written and retention deletes the first
// five: the reader then skips five offsets and delivers the other five.
func TestSkippedRecordsCountsTheOffsetsRetentionDeletedBeforeTheLiveReaderRead(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	f := newFixtureOn(t, ctx, []string{k.Addr()})
	f.start(ctx, nil, nil) // the live readers start at offset 0
	conv, id := aliceConv(t)
	p := partitionOf(id)
	c := f.dial(ctx, token(t, auth.DefaultTenant, "alice")).subscribed(ctx, conv, "")

	// Once a fetch of partition p has failed, the live reader has no fetch
	// in flight that could read what is written next.
	fault := k.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: f.topic, Partitions: []int32{int32(p)},
		Err: kerr.KafkaStorageError, Count: -1})
	if err := fault.Wait(ctx, 1); err != nil {
		t.Fatalf("no fetch of partition %d failed: %v", p, err)
	}
	f.produce(ctx, id, "r", 1, 10) // offsets 0..9
	f.deleteRecordsBefore(ctx, p, 5)
	fault.Remove()

	checkSeqs(t, c.events(ctx, 5), "r", 6, 10)
	checkMetric(t, f.reg, "turnpike_pushgw_skipped_records_total", 5) // counted before offset 5 was delivered
}
