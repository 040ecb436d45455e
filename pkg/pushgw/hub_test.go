package pushgw

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// fakeSink records frames; with limit > 0 it refuses (sheds) beyond limit.
type fakeSink struct {
	frames   [][]byte
	limit    int
	shed     bool
	overflew bool
}

func (s *fakeSink) deliver(f []byte, _ time.Time) bool {
	if s.limit > 0 && len(s.frames) >= s.limit {
		s.shed = true
		return false
	}
	s.frames = append(s.frames, f)
	return true
}

func (s *fakeSink) overflow() { s.overflew = true }

func (s *fakeSink) moved(*subscription) {}

func newTestHub(t testing.TB, starts map[int]int64, replayBuffer int) *hub {
	t.Helper()
	return newTestHubWith(t, starts, hubConfig{replayBuffer: replayBuffer, replayBufferBytes: DefaultReplayBufferBytes, ringBytes: DefaultRingBytes})
}

func newTestHubWith(t testing.TB, starts map[int]int64, cfg hubConfig) *hub {
	t.Helper()
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	parts := slices.Collect(maps.Keys(starts))
	h := newHub(parts, cfg, m, slog.New(slog.DiscardHandler))
	for p, off := range starts { // open, as by a reader of generation gen0
		s := h.shards[p]
		s.state, s.gen, s.next, s.ring = shardOpen, gen0, off, newRing(h.ringBytes, off)
	}
	return h
}

// gen0 is the generation of the shards newTestHubWith opens.
const gen0 = 1

// dispatchNow dispatches a record as the partition's current live reader.
func (h *hub) dispatchNow(partition int, offset int64, key, value []byte, recorded time.Time) {
	s := h.shards[partition]
	s.mu.Lock()
	gen := s.gen
	s.mu.Unlock()
	h.dispatch(partition, gen, offset, key, value, recorded)
}

func testValue(seq int) []byte {
	return events.MarshalEvent(&events.RunStartedEvent{Meta: events.Meta{Conversation: "c", RequestID: "r", RunID: "u", Seq: int64(seq), TS: 1}})
}

// seqs decodes the event frames among frames and returns their seq numbers
// ("hello" for a subscribed frame).
func seqs(t *testing.T, frames [][]byte) []string {
	t.Helper()
	var out []string
	for _, f := range frames {
		e, err := events.DecodeEvent(f)
		if err != nil {
			out = append(out, string(f))
			continue
		}
		out = append(out, strconv.FormatInt(e.Header().Seq, 10))
	}
	return out
}

