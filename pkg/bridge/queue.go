package bridge

import "sync"

// itemQueue is the bounded buffer between a run's reader (the only
// producer) and its coordinator (the only consumer). It holds at most max
// items; push waits for room. Unlike a channel of capacity max it allocates
// only as much as it has held at once: a run rarely buffers more than a few
// items, and a preallocated channel of DefaultBufferSize items cost 88 KB,
// zeroed and scanned, per run.
type itemQueue struct {
	max   int
	ready chan struct{} // cap 1: items were pushed or the queue was closed
	room  chan struct{} // cap 1: the consumer took items

	mu sync.Mutex
	// Guarded by mu.
	items  []item
	closed bool
}

func newItemQueue(max int) *itemQueue {
	return &itemQueue{max: max, ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

// closedChan is always ready to receive from.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// push appends it once the queue has room. It returns false, without
// queueing, once quit is closed (the consumer is gone).
func (q *itemQueue) push(it item, quit <-chan struct{}) bool {
	for {
		select {
		case <-quit:
			return false
		default:
		}
		q.mu.Lock()
		if len(q.items) < q.max {
			q.items = append(q.items, it)
			q.mu.Unlock()
			signal(q.ready)
			return true
		}
		q.mu.Unlock()
		select {
		case <-q.room:
		case <-quit:
			return false
		}
	}
}

// close tells the consumer that no more items come. The producer calls it
// once, after its last push.
func (q *itemQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	signal(q.ready)
}

// take returns every queued item, in order, and whether the queue is closed
// (then no item will follow the ones returned). spare, emptied, becomes the
// queue's next buffer: the caller must not use it afterwards. When it
// returns nothing (nil) and the queue is open, wait on q.ready.
func (q *itemQueue) take(spare []item) (items []item, closed bool) {
	clear(spare)
	q.mu.Lock()
	closed = q.closed
	if len(q.items) > 0 {
		items, q.items = q.items, spare[:0]
	}
	q.mu.Unlock()
	if len(items) > 0 {
		signal(q.room)
	}
	return items, closed
}
