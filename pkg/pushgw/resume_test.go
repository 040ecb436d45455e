package pushgw

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/auth"
)

func TestARecentCursorResumesFromTheRingWithoutReadingKafka(t *testing.T) {
	t.Parallel()
	ctx, f := startedFixture(t)
	conv, id := aliceConv(t)
	tok := token(t, auth.DefaultTenant, "alice")
	w := f.dial(ctx, tok).subscribed(ctx, conv, "")
	f.produce(ctx, id, "r", 1, 20)
	seen := w.events(ctx, 20)

	c := f.dial(ctx, tok).subscribed(ctx, conv, seen[4].Cursor)
	checkSeqs(t, c.events(ctx, 15), "r", 6, 20)
	f.produce(ctx, id, "r", 21, 25)
	checkSeqs(t, c.events(ctx, 5), "r", 21, 25)

	e := f.dial(ctx, tok)
	e.subscribe(conv, "earliest") // everything retained arrived after start
	e.expect(ctx, "subscribed")
	checkSeqs(t, e.events(ctx, 25), "r", 1, 25)

	checkMetric(t, f.reg, "turnpike_pushgw_ring_replays_total", 2)
	checkMetric(t, f.reg, "turnpike_pushgw_replays_total", 0) // from Kafka
}

// TestCursorExpiryIsExactAtTheRetentionBoundary deletes the first half of
// a partition, as retention would, after two gateways have read it: one
// whose ring still holds every record, one whose ring holds none.
func TestCursorExpiryIsExactAtTheRetentionBoundary(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 40*time.Second)
	f := newFixture(t, ctx)
	conv, id := aliceConv(t)
	p := partitionOf(id)
	tok := token(t, auth.DefaultTenant, "alice")
	bigRing := f.launch(ctx, nil, nil, nil)
	noRing := f.launch(ctx, func(c *Config) { c.RingBytes = 1 }, nil, nil)
	var watchers []*wsClient
	for _, in := range []*instance{bigRing, noRing} {
		w := f.dialURL(ctx, in.url, tok).subscribed(ctx, conv, "")
		watchers = append(watchers, w)
	}
	f.produce(ctx, id, "r", 1, 10) // offsets 0..9 of a fresh partition: seq n at offset n-1
	for _, w := range watchers {
		checkSeqs(t, w.events(ctx, 10), "r", 1, 10)
	}
	f.deleteRecordsBefore(ctx, p, 5) // the first retained record is seq 6

	tests := []struct {
		name  string
		in    *instance
		since string
		first int // first seq resumed; 0: cursor_expired
	}{
		{"Without the ring, the cursor just before the first retained record resumes.", noRing, FormatCursor(p, 4), 6},
		{"Without the ring, a cursor one record older has expired.", noRing, FormatCursor(p, 3), 0},
		{"Without the ring, earliest starts at the first retained record.", noRing, "earliest", 6},
		{"A ring that still holds the records serves a cursor Kafka has dropped.", bigRing, FormatCursor(p, 2), 4},
		{"With the ring, earliest still means what the topic retains.", bigRing, "earliest", 6},
	}
	for _, tt := range tests {
		c := f.dialURL(ctx, tt.in.url, tok)
		c.subscribe(conv, tt.since)
		if tt.first == 0 {
			// The error ends that subscription, and names its conversation.
			if fr := c.expect(ctx, "error"); fr.Code != "cursor_expired" || fr.Conversation != conv {
				t.Errorf("%s: %+v, want cursor_expired naming %s", tt.name, fr, conv)
			}
			continue
		}
		c.expect(ctx, "subscribed")
		checkSeqs(t, c.events(ctx, 10-tt.first+1), "r", tt.first, 10)
	}
	f.produce(ctx, id, "r", 11, 11) // and the resumed ones go live: checked through the watchers' order
	for _, w := range watchers {
		checkSeqs(t, w.events(ctx, 1), "r", 11, 11)
	}
}

