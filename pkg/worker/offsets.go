package worker

import "sort"

// offsetTracker follows the records of one partition from fetch to done and
// yields the offset to commit: one past the highest offset below which every
// fetched record is done. Records complete out of order (different
// conversations run concurrently); the committed offset never passes one
// that is not done. It is not safe for concurrent use.
type offsetTracker struct {
	pending []trackedOffset // fetched, in offset order, done prefix popped
	next    int64           // offset to commit; -1 before anything is done
}

type trackedOffset struct {
	offset int64
	done   bool
}

func newOffsetTracker() *offsetTracker { return &offsetTracker{next: -1} }

// add records a fetched offset; offsets arrive in increasing order.
func (t *offsetTracker) add(offset int64) {
	t.pending = append(t.pending, trackedOffset{offset: offset})
}

// done marks a fetched offset done.
func (t *offsetTracker) done(offset int64) {
	i := sort.Search(len(t.pending), func(i int) bool { return t.pending[i].offset >= offset })
	if i < len(t.pending) && t.pending[i].offset == offset {
		t.pending[i].done = true
	}
}

// advance pops the done prefix and reports the new offset to commit, if it
// moved.
func (t *offsetTracker) advance() (int64, bool) {
	i := 0
	for i < len(t.pending) && t.pending[i].done {
		i++
	}
	if i == 0 {
		return t.next, false
	}
	t.next = t.pending[i-1].offset + 1
	// Reuse the array once it drained; otherwise slide.
	t.pending = append(t.pending[:0], t.pending[i:]...)
	return t.next, true
}

// outstanding is how many fetched records are not yet committable.
func (t *offsetTracker) outstanding() int { return len(t.pending) }