func TestHubHandsOverFromReplayToLiveWithoutGapOrDuplicate(t *testing.T) {
	t.Parallel()
	h := newTestHub(t, map[int]int64{0: 10}, 100)
	key := "t/u/c"
	sink := &fakeSink{}
	sub := &subscription{sink: sink, key: key, conversation: "c", partition: 0, since: since{kind: sinceAfter, offset: 7}}
	if err := h.register(sub, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if sub.liveStart != 10 {
		t.Fatalf("liveStart = %d, want the dispatcher's next offset 10", sub.liveStart)
	}
	// Live records arrive while the replay runs: they are held back.
	h.dispatchNow(0, 10, []byte(key), testValue(11), time.Time{})
	h.dispatchNow(0, 11, []byte("t/u/other"), testValue(99), time.Time{})
	h.dispatchNow(0, 12, []byte(key), testValue(13), time.Time{})
	if len(sink.frames) != 0 {
		t.Fatalf("frames reached a replaying subscription: %q", seqs(t, sink.frames))
	}
	// The replay's own frames (offsets 8 and 9) go first.
	sink.frames = append(sink.frames, eventFrame(testValue(9), 0, 8), eventFrame(testValue(10), 0, 9))
	frames, live, ok := h.takePending(sub, nil)
	if !ok || live || len(frames) != 2 {
		t.Fatalf("takePending = %d frames, live %v, ok %v; want the 2 held frames", len(frames), live, ok)
	}
	sink.frames = append(sink.frames, frames...)
	h.dispatchNow(0, 13, []byte(key), testValue(14), time.Time{}) // arrives during the flush
	frames, live, ok = h.takePending(sub, frames[:0])
	if !ok || live || len(frames) != 1 {
		t.Fatalf("second takePending = %d frames, live %v, ok %v; want 1 held frame", len(frames), live, ok)
	}
	sink.frames = append(sink.frames, frames...)
	if _, live, ok = h.takePending(sub, nil); !ok || !live {
		t.Fatalf("third takePending: live %v ok %v, want the switch to live", live, ok)
	}
	h.dispatchNow(0, 14, []byte(key), testValue(15), time.Time{})
	h.dispatchNow(0, 14, []byte(key), testValue(15), time.Time{}) // a redelivered offset is not sent twice
	want := []string{"9", "10", "11", "13", "14", "15"}
	if got := seqs(t, sink.frames); !slices.Equal(got, want) {
		t.Fatalf("frames = %q, want %q", got, want)
	}
}

func TestHubLiveSubscriptionGetsHelloFirstThenOnlyItsKey(t *testing.T) {
	t.Parallel()
	h := newTestHub(t, map[int]int64{0: 0, 1: 0}, 100)
	a, b := &fakeSink{}, &fakeSink{}
	subA := &subscription{sink: a, key: "t/alice/c", conversation: "c", partition: 0}
	subB := &subscription{sink: b, key: "t/bob/c", conversation: "c", partition: 0}
	for _, s := range []*subscription{subA, subB} {
		if err := h.register(s, []byte("hello")); err != nil {
			t.Fatal(err)
		}
	}
	h.dispatchNow(0, 0, []byte("t/alice/c"), testValue(1), time.Time{})
	h.dispatchNow(0, 1, []byte("t/bob/c"), testValue(2), time.Time{})
	h.dispatchNow(0, 2, []byte("t/alice/c/x"), testValue(3), time.Time{}) // bad key
	h.dispatchNow(0, 3, []byte("t/alice/c"), []byte(`{}`), time.Time{})   // bad value
	h.dispatchNow(1, 0, []byte("t/alice/c"), testValue(4), time.Time{})   // another partition's shard
	h.dispatchNow(0, 4, []byte("T/alice/c"), testValue(5), time.Time{})   // another tenant
	if got, want := seqs(t, a.frames), []string{"hello", "1"}; !slices.Equal(got, want) {
		t.Fatalf("alice got %q, want %q", got, want)
	}
	if got, want := seqs(t, b.frames), []string{"hello", "2"}; !slices.Equal(got, want) {
		t.Fatalf("bob got %q, want %q", got, want)
	}
	h.remove(subA)
	h.remove(subA)
	h.dispatchNow(0, 5, []byte("t/alice/c"), testValue(6), time.Time{})
	if len(a.frames) != 2 {
		t.Fatalf("a removed subscription still got frames: %q", seqs(t, a.frames))
	}
}

func TestHubRefusesToRegisterARemovedSubscription(t *testing.T) {
	t.Parallel()
	h := newTestHub(t, map[int]int64{0: 0}, 10)
	sink := &fakeSink{}
	sub := &subscription{sink: sink, key: "t/u/c", partition: 0}
	h.remove(sub) // a connection closing while the subscribe is on its way
	if err := h.register(sub, []byte("hello")); err == nil {
		t.Fatal("register after remove succeeded")
	}
	h.dispatchNow(0, 0, []byte("t/u/c"), testValue(1), time.Time{})
	if len(sink.frames) != 0 || len(h.shards[0].subs) != 0 {
		t.Fatalf("a removed subscription is indexed or got frames: %q", seqs(t, sink.frames))
	}
}

func TestHubRefusesACursorAheadOfTheDispatcher(t *testing.T) {
	t.Parallel()
	h := newTestHub(t, map[int]int64{0: 5}, 100)
	for _, tt := range []struct {
		offset int64
		ok     bool
	}{{3, true}, {4, true}, {5, false}, {50, false}} {
		sub := &subscription{sink: &fakeSink{}, key: "t/u/c" + strconv.FormatInt(tt.offset, 10), partition: 0, since: since{kind: sinceAfter, offset: tt.offset}}
		err := h.register(sub, nil)
		if (err == nil) != tt.ok {
			t.Errorf("register with a cursor at %d: err = %v, want ok = %v", tt.offset, err, tt.ok)
		}
	}
}

func TestHubShedsAClientWhoseReplayBufferOverflows(t *testing.T) {
	t.Parallel()
	h := newTestHub(t, map[int]int64{0: 0}, 3)
	sink := &fakeSink{}
	sub := &subscription{sink: sink, key: "t/u/c", partition: 0, since: since{kind: sinceAll}}
	if err := h.register(sub, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		h.dispatchNow(0, int64(i), []byte("t/u/c"), testValue(i+1), time.Time{})
	}
	if sink.overflew {
		t.Fatal("shed at exactly ReplayBuffer frames")
	}
	h.dispatchNow(0, 3, []byte("t/u/c"), testValue(4), time.Time{})
	if !sink.overflew {
		t.Fatal("not shed beyond ReplayBuffer frames")
	}
	if _, _, ok := h.takePending(sub, nil); ok {
		t.Fatal("takePending succeeded after an overflow")
	}
}

// The live frames held back during a replay are bounded in bytes too
// (ReplayBufferBytes, docs/api.md "Close codes": 4008): a frame that would
// take the buffer past its bytes sheds the client, one that brings it to
// exactly its bytes does not, and a first frame always fits.
func TestHubShedsAClientWhoseReplayBufferOverflowsItsBytes(t *testing.T) {
	t.Parallel()
	frameLen := len(eventFrame(testValue(1), 0, 0)) // every frame below: one-digit seq and offset
	tests := []struct {
		name     string
		bytes    int
		fit      int // frames held before the one that sheds
		shedding bool
	}{
		{"Three frames fit a buffer of exactly their bytes.", 3 * frameLen, 3, false},
		{"The third frame does not fit a byte short of three frames.", 3*frameLen - 1, 2, true},
		{"A first frame fits a buffer smaller than itself.", 1, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newTestHubWith(t, map[int]int64{0: 0}, hubConfig{replayBuffer: 100, replayBufferBytes: tt.bytes, ringBytes: DefaultRingBytes})
			sink := &fakeSink{}
			sub := &subscription{sink: sink, key: "t/u/c", partition: 0, since: since{kind: sinceAll}}
			if err := h.register(sub, nil); err != nil {
				t.Fatal(err)
			}
			for i := range tt.fit {
				h.dispatchNow(0, int64(i), []byte("t/u/c"), testValue(i+1), time.Time{})
			}
			if sink.overflew {
				t.Fatalf("shed after %d frames of %d bytes in a buffer of %d bytes", tt.fit, frameLen, tt.bytes)
			}
			if tt.shedding {
				h.dispatchNow(0, int64(tt.fit), []byte("t/u/c"), testValue(tt.fit+1), time.Time{})
				if !sink.overflew {
					t.Fatalf("frame %d of %d bytes held in a buffer of %d bytes", tt.fit+1, frameLen, tt.bytes)
				}
			}
		})
	}
}