func TestACursorFromOneReplicaResumesOnAnotherWithoutGap(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 40*time.Second)
	f := newFixture(t, ctx)
	conv, id := aliceConv(t)
	tok := token(t, auth.DefaultTenant, "alice")
	a := f.launch(ctx, nil, nil, nil)
	replicas := []struct {
		name string
		in   *instance
	}{
		{"a replica with a ring", f.launch(ctx, nil, nil, nil)},
		{"a replica without a ring", f.launch(ctx, func(c *Config) { c.RingBytes = 1 }, nil, nil)},
	}
	wa := f.dialURL(ctx, a.url, tok).subscribed(ctx, conv, "")

	const total = 60
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 1; n <= total; n++ {
			f.produce(ctx, id, "r", n, n)
			time.Sleep(2 * time.Millisecond)
		}
	})
	seen := wa.events(ctx, 10)
	for _, r := range replicas {
		wg.Go(func() {
			// A client of A reconnects to another replica mid-stream.
			c := f.dialURL(ctx, r.in.url, tok)
			c.subscribe(conv, seen[9].Cursor)
			if fr, err := c.read(ctx); err != nil || fr.Type != "subscribed" {
				t.Errorf("%s: %+v, %v; want subscribed", r.name, fr, err)
				return
			}
			for want := 11; want <= total; want++ {
				fr, err := c.read(ctx)
				if err != nil || fr.RequestID != "r" || fr.Seq != want {
					t.Errorf("%s: got %+v, %v; want seq %d", r.name, fr, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	checkSeqs(t, wa.events(ctx, total-10), "r", 11, total)
}

// holdBack returns a dispatch hook that stops a replica's live readers
// until release is called or the test ends (so the replica can stop).
func holdBack(t *testing.T) (hook func(int, int64), release func()) {
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	done := t.Context().Done()
	return func(int, int64) {
		select {
		case <-gate:
		case <-done:
		}
	}, release
}

// awaitCursorWaiter returns once a subscribe on in waits for partition p's
// live reader to reach its cursor (in hub.awaitDispatched), so that a test
// releasing the reader afterwards tests that wait, not a race with it.
func awaitCursorWaiter(t *testing.T, ctx context.Context, in *instance, p int) {
	t.Helper()
	in.gw.mu.Lock()
	s := in.gw.hub.shards[p]
	in.gw.mu.Unlock()
	testenv.Eventually(t, ctx, "a subscribe waits for the live reader", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.advanced != nil
	})
}

// A replica behind a cursor (one from a replica further ahead) waits for its
// live reader to reach it, then resumes right after it: for the record it
// will dispatch next as for one further on. Each case has a replica that
// has dispatched nothing and waits as long as it takes (CursorWait of an
// hour); its reader is released once the subscribe waits on it.
func TestAReplicaBehindACursorWaitsForItsLiveReader(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	conv, id := aliceConv(t)
	tok := token(t, auth.DefaultTenant, "alice")
	a := f.launch(ctx, nil, nil, nil)
	wa := f.dialURL(ctx, a.url, tok).subscribed(ctx, conv, "")
	type behind struct {
		in      *instance
		release func()
	}
	var replicas []behind
	for range 2 {
		hook, release := holdBack(t)
		in := f.launch(ctx, func(c *Config) { c.CursorWait = time.Hour }, nil, hook)
		// A subscriber opens the partition here before the records come,
		// so that its live reader is behind them, not opened after them.
		f.dialURL(ctx, in.url, tok).subscribed(ctx, conv, "")
		replicas = append(replicas, behind{in, release})
	}
	f.produce(ctx, id, "r", 1, 10) // offsets 0..9: the replicas' next offset is 0
	seen := wa.events(ctx, 10)

	tests := []struct {
		name string
		seq  int // the cursor's event
	}{
		{"The cursor of the record the replica dispatches next waits for it.", 1},
		{"The cursor of a record further on waits for the live reader to reach it.", 7},
	}
	var clients []*wsClient
	for i, tt := range tests {
		r := replicas[i]
		c := f.dialURL(ctx, r.in.url, tok)
		c.subscribe(conv, seen[tt.seq-1].Cursor)
		awaitCursorWaiter(t, ctx, r.in, partitionOf(id))
		r.release()
		if fr := c.next(ctx); fr.Type != "subscribed" {
			t.Fatalf("%s Got %+v, want subscribed", tt.name, fr)
		}
		checkSeqs(t, c.events(ctx, 10-tt.seq), "r", tt.seq+1, 10)
		clients = append(clients, c)
	}
	f.produce(ctx, id, "r", 11, 12)
	for _, c := range clients {
		checkSeqs(t, c.events(ctx, 2), "r", 11, 12)
	}
}

func TestAReplicaThatDoesNotCatchUpInTimeAnswersUnavailable(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	conv, id := aliceConv(t)
	tok := token(t, auth.DefaultTenant, "alice")
	a := f.launch(ctx, nil, nil, nil)
	hook, _ := holdBack(t)
	b := f.launch(ctx, func(c *Config) { c.CursorWait = 100 * time.Millisecond }, nil, hook)
	wa := f.dialURL(ctx, a.url, tok).subscribed(ctx, conv, "")
	f.dialURL(ctx, b.url, tok).subscribed(ctx, conv, "") // b's reader is open before the records, and held back
	f.produce(ctx, id, "r", 1, 3)
	seen := wa.events(ctx, 3)

	c := f.dialURL(ctx, b.url, tok)
	c.subscribe(conv, seen[2].Cursor)
	if fr := c.expect(ctx, "error"); fr.Code != "unavailable" {
		t.Fatalf("a cursor the replica does not reach in time: %+v, want unavailable", fr)
	}
	// An event stream gets a 200 with one unavailable error event, so that
	// an EventSource reconnects by itself (docs/api.md "The stream").
	s := mustOpenSSE(ctx, t, b.eventsURL(conv, nil), tok, http.Header{"Last-Event-Id": {seen[2].Cursor}})
	if m := s.expect("error"); m.fr.Code != codeUnavailable || m.id != "" {
		t.Fatalf("an event stream from a cursor the replica does not reach in time: %+v, want an unavailable error event without id", m)
	}
	s.ended()
	// A cursor beyond the end of the partition is refused at once, even by
	// a replica that is behind.
	p, o, err := ParseCursor(seen[2].Cursor)
	if err != nil {
		t.Fatal(err)
	}
	c.subscribe(conv, FormatCursor(p, o+1000))
	if fr := c.expect(ctx, "error"); fr.Code != "invalid_argument" {
		t.Fatalf("a cursor past the end of the partition: %+v, want invalid_argument", fr)
	}
	c.ping(ctx)
}
