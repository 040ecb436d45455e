package pushgw

import (
	"fmt"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
)

// ringFrame is a test frame of exactly n bytes naming its offset.
func ringFrame(offset int64, n int) []byte {
	f := []byte(fmt.Sprintf("%d:", offset))
	for len(f) < n {
		f = append(f, '.')
	}
	return f
}

// offsetsOf returns the offsets named by frames.
func offsetsOf(t *testing.T, frames [][]byte) []int64 {
	t.Helper()
	var out []int64
	for _, f := range frames {
		var o int64
		if _, err := fmt.Sscanf(string(f), "%d:", &o); err != nil {
			t.Fatalf("frame %q: %v", f, err)
		}
		out = append(out, o)
	}
	return out
}

func span(from, to int64) []int64 {
	var out []int64
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}

func TestRingKeepsTheNewestRecordsWithinItsBytes(t *testing.T) {
	t.Parallel()
	const frameBytes, keyBytes = 100, 5
	per := frameBytes + keyBytes + ringEntryOverhead
	tests := []struct {
		name    string
		max     int
		records int64
	}{
		{"A ring bigger than the stream holds all of it.", 100 * per, 50},
		{"A full ring holds at least all but one chunk of its bytes.", 40 * per, 500},
		{"A ring of a few records still holds the newest.", 3 * per, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRing(tt.max, 1000)
			for o := int64(1000); o < 1000+tt.records; o++ {
				r.add(o, []byte("t/u/c"), ringFrame(o, frameBytes))
				if r.bytes > r.max {
					t.Fatalf("after offset %d the ring holds %d bytes, over its %d", o, r.bytes, r.max)
				}
			}
			end := 1000 + tt.records
			got := offsetsOf(t, r.view().collect("t/u/c", 0))
			if want := span(r.from, end); !slices.Equal(got, want) {
				t.Fatalf("ring from %d holds %v, want every offset of [%d, %d)", r.from, got, r.from, end)
			}
			if held := int(end-r.from) * per; held < tt.max*(ringChunks-1)/ringChunks-per && r.from > 1000 {
				t.Errorf("ring holds %d bytes of %d after eviction: more than a chunk short", held, tt.max)
			}
		})
	}
}

func TestRingCollectsOneKeyFromAnOffset(t *testing.T) {
	t.Parallel()
	r := newRing(1<<20, 0)
	for o := range int64(300) {
		key := "t/u/a"
		if o%3 == 0 {
			key = "t/u/b"
		}
		r.add(o, []byte(key), ringFrame(o, 10))
	}
	v := r.view()
	tests := []struct {
		key   string
		start int64
		want  []int64
	}{
		{"t/u/b", 290, []int64{291, 294, 297}},
		{"t/u/a", 0, nil}, // checked below: every offset not divisible by 3
		{"t/u/b", 295, []int64{297}},
		{"t/u/a", 298, []int64{298, 299}},
		{"t/u/a", 300, nil},
		{"t/u/z", 0, nil},
	}
	for _, tt := range tests {
		got := offsetsOf(t, v.collect(tt.key, tt.start))
		if tt.key == "t/u/a" && tt.start == 0 {
			tt.want = slices.DeleteFunc(span(0, 300), func(o int64) bool { return o%3 == 0 })
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("collect(%s, %d) = %v, want %v", tt.key, tt.start, got, tt.want)
		}
	}
}

func TestARingViewStaysIntactWhileTheRingMovesOn(t *testing.T) {
	t.Parallel()
	r := newRing(8*(20+5+ringEntryOverhead), 0)
	for o := range int64(8) {
		r.add(o, []byte("t/u/c"), ringFrame(o, 20))
	}
	from := r.from
	v := r.view()
	for o := int64(8); o < 100; o++ { // evicts everything the view holds
		r.add(o, []byte("t/u/c"), ringFrame(o, 20))
	}
	if got, want := offsetsOf(t, v.collect("t/u/c", 0)), span(from, 8); !slices.Equal(got, want) {
		t.Fatalf("the old view holds %v, want %v", got, want)
	}
}

func TestARecordBiggerThanTheRingEmptiesIt(t *testing.T) {
	t.Parallel()
	r := newRing(1000, 0)
	r.add(0, []byte("k"), ringFrame(0, 10))
	r.add(1, []byte("k"), ringFrame(1, 2000))
	if r.from != 2 || r.bytes != 0 || len(r.view()) != 0 {
		t.Fatalf("after an oversized record: from %d, %d bytes, %d chunks; want from 2 and empty", r.from, r.bytes, len(r.view()))
	}
	r.add(2, []byte("k"), ringFrame(2, 10))
	if got := offsetsOf(t, r.view().collect("k", 0)); !slices.Equal(got, []int64{2}) {
		t.Fatalf("ring holds %v, want [2]", got)
	}
}

func TestAZeroRingHoldsNothing(t *testing.T) {
	t.Parallel()
	r := newRing(0, 5)
	r.add(5, []byte("k"), ringFrame(5, 1))
	if r.from != 6 || len(r.view()) != 0 {
		t.Fatalf("a disabled ring: from %d, %d chunks", r.from, len(r.view()))
	}
}