func TestHubShedsOnlyTheClientWithAFullQueue(t *testing.T) {
	t.Parallel()
	h := newTestHub(t, map[int]int64{0: 0}, 10)
	slow, fast := &fakeSink{limit: 2}, &fakeSink{}
	for _, s := range []*fakeSink{slow, fast} {
		if err := h.register(&subscription{sink: s, key: "t/u/c", partition: 0}, []byte("hello")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		h.dispatchNow(0, int64(i), []byte("t/u/c"), testValue(i+1), time.Time{})
	}
	if !slow.shed || fast.shed {
		t.Fatalf("slow shed %v, fast shed %v; want only the slow one", slow.shed, fast.shed)
	}
	if got, want := seqs(t, fast.frames), []string{"hello", "1", "2", "3", "4", "5"}; !slices.Equal(got, want) {
		t.Fatalf("fast got %q, want %q", got, want)
	}
}

// The fan-out and delivery-lag histograms time the records a client got
// (README.md "Observability": "one sample per record with live
// recipients"): not one held for a subscription still replaying, nor one
// every recipient shed.
func TestHubTimesOnlyTheRecordsItDeliveredToAClient(t *testing.T) {
	t.Parallel()
	h := newTestHub(t, map[int]int64{0: 10}, 10)
	key := "t/u/c"
	count := func() [2]uint64 {
		var out [2]uint64
		for i, hist := range []interface{ Write(*dto.Metric) error }{h.metrics.fanout, h.metrics.deliveryLag} {
			var m dto.Metric
			if err := hist.Write(&m); err != nil {
				t.Fatal(err)
			}
			out[i] = m.GetHistogram().GetSampleCount()
		}
		return out
	}
	replaying := &subscription{sink: &fakeSink{}, key: key, partition: 0, since: since{kind: sinceAfter, offset: 7}}
	if err := h.register(replaying, nil); err != nil {
		t.Fatal(err)
	}
	recorded := time.Now()
	h.dispatchNow(0, 10, []byte(key), testValue(1), recorded) // held for the replay
	if got := count(); got != [2]uint64{} {
		t.Fatalf("fan-out and delivery-lag samples %v after a record held for a replay, want none", got)
	}
	full := &fakeSink{limit: 1}
	if err := h.register(&subscription{sink: full, key: key, partition: 0}, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	h.dispatchNow(0, 11, []byte(key), testValue(2), recorded) // shed by its one live recipient
	if got := count(); !full.shed || got != [2]uint64{} {
		t.Fatalf("fan-out and delivery-lag samples %v after a record every recipient shed (shed %v), want none", got, full.shed)
	}
	live := &fakeSink{}
	if err := h.register(&subscription{sink: live, key: key, partition: 0}, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	h.dispatchNow(0, 12, []byte(key), testValue(3), recorded)
	if got := count(); got != [2]uint64{1, 1} {
		t.Fatalf("fan-out and delivery-lag samples %v after a delivered record, want one each", got)
	}
}

// BenchmarkFanout dispatches one event to N live subscribers (real client
// queues) and reports ns per event; allocations are per event, whatever N.
func BenchmarkFanout(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("subscribers=%d", n), func(b *testing.B) {
			h := newTestHub(b, map[int]int64{0: 0}, 16)
			const queue = 256
			clients := make([]*session, n)
			for i := range clients {
				clients[i] = &session{out: outbox{maxFrames: queue, maxBytes: DefaultQueueBytes, wake: make(chan struct{}, 1)}, done: make(chan struct{}), metrics: h.metrics}
				sub := &subscription{sink: clients[i], key: "t/u/c", conversation: "c", partition: 0}
				if err := h.register(sub, []byte("hello")); err != nil {
					b.Fatal(err)
				}
			}
			drain := func() {
				for _, c := range clients {
					for {
						f, ok := c.out.pop()
						if !ok {
							break
						}
						c.out.sent(len(f))
					}
				}
			}
			key := []byte("t/u/c")
			value := events.MarshalEvent(&events.TokenEvent{Meta: events.Meta{Conversation: "c", RequestID: "r-1", RunID: "u-1", Seq: 1, TS: 1},
				Delta: "hello ", Agent: "echo", Role: "assistant"})
			drain()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%(queue-1) == queue-2 {
					b.StopTimer()
					drain()
					b.StartTimer()
				}
				h.dispatchNow(0, int64(i), key, value, time.Time{})
			}
			b.StopTimer()
			for _, c := range clients {
				select {
				case <-c.done:
					b.Fatal("a subscriber was shed during the benchmark")
				default:
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/delivery")
		})
	}
}

// RingBytes is split between the partitions (README, TURNPIKE_PUSHGW_RING_BYTES).
func TestHubSplitsTheRingBytesBetweenThePartitions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		starts map[int]int64
		each   int
	}{
		{"One partition has the whole ring.", map[int]int64{0: 0}, 1 << 20},
		{"Four partitions have a quarter each.", map[int]int64{0: 0, 1: 5, 2: 0, 3: 9}, 1 << 18},
		{"A topic of no partitions has no ring at all.", map[int]int64{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newTestHubWith(t, tt.starts, hubConfig{replayBuffer: 10, replayBufferBytes: 1 << 20, ringBytes: 1 << 20})
			if len(h.shards) != len(tt.starts) {
				t.Fatalf("%d shards for %d partitions", len(h.shards), len(tt.starts))
			}
			for p, s := range h.shards {
				if s.ring.max != tt.each || s.ring.from != tt.starts[p] || s.next != tt.starts[p] {
					t.Errorf("partition %d: ring of %d bytes from %d, next %d; want %d bytes from %d", p, s.ring.max, s.ring.from, s.next, tt.each, tt.starts[p])
				}
			}
		})
	}
}

