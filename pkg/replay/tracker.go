package replay

import (
	"sort"
	"sync"
)

// tracker follows one partition's records from read to done, which may
// happen out of order (shadow runs conversations concurrently), and yields
// the first offset below which every record is done: where a resumed
// replay starts reading. Offsets may have gaps; only records read count.
type tracker struct {
	mu sync.Mutex // guards every field below
	// queue holds the records read and not yet popped, ascending; head is
	// the first not popped.
	queue []trackedOffset
	head  int
	// next is one past the last record read (the range's Next before any).
	next int64
	end  int64
	// finished is set when the reader has passed the end of the range.
	finished bool
}

type trackedOffset struct {
	off  int64
	done bool
}

func newTracker(r partitionRange) *tracker { return &tracker{next: r.Next, end: r.End} }

// read notes a record read (offsets ascend).
func (t *tracker) read(off int64) {
	t.mu.Lock()
	t.queue = append(t.queue, trackedOffset{off: off})
	t.next = off + 1
	t.mu.Unlock()
}

// done marks a record read earlier as done.
func (t *tracker) done(off int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.queue[t.head:]
	i := sort.Search(len(q), func(i int) bool { return q[i].off >= off })
	if i == len(q) || q[i].off != off {
		return
	}
	q[i].done = true
	for t.head < len(t.queue) && t.queue[t.head].done {
		t.head++
	}
	if t.head == len(t.queue) {
		t.queue, t.head = t.queue[:0], 0
	} else if t.head > 1024 && t.head > len(t.queue)/2 {
		n := copy(t.queue, t.queue[t.head:])
		t.queue, t.head = t.queue[:n], 0
	}
}

// finish notes that the reader passed the end of the range.
func (t *tracker) finish() {
	t.mu.Lock()
	t.finished = true
	t.mu.Unlock()
}

// resumeAt is the first offset not known done: a resumed replay reads from
// there (records after it that are done are in the report and skipped).
func (t *tracker) resumeAt() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.head < len(t.queue):
		return t.queue[t.head].off
	case t.finished:
		return t.end
	}
	return t.next
}
