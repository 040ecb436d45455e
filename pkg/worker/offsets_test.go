package worker

import (
	"math/rand/v2"
	"testing"
)

func TestOffsetTrackerCommitsOnlyTheContiguousDonePrefix(t *testing.T) {
	t.Parallel()
	tr := newOffsetTracker()
	for _, o := range []int64{5, 6, 8, 9} { // 7 was a transaction marker: never fetched
		tr.add(o)
	}
	if _, ok := tr.advance(); ok {
		t.Fatal("advanced with nothing done")
	}
	tr.done(6)
	tr.done(9)
	if _, ok := tr.advance(); ok {
		t.Fatal("advanced past 5, which is not done")
	}
	tr.done(5)
	if next, ok := tr.advance(); !ok || next != 7 {
		t.Fatalf("advance = %d %v, want 7", next, ok)
	}
	tr.done(8)
	if next, ok := tr.advance(); !ok || next != 10 || tr.outstanding() != 0 {
		t.Fatalf("advance = %d %v (outstanding %d), want 10", next, ok, tr.outstanding())
	}
}

func TestOffsetTrackerNeverCommitsAnUnfinishedRecordUnderRandomCompletion(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	tr := newOffsetTracker()
	const n = 2000
	done := make([]bool, n)
	var order []int64
	for o := int64(0); o < n; o++ {
		tr.add(o)
		order = append(order, o)
	}
	r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	committed := int64(-1)
	for _, o := range order {
		done[o] = true
		tr.done(o)
		if next, ok := tr.advance(); ok {
			for x := committed + 1; x < next; x++ {
				if x >= 0 && !done[x] {
					t.Fatalf("committed %d past unfinished %d", next, x)
				}
			}
			if next <= committed {
				t.Fatalf("commit went back from %d to %d", committed, next)
			}
			committed = next
		}
	}
	if committed != n {
		t.Fatalf("final commit %d, want %d", committed, n)
	}
}

// done of an offset the tracker does not hold (committed already, past
// everything fetched, or never fetched) changes nothing.
func TestOffsetTrackerIgnoresAnOffsetItDoesNotHold(t *testing.T) {
	t.Parallel()
	tr := newOffsetTracker()
	tr.done(3) // nothing fetched yet
	tr.add(5)
	tr.add(8)
	tr.done(9) // past everything fetched
	tr.done(7) // never fetched (a gap in the partition)
	if _, ok := tr.advance(); ok || tr.outstanding() != 2 {
		t.Fatalf("advanced (outstanding %d) on offsets the tracker does not hold", tr.outstanding())
	}
	tr.done(5)
	if next, ok := tr.advance(); !ok || next != 6 {
		t.Fatalf("advance = %d %v, want 6", next, ok)
	}
	tr.done(5) // committed already: popped
	tr.done(8)
	if next, ok := tr.advance(); !ok || next != 9 || tr.outstanding() != 0 {
		t.Fatalf("advance = %d %v (outstanding %d), want 9 and none left", next, ok, tr.outstanding())
	}
	tr.done(8) // twice, with nothing left
	if next, ok := tr.advance(); ok || next != 9 {
		t.Fatalf("advance = %d %v after a repeated done, want 9 unmoved", next, ok)
	}
}