// fakeReaders is a hub's liveReaders: the end offset of each partition is
// ends[p]; started and stopped record the readers' generations.
type fakeReaders struct {
	mu sync.Mutex
	// Guarded by mu.
	ends    map[int]int64
	started []string // "p@offset#gen"
	stopped []string // "p#gen"
}

func (r *fakeReaders) endOffset(_ context.Context, p int) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ends[p], nil
}

func (r *fakeReaders) startLive(p int, offset int64, gen uint64) (func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = append(r.started, fmt.Sprintf("%d@%d#%d", p, offset, gen))
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.stopped = append(r.stopped, fmt.Sprintf("%d#%d", p, gen))
	}, nil
}

func (r *fakeReaders) log() (started, stopped []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.started), slices.Clone(r.stopped)
}

// manualTimers replaces a hub's afterFunc: timers fire when the test says.
type manualTimers struct {
	armed []*manualTimer
}

type manualTimer struct {
	f       func()
	stopped bool
}

func (t *manualTimer) Stop() bool { was := !t.stopped; t.stopped = true; return was }

func (m *manualTimers) after(_ time.Duration, f func()) stopper {
	t := &manualTimer{f: f}
	m.armed = append(m.armed, t)
	return t
}

// fire runs the last timer armed, even a stopped one (a timer that fired as
// it was stopped).
func (m *manualTimers) fire(t *testing.T) {
	t.Helper()
	if len(m.armed) == 0 {
		t.Fatal("no idle timer was armed")
	}
	m.armed[len(m.armed)-1].f()
}

