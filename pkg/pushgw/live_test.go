package pushgw

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// cutter opens broker connections that cutAll closes; until restore, new
// ones hang (a broker gone silent: kafka-go's dials then time out only
// after its dialer's 10 s, so FetchMessage hears of nothing for 30 s), while
// the gateway's other Kafka client (its readiness ping) still reaches it.
type cutter struct {
	mu sync.Mutex
	// Guarded by mu.
	back  chan struct{} // closed by restore; nil while not cut
	conns []net.Conn
}

func (c *cutter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c.mu.Lock()
	back := c.back
	c.mu.Unlock()
	if back != nil {
		select {
		case <-back:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		c.mu.Lock()
		c.conns = append(c.conns, conn)
		c.mu.Unlock()
	}
	return conn, err
}

// awaitConn waits until the cutter has opened a connection (the live
// reader opens its partition's on demand, after the subscribe).
func (c *cutter) awaitConn(ctx context.Context, t *testing.T) {
	t.Helper()
	for {
		c.mu.Lock()
		n := len(c.conns)
		c.mu.Unlock()
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the live reader never connected to the broker")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (c *cutter) cutAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.back = make(chan struct{})
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}

func (c *cutter) restore() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.back)
	c.back = nil
}

// awaitReady polls Ready until want(err) holds.
func awaitReady(ctx context.Context, t *testing.T, gw *gateway, what string, want func(error) bool) {
	t.Helper()
	for {
		err := gw.Ready(ctx)
		if want(err) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: Ready = %v", what, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func readersFailing(err error) bool {
	return err != nil && strings.Contains(err.Error(), "live readers failing")
}

// TestAReplicaIsUnreadyWhileItsLiveReadersCannotReachTheBrokerAndReadyOnceTheyCanWithoutARecord:
// docs/pushgw.md "Replicas": a replica stays unready while its open live
// readers cannot read, and is ready again once they can. A subscriber opens
// one; its connections are cut (in flight: kafka-go retries such a failure
// by itself and does not tell FetchMessage) and new ones hang while Kafka
// still answers the gateway's metadata requests; then they are allowed
// again and the replica is ready with no record produced (an idle poll is a
// successful fetch).
func TestAReplicaIsUnreadyWhileItsLiveReadersCannotReachTheBrokerAndReadyOnceTheyCanWithoutARecord(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	f := newFixtureOn(t, ctx, []string{k.Addr()})
	c := &cutter{}
	f.dialKafka = c.dial
	f.start(ctx, nil, nil)
	conv, _ := aliceConv(t)
	f.dial(ctx, token(t, auth.DefaultTenant, "alice")).subscribed(ctx, conv, "")
	// Cut a connection the reader holds: a reader whose first dial came
	// after the cut would hang in it until kafka-go's 10 s dial timeout,
	// a time the test does not control.
	c.awaitConn(ctx, t)

	c.cutAll()
	awaitReady(ctx, t, f.gw, "while the live readers' connections are cut", readersFailing)
	c.restore()
	awaitReady(ctx, t, f.gw, "once the live readers reach the broker again", func(err error) bool { return err == nil })
}

// TestAReplicaIsReadyAgainAfterFailedFetchesOnceAFetchSucceedsWithoutARecord:
// docs/pushgw.md "Replicas": after an open live reader's fetches failed (the
// broker answered them with an error), the replica is ready again once a
// fetch succeeds, though the partition stays idle (no record fetched).
func TestAReplicaIsReadyAgainAfterFailedFetchesOnceAFetchSucceedsWithoutARecord(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	f := newFixtureOn(t, ctx, []string{k.Addr()})
	var logs syncBuffer
	f.launchLogged = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f.start(ctx, nil, nil)
	conv, id := aliceConv(t)
	p := partitionOf(id)
	f.dial(ctx, token(t, auth.DefaultTenant, "alice")).subscribed(ctx, conv, "") // opens p's live reader

	fault := k.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: f.topic, Partitions: []int32{int32(p)},
		Err: kerr.KafkaStorageError, Count: -1})
	logs.await(ctx, t, fmt.Sprintf(`msg="live reader: fetch failed, retrying" partition=%d`, p))
	awaitReady(ctx, t, f.gw, "while the fetches fail", readersFailing)
	fault.Remove()
	awaitReady(ctx, t, f.gw, "once a fetch succeeds, with no record", func(err error) bool { return err == nil })
}