func TestHubRegisterTakesTheRingViewWithLiveStart(t *testing.T) {
	t.Parallel()
	h := newTestHubWith(t, map[int]int64{0: 100}, hubConfig{replayBuffer: 10, replayBufferBytes: 1 << 20, ringBytes: 1 << 20})
	for o := int64(100); o < 110; o++ {
		h.dispatchNow(0, o, []byte("t/u/c"), testValue(int(o)), time.Time{})
	}
	sub := &subscription{sink: &fakeSink{}, key: "t/u/c", partition: 0, since: since{kind: sinceAfter, offset: 104}}
	if err := h.register(sub, nil); err != nil {
		t.Fatal(err)
	}
	h.dispatchNow(0, 110, []byte("t/u/c"), testValue(110), time.Time{}) // after registration: live, not in the view
	if sub.ringFrom != 100 || sub.liveStart != 110 {
		t.Fatalf("ringFrom %d, liveStart %d; want 100 and 110", sub.ringFrom, sub.liveStart)
	}
	if got, want := seqs(t, sub.ring.collect("t/u/c", 105)), []string{"105", "106", "107", "108", "109"}; !slices.Equal(got, want) {
		t.Fatalf("view from 105 = %v, want %v", got, want)
	}
}

func TestHubForgetsTheRingWhenTheLiveReaderSkipsOffsets(t *testing.T) {
	t.Parallel()
	h := newTestHub(t, map[int]int64{0: 0}, 10)
	for o := range int64(5) {
		h.dispatchNow(0, o, []byte("t/u/c"), testValue(int(o)), time.Time{})
	}
	h.dispatchNow(0, 9, []byte("t/u/c"), testValue(9), time.Time{}) // 5..8 were deleted before the reader got them
	s := h.shards[0]
	if s.ring.from != 9 || s.next != 10 {
		t.Fatalf("after a skip: ring from %d, next %d; want 9 and 10", s.ring.from, s.next)
	}
	// skipped_records_total counts the offsets never seen: 5 to 8.
	var m dto.Metric
	if err := h.metrics.skippedRecords.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 4 {
		t.Fatalf("skipped records counted %v, want 4 (offsets 5 to 8)", got)
	}
}

func TestHubAwaitDispatchedWaitsForTheDispatcher(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	bound := testenv.Context(t, 30*time.Second) // the test's hang detector; await's own ctx outlives it
	h := newTestHub(t, map[int]int64{0: 0}, 10)
	if err := h.awaitDispatched(ctx, nil, 0, 0, time.Millisecond); err != errCursorAhead {
		t.Fatalf("await with nothing dispatched = %v, want errCursorAhead", err)
	}
	done := make(chan error, 1)
	go func() { done <- h.awaitDispatched(ctx, nil, 0, 2, time.Minute) }()
	for o := range int64(3) {
		h.dispatchNow(0, o, []byte("t/u/c"), testValue(int(o)), time.Time{})
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("await = %v once offset 2 was dispatched", err)
		}
	case <-bound.Done():
		t.Fatal("await did not return once offset 2 was dispatched")
	}
	stop := make(chan struct{})
	close(stop)
	if err := h.awaitDispatched(ctx, stop, 0, 50, time.Minute); err != errStopped {
		t.Fatalf("await on a stopped client = %v, want errStopped", err)
	}
}

// chunkLens returns how many entries each chunk of r holds, oldest first.
func chunkLens(r *ring) []int {
	var out []int
	for _, c := range r.view() {
		out = append(out, len(c))
	}
	return out
}

func TestRingChunksAndEvictionAtTheirExactBounds(t *testing.T) {
	t.Parallel()
	const frameBytes, keyBytes = 100, 5
	per := frameBytes + keyBytes + ringEntryOverhead
	tests := []struct {
		name    string
		max     int
		records int64
		from    int64 // the first offset the ring still covers (it starts at 0)
		chunks  []int
	}{
		{"A chunk takes records until they fill exactly its target bytes.", 16 * per, 4, 0, []int{2, 2}},
		{"A ring filled to exactly its bytes evicts nothing.", 16 * per, 16, 0, []int{2, 2, 2, 2, 2, 2, 2, 2}},
		{"One record past the ring's bytes evicts exactly the oldest chunk.", 16 * per, 17, 2, []int{2, 2, 2, 2, 2, 2, 2, 1}},
		{"A record of exactly the ring's bytes is kept alone.", per, 3, 2, []int{1}},
		{"Records of a chunk's whole target each take a chunk of their own.", 8 * per, 9, 1, []int{1, 1, 1, 1, 1, 1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRing(tt.max, 0)
			for o := range tt.records {
				r.add(o, []byte("t/u/c"), ringFrame(o, frameBytes))
			}
			if got := chunkLens(&r); r.from != tt.from || !slices.Equal(got, tt.chunks) {
				t.Fatalf("after %d records of %d bytes in a ring of %d: from %d, chunks %v; want from %d, chunks %v",
					tt.records, per, tt.max, r.from, got, tt.from, tt.chunks)
			}
			if got, want := offsetsOf(t, r.view().collect("t/u/c", 0)), span(tt.from, tt.records); !slices.Equal(got, want) {
				t.Fatalf("ring holds %v, want %v", got, want)
			}
		})
	}
}

func TestRingChunkHoldsAtMostItsEntryCap(t *testing.T) {
	t.Parallel()
	r := newRing(1<<30, 0) // bytes never cut a chunk here: only the entry cap does
	for o := range int64(2*ringChunkMaxEntries + 1) {
		r.add(o, []byte("k"), ringFrame(o, 8))
	}
	if got, want := chunkLens(&r), []int{ringChunkMaxEntries, ringChunkMaxEntries, 1}; !slices.Equal(got, want) {
		t.Fatalf("chunks of %v entries, want %v", got, want)
	}
}