func newLifecycleHub(t *testing.T, ends map[int]int64) (*hub, *fakeReaders, *manualTimers) {
	t.Helper()
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &fakeReaders{ends: ends}
	h := newHub(slices.Collect(maps.Keys(ends)), hubConfig{replayBuffer: 10, replayBufferBytes: 1 << 20, ringBytes: 1 << 20,
		readers: r, readerIdle: time.Minute}, m, slog.New(slog.DiscardHandler))
	timers := &manualTimers{}
	h.afterFunc = timers.after
	return h, r, timers
}

func gaugeValue(t *testing.T, g interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// docs/pushgw.md "Replicas": a partition's live reader opens at its first
// subscriber, at the partition's end offset, and closes only once no
// subscriber has held it for the idle time; one that comes back before
// keeps it open.
func TestHubOpensAPartitionAtItsFirstSubscriberAndClosesItOnlyAfterItsLastLeftForTheIdleTime(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 10*time.Second)
	h, r, timers := newLifecycleHub(t, map[int]int64{0: 40, 1: 7})
	check := func(what string, started, stopped []string, open float64) {
		t.Helper()
		gotStarted, gotStopped := r.log()
		if !slices.Equal(gotStarted, started) || !slices.Equal(gotStopped, stopped) {
			t.Fatalf("%s: started %v, stopped %v; want %v and %v", what, gotStarted, gotStopped, started, stopped)
		}
		if n := gaugeValue(t, h.metrics.liveReaders); n != open {
			t.Fatalf("%s: live_readers = %v, want %v", what, n, open)
		}
	}
	check("Before any subscriber no reader is open.", nil, nil, 0)
	for range 2 {
		if err := h.acquire(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	check("Two subscribers of partition 0 open one reader, at its end offset.", []string{"0@40#1"}, nil, 1)
	if s := h.shards[0]; s.next != 40 || s.ring.from != 40 {
		t.Fatalf("an opened shard: next %d, ring from %d; want 40 and 40", s.next, s.ring.from)
	}
	h.release(0)
	if len(timers.armed) != 0 {
		t.Fatal("the idle close was armed while a subscriber is left")
	}
	h.release(0)
	check("The last subscriber left: the reader stays open for the idle time.", []string{"0@40#1"}, nil, 1)
	if len(timers.armed) != 1 {
		t.Fatalf("the last subscriber's leaving armed %d idle closes, want 1", len(timers.armed))
	}
	if err := h.acquire(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if !timers.armed[0].stopped {
		t.Fatal("a subscriber within the idle time did not disarm the idle close")
	}
	timers.fire(t) // the timer fired as it was stopped
	check("A subscriber within the idle time keeps the reader.", []string{"0@40#1"}, nil, 1)
	h.release(0)
	timers.fire(t)
	check("The idle time passed without a subscriber: the reader is stopped.", []string{"0@40#1"}, []string{"0#1"}, 0)
	if s := h.shards[0]; s.ring.max != 0 || s.ring.view() != nil {
		t.Fatalf("a closed shard keeps a ring of %d bytes", s.ring.max)
	}
	r.mu.Lock()
	r.ends[0] = 55
	r.mu.Unlock()
	if err := h.acquire(ctx, 0); err != nil {
		t.Fatal(err)
	}
	check("A subscriber after the close opens a new reader at the new end.", []string{"0@40#1", "0@55#2"}, []string{"0#1"}, 1)
	if err := h.acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	check("A subscriber of partition 1 opens its reader.", []string{"0@40#1", "0@55#2", "1@7#1"}, []string{"0#1"}, 2)
	// A third partition, never subscribed, stays closed: shutdown counts
	// off the open readers only.
	h.grow([]int{0, 1, 2})
	h.shutdown()
	// Shutdown stops the readers in no particular order.
	gotStarted, gotStopped := r.log()
	slices.Sort(gotStopped)
	if !slices.Equal(gotStarted, []string{"0@40#1", "0@55#2", "1@7#1"}) || !slices.Equal(gotStopped, []string{"0#1", "0#2", "1#1"}) {
		t.Fatalf("shutdown: started %v, stopped %v (sorted); want the two open readers stopped", gotStarted, gotStopped)
	}
	if n := gaugeValue(t, h.metrics.liveReaders); n != 0 {
		t.Fatalf("shutdown: live_readers = %v, want 0", n)
	}
	if err := h.acquire(ctx, 1); err != errStopped {
		t.Fatalf("acquire after shutdown = %v, want errStopped", err)
	}
}

// hub.go "Readers on demand": a partition reopened after an idle close
// starts at the end offset of the reopening; a resume from a cursor before
// it reads [cursor+1, end) from Kafka (its ring starts at the end), and a
// record the stopped reader dispatches late is dropped, so nothing is
// delivered twice or skipped.
func TestHubReopenedPartitionHandsAResumeToKafkaAndDropsTheStoppedReadersRecords(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 10*time.Second)
	h, r, timers := newLifecycleHub(t, map[int]int64{0: 0})
	if err := h.acquire(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for o := range int64(5) {
		h.dispatch(0, 1, o, []byte("t/u/c"), testValue(int(o)), time.Time{})
	}
	h.release(0)
	timers.fire(t)
	r.mu.Lock()
	r.ends[0] = 9 // offsets 5..8 were produced while the partition was closed
	r.mu.Unlock()
	sink := &fakeSink{}
	sub := &subscription{sink: sink, key: "t/u/c", partition: 0, since: since{kind: sinceAfter, partition: 0, offset: 3}}
	if err := h.acquire(ctx, 0); err != nil {
		t.Fatal(err)
	}
	sub.held = true
	if !h.dispatched(0, 3) {
		t.Fatal("the reopened partition does not count the cursor's record as dispatched")
	}
	if err := h.register(sub, nil); err != nil {
		t.Fatal(err)
	}
	if sub.liveStart != 9 || sub.ringFrom != 9 || sub.ring != nil {
		t.Fatalf("a resume on the reopened partition: liveStart %d, ring from %d, %d ring chunks; want 9, 9 and none (a Kafka replay of 4..8)",
			sub.liveStart, sub.ringFrom, len(sub.ring))
	}
	h.dispatch(0, 1, 5, []byte("t/u/c"), testValue(5), time.Time{})   // the stopped reader, late
	h.dispatch(0, 1, 10, []byte("t/u/c"), testValue(10), time.Time{}) // and even beyond the new start
	h.dispatch(0, 2, 9, []byte("t/u/c"), testValue(9), time.Time{})
	frames, live, ok := h.takePending(sub, nil)
	if !ok || live || !slices.Equal(seqs(t, frames), []string{"9"}) {
		t.Fatalf("pending after the reopening: %v (live %v, ok %v); want only offset 9's record", seqs(t, frames), live, ok)
	}
	h.remove(sub)
	if s := h.shards[0]; s.holds != 0 || len(timers.armed) != 2 {
		t.Fatalf("removing the subscription left %d holds and %d timers armed; want 0 and 2", s.holds, len(timers.armed))
	}
}

// newTestHubOf is a test hub of partitions 0..n-1, all open at offset 0.
func newTestHubOf(t *testing.T, n int) *hub {
	t.Helper()
	starts := map[int]int64{}
	for p := range n {
		starts[p] = 0
	}
	return newTestHub(t, starts, 10)
}

// formerHome (docs/api.md "Cursors": a cursor from before partitions were
// added) says whether a partition was a key's home under a smaller
// partition count, for every key and partition: partition 0 is every
// key's home under one partition; the key's home under the hub's count
// was not a former home unless a smaller count gave it too; a partition
// outside the topic never was.
func TestHubFormerHomeIsAHomeUnderASmallerPartitionCount(t *testing.T) {
	t.Parallel()
	const n = 8
	h := newTestHubOf(t, n)
	parts := h.partitions
	currentOnly := 0
	for i := range 300 {
		key := fmt.Sprintf("t/u/c%d", i)
		former := map[int]bool{}
		for m := 1; m < n; m++ { // the counts the topic had before n
			former[homeOf(key, parts[:m])] = true
		}
		if !former[homeOf(key, parts)] {
			currentOnly++
		}
		for p := -1; p <= n; p++ {
			if got := h.formerHome(key, p); got != former[p] {
				t.Fatalf("formerHome(%s, %d) = %v, want %v (homes under 1..%d partitions: %v; now %d)", key, p, got, former[p], n-1, former, homeOf(key, parts))
			}
		}
	}
	if currentOnly == 0 {
		t.Fatal("no key's home under 8 partitions was new: the case is not exercised")
	}
}

// movedSince is true for a subscription placed under a smaller partition
// count whose key's home is now another partition, and for no other.
func TestHubMovedSinceIsTrueOnlyForAKeyWhoseHomeChangedSinceItWasPlaced(t *testing.T) {
	t.Parallel()
	const n = 8
	h := newTestHubOf(t, n)
	moved, stayed := 0, 0
	for i := range 100 {
		key := fmt.Sprintf("t/u/c%d", i)
		then := homeOf(key, h.partitions[:4])
		want := homeOf(key, h.partitions) != then
		if want {
			moved++
		} else {
			stayed++
		}
		if got := h.movedSince(&subscription{key: key, partition: then, placedBy: 4}); got != want {
			t.Fatalf("%s placed in %d under 4 partitions, home %d under 8: movedSince = %v, want %v", key, then, homeOf(key, h.partitions), got, want)
		}
		now := homeOf(key, h.partitions)
		if h.movedSince(&subscription{key: key, partition: now, placedBy: n}) {
			t.Fatalf("%s placed under the hub's own count: movedSince", key)
		}
		if h.movedSince(&subscription{key: key, partition: then, placedBy: 0}) {
			t.Fatalf("%s never placed: movedSince", key)
		}
	}
	if moved == 0 || stayed == 0 {
		t.Fatalf("%d keys moved, %d stayed: want both", moved, stayed)
	}
}

// grow adds the partitions the hub does not have, reports how many, and
// splits the ring bytes between all of them from then on.
func TestHubGrowAddsTheNewPartitionsAndSplitsTheRingBetweenAll(t *testing.T) {
	t.Parallel()
	h := newTestHubWith(t, map[int]int64{0: 0, 1: 0}, hubConfig{replayBuffer: 10, replayBufferBytes: 1 << 20, ringBytes: 1 << 20})
	if added, _ := h.grow([]int{0, 1}); added != 0 {
		t.Fatalf("grow of the same partitions added %d", added)
	}
	if added, _ := h.grow([]int{0, 1, 2, 3, 4, 5, 6, 7}); added != 6 {
		t.Fatalf("grow from 2 to 8 partitions added %d, want 6", added)
	}
	if len(h.shards) != 8 || !slices.Equal(h.partitions, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("after grow: %d shards, partitions %v", len(h.shards), h.partitions)
	}
	if h.ringBytes != 1<<17 {
		t.Fatalf("after grow to 8 partitions each ring gets %d bytes, want %d", h.ringBytes, 1<<17)
	}
}