// aliceConvIn is a fresh conversation of alice whose key lands in partition p.
func aliceConvIn(t testing.TB, p int) (string, events.Identity) {
	t.Helper()
	base := testenv.Name(t, "c")
	for i := 0; ; i++ {
		id := events.Identity{Tenant: auth.DefaultTenant, User: "alice", Conversation: fmt.Sprintf("%s-%d", base, i)}
		if partitionOf(id) == p {
			return id.Conversation, id
		}
	}
}

// awaitMetric waits until the gauge or counter name of reg has the value
// want, and fails t if ctx ends first.
func awaitMetric(ctx context.Context, t *testing.T, reg *prometheus.Registry, name string, want float64) {
	t.Helper()
	for {
		v := testenv.MetricValue(t, reg, name)
		if v == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s = %v, want %v", name, v, want)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// docs/pushgw.md "Replicas": a replica opens a partition's live reader at
// its first subscriber and fetches nothing of the partitions nobody
// subscribes to. The broker counts the fetches of each partition: records
// go to every partition, the subscriber's last, and once the subscriber
// has its records only its partition was ever fetched, and the live
// readers' records and bytes (live_records_total, live_bytes_total) are
// exactly the subscribed partition's.
func TestAReplicaFetchesOnlyThePartitionsItsClientsSubscribeTo(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	f := newFixtureOn(t, ctx, []string{k.Addr()})
	fetches := make([]*kfake.FaultHandle, testPartitions)
	for q := range fetches {
		fetches[q] = k.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: f.topic, Partitions: []int32{int32(q)}, Observe: true, Count: -1})
		t.Cleanup(fetches[q].Remove)
	}
	f.start(ctx, nil, nil)
	checkMetric(t, f.reg, "turnpike_pushgw_live_readers", 0)
	conv, id := aliceConv(t)
	p := partitionOf(id)
	c := f.dial(ctx, token(t, auth.DefaultTenant, "alice")).subscribed(ctx, conv, "")
	checkMetric(t, f.reg, "turnpike_pushgw_live_readers", 1)

	for q := range testPartitions {
		if q != p {
			_, other := aliceConvIn(t, q)
			f.produce(ctx, other, "x", 1, 5)
		}
	}
	f.produce(ctx, id, "r", 1, 5)
	checkSeqs(t, c.events(ctx, 5), "r", 1, 5)
	checkMetric(t, f.reg, "turnpike_pushgw_live_records_total", 5)
	// The bytes BENCHMARKS.md's replica figure counts: the subscribed
	// partition's five records, key and value, and not a byte of the others.
	want := 0
	for n := 1; n <= 5; n++ {
		want += len(id.Key()) + len(event(id.Conversation, "r", n))
	}
	checkMetric(t, f.reg, "turnpike_pushgw_live_bytes_total", float64(want))
	for q, h := range fetches {
		switch n := h.Hits(); {
		case q == p && n == 0:
			t.Errorf("partition %d (subscribed) was never fetched", q)
		case q != p && n > 0:
			t.Errorf("partition %d (no subscriber) was fetched %d times", q, n)
		}
	}
}

// docs/pushgw.md "Replicas": a partition's live reader closes once its
// last subscriber has been gone for the reader idle time, and a subscriber
// that resumes from its cursor later gets every event produced meanwhile
// (read back from Kafka: the closed partition's ring was dropped), then the
// live ones, without gap or duplicate.
func TestAResumeLosesNothingProducedWhileItsPartitionsReaderWasClosed(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	f.start(ctx, func(c *Config) { c.ReaderIdle = time.Millisecond }, nil)
	conv, id := aliceConv(t)
	c := f.dial(ctx, token(t, auth.DefaultTenant, "alice")).subscribed(ctx, conv, "")
	f.produce(ctx, id, "r", 1, 5)
	got := c.events(ctx, 5)
	checkSeqs(t, got, "r", 1, 5)

	c.send(`{"op":"unsubscribe","conversation":"` + conv + `"}`)
	c.ping(ctx) // the unsubscribe is done
	awaitMetric(ctx, t, f.reg, "turnpike_pushgw_live_readers", 0)
	f.produce(ctx, id, "r", 6, 10) // while no reader is open here

	c.subscribed(ctx, conv, got[4].Cursor)
	checkMetric(t, f.reg, "turnpike_pushgw_live_readers", 1)
	f.produce(ctx, id, "r", 11, 11)  // live after the reopening
	for seq := 6; seq <= 11; seq++ { // one by one: a gap fails at once
		checkSeqs(t, c.events(ctx, 1), "r", seq, seq)
	}
	checkMetric(t, f.reg, "turnpike_pushgw_replays_total", 1)
	checkMetric(t, f.reg, "turnpike_pushgw_ring_replays_total", 0)
	c.ping(ctx) // and nothing more
}

// docs/pushgw.md "Replicas": readiness needs the stream topic's metadata
// only, not every partition. With one partition's offsets unlistable (its
// leader unable to answer), a replica starts and is ready; subscribers of
// the other partitions are served, and one of that partition gets
// unavailable until the partition answers again.
func TestAReplicaIsReadyAndServesWhileOnePartitionCannotBeOpened(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	f := newFixtureOn(t, ctx, []string{k.Addr()})
	conv, id := aliceConv(t)
	p := partitionOf(id)
	down := (p + 1) % testPartitions
	downConv, _ := aliceConvIn(t, down)
	fault := k.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: f.topic, Partitions: []int32{int32(down)},
		Err: kerr.LeaderNotAvailable, Count: -1})
	f.start(ctx, nil, nil) // returns once Ready

	tok := token(t, auth.DefaultTenant, "alice")
	c := f.dial(ctx, tok).subscribed(ctx, conv, "")
	c.subscribe(downConv, "")
	if fr := c.expect(ctx, "error"); fr.Code != codeUnavailable || fr.Conversation != downConv {
		t.Fatalf("a subscribe whose partition cannot be opened: %+v, want unavailable for %s", fr, downConv)
	}
	f.produce(ctx, id, "r", 1, 3)
	checkSeqs(t, c.events(ctx, 3), "r", 1, 3)
	if err := f.gw.Ready(ctx); err != nil {
		t.Fatalf("Ready while one partition cannot be opened = %v, want nil", err)
	}
	fault.Remove()
	c.subscribed(ctx, downConv, "")
	checkMetric(t, f.reg, "turnpike_pushgw_live_readers", 2)
}

// movingIdentity is a fresh identity of alice whose home partition under
// from partitions differs from its home under to.
func movingIdentity(t testing.TB, from, to int) events.Identity {
	for i := 0; ; i++ {
		id := events.Identity{Tenant: auth.DefaultTenant, User: "alice", Conversation: testenv.Name(t, fmt.Sprintf("c%d", i))}
		if topic.Home([]byte(id.Key()), from) != topic.Home([]byte(id.Key()), to) {
			return id
		}
	}
}

// grow adds partitions to the fixture's stream topic, up to n, and returns
// a writer that places keys by the new count (a fresh one reads the new
// metadata at its first write, as the workers' stream writers do within
// kafka-go's metadata refresh).
func (f *fixture) grow(ctx context.Context, n int) *kafka.Writer {
	f.t.Helper()
	cl := &kafka.Client{Addr: kafka.TCP(f.brokers...), Transport: &kafka.Transport{}}
	resp, err := cl.CreatePartitions(ctx, &kafka.CreatePartitionsRequest{Topics: []kafka.TopicPartitionsConfig{{Name: f.topic, Count: int32(n)}}})
	if err != nil || resp.Errors[f.topic] != nil {
		f.t.Fatalf("add partitions up to %d: %v %v", n, err, resp)
	}
	cl.Transport.(*kafka.Transport).CloseIdleConnections()
	return testenv.Producer(f.t, f.brokers, f.topic) // a transport of its own: a transport caches metadata
}

// cursorPartition is the partition a cursor names.
func cursorPartition(t testing.TB, cursor string) int {
	t.Helper()
	p, _, err := ParseCursor(cursor)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAddedStreamPartitionsMoveSubscriptionsAndCursorsResumeAcrossTheMove:
// docs/api.md "Cursors" (partitions added to the stream topic) and
// docs/pushgw.md "Sizing partitions": a replica reads the partition count
// again every TURNPIKE_PUSHGW_PARTITION_WATCH_INTERVAL; once partitions were
// added it ends a subscription whose conversation moved with an
// unavailable error frame (after the events it had), tells the next
// subscribe the new shard, and a resume from a cursor of the former home
// gets the rest of the former home, then the new home's events, then live:
// no gap, no duplicate, in the order they were written.
func TestAddedStreamPartitionsMoveSubscriptionsAndCursorsResumeAcrossTheMove(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	f.start(ctx, func(c *Config) { c.PartitionWatch = 20 * time.Millisecond }, nil)
	id := movingIdentity(t, testPartitions, 2*testPartitions)
	conv, key := id.Conversation, []byte(id.Key())
	oldHome, newHome := topic.Home(key, testPartitions), topic.Home(key, 2*testPartitions)
	tok := token(t, auth.DefaultTenant, "alice")

	live := f.dial(ctx, tok)
	live.subscribe(conv, "")
	if fr := live.expect(ctx, "subscribed"); fr.Shard == nil || *fr.Shard != oldHome {
		t.Fatalf("subscribed before the change = %+v, want shard %d", fr, oldHome)
	}
	f.produce(ctx, id, "r", 1, 3)
	before := live.events(ctx, 3)
	checkSeqs(t, before, "r", 1, 3)
	// Another conversation of alice's in the same partition: its record
	// follows, at offset 3 of the fresh topic.
	neighbour := id
	for i := 0; neighbour == id || topic.Home([]byte(neighbour.Key()), testPartitions) != oldHome; i++ {
		neighbour.Conversation = fmt.Sprintf("%s-n%d", conv, i)
	}
	f.produce(ctx, neighbour, "n", 1, 1)
	foreign := FormatCursor(oldHome, 3)

	w := f.grow(ctx, 2*testPartitions)
	fr := live.next(ctx)
	if fr.Type != "error" || fr.Code != codeUnavailable || fr.Conversation != conv {
		t.Fatalf("after the partitions were added the live subscription got %+v, want an unavailable error frame of %s", fr, conv)
	}
	checkMetric(t, f.reg, "turnpike_pushgw_stream_partitions", 2*testPartitions)

	// The producers place the conversation by the new count.
	var msgs []kafka.Message
	for n := 4; n <= 6; n++ {
		msgs = append(msgs, kafka.Message{Key: key, Value: event(conv, "r", n)})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}

	// The client subscribes again from its last cursor, as the error frame says.
	live.subscribe(conv, before[2].Cursor)
	if fr := live.expect(ctx, "subscribed"); fr.Shard == nil || *fr.Shard != newHome {
		t.Fatalf("subscribed after the change = %+v, want shard %d", fr, newHome)
	}
	after := live.events(ctx, 3)
	checkSeqs(t, after, "r", 4, 6)
	if p := cursorPartition(t, after[0].Cursor); p != newHome {
		t.Fatalf("event 4 is in partition %d, want the new home %d", p, newHome)
	}

	// A cursor of the former home that names another conversation's record
	// is still one of another partition.
	refused := f.dial(ctx, tok)
	refused.subscribe(conv, foreign)
	if fr := refused.next(ctx); fr.Type != "error" || fr.Code != codeInvalidArgument {
		t.Fatalf("a resume from another conversation's cursor in the former home: %+v, want invalid_argument", fr)
	}

	// A connection resuming from the first cursor reads across both homes.
	other := f.dial(ctx, tok)
	other.subscribe(conv, before[0].Cursor)
	other.expect(ctx, "subscribed")
	checkSeqs(t, other.events(ctx, 5), "r", 2, 6)

	// Both are live on the new home: the next event once each, nothing else.
	if err := w.WriteMessages(ctx, kafka.Message{Key: key, Value: event(conv, "r", 7)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*wsClient{live, other} {
		checkSeqs(t, c.events(ctx, 1), "r", 7, 7)
		c.ping(ctx)
	}

	// Retention deletes the former home's record after the first cursor:
	// that cursor has expired, as any whose successor is gone.
	f.deleteRecordsBefore(ctx, oldHome, 2)
	expired := f.dial(ctx, tok)
	expired.subscribe(conv, before[0].Cursor)
	if fr := expired.next(ctx); fr.Type != "error" || fr.Code != codeCursorExpired || fr.Conversation != conv {
		t.Fatalf("a resume from a former home's cursor whose successor is deleted: %+v, want cursor_expired", fr)
	}
	// The cursor of the record deleted last has not: its successor, the
	// former home's first retained record, is still there.
	kept := f.dial(ctx, tok)
	kept.subscribe(conv, before[1].Cursor)
	if fr := kept.next(ctx); fr.Type != "subscribed" {
		t.Fatalf("a resume from a former home's cursor whose record is deleted and successor kept: %+v, want subscribed", fr)
	}
	checkSeqs(t, kept.events(ctx, 5), "r", 3, 7)

	// The other conversation's record is the former home's first retained
	// one now: a cursor naming it is still checked, and refused.
	f.deleteRecordsBefore(ctx, oldHome, 3)
	first := f.dial(ctx, tok)
	first.subscribe(conv, foreign)
	if fr := first.next(ctx); fr.Type != "error" || fr.Code != codeInvalidArgument {
		t.Fatalf("a resume from another conversation's cursor at the former home's first retained offset: %+v, want invalid_argument", fr)
	}
}
