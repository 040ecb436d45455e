package pushgw

import (
	"context"
	"sync"
	"time"
)

// outboxKeep is the queue capacity an emptied outbox keeps; a bigger
// backing array is dropped, so an idle connection holds no queue memory
// after a burst.
const outboxKeep = 16

// outbox is a client's outbound queue, bounded both in frames and in bytes.
// A frame counts from push until the writer reports it sent, so the bounds
// cover the frame being written too. A frame always fits an empty queue.
//
// Live frames use tryPush, which never waits: the hub sheds a client whose
// queue is full. Replays and replies use push, which waits for room and
// leaves the top half of the queue to live frames, so a catch-up never
// crowds out the live traffic of the connection's other subscriptions.
//
// Its methods are safe for concurrent use; pop and sent are the writer's.
// mu is a leaf lock: it may be taken under a shard lock.
type outbox struct {
	maxFrames int
	maxBytes  int
	wake      chan struct{} // cap 1: there are frames to write

	mu sync.Mutex
	// Guarded by mu.
	queue  []queued // queue[head:] waits to be written
	head   int
	frames int           // queued or being written
	bytes  int           // of those frames
	room   chan struct{} // closed when a frame is sent; nil while no one waits
}

// queued is a frame in the queue; at is when the hub's live dispatch
// queued it (zero for replies and replays), for the client write lag.
type queued struct {
	f  []byte
	at time.Time
}

func newOutbox(maxFrames, maxBytes int) *outbox {
	return &outbox{maxFrames: maxFrames, maxBytes: maxBytes, wake: make(chan struct{}, 1)}
}

// fits reports whether a frame of n bytes fits within the given bounds.
// Called with mu held.
func (o *outbox) fits(n, maxFrames, maxBytes int) bool {
	return o.frames == 0 || (o.frames < maxFrames && o.bytes+n <= maxBytes)
}

// enqueue appends f, queued at at, and, if the queue was empty, wakes the
// writer. Called with mu held.
func (o *outbox) enqueue(f []byte, at time.Time) {
	if o.head > 0 && len(o.queue) == cap(o.queue) {
		n := copy(o.queue, o.queue[o.head:])
		clear(o.queue[n:])
		o.queue, o.head = o.queue[:n], 0
	}
	o.queue = append(o.queue, queued{f: f, at: at})
	o.frames++
	o.bytes += len(f)
	if len(o.queue)-o.head > 1 {
		return // the writer has not emptied the queue yet: it will get f too
	}
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// tryPush queues f if it fits the queue's bounds and reports whether it did.
// It never blocks.
func (o *outbox) tryPush(f []byte) bool { return o.tryPushAt(f, time.Time{}) }

// tryPushAt is tryPush of a live frame the hub dispatched at at.
func (o *outbox) tryPushAt(f []byte, at time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.fits(len(f), o.maxFrames, o.maxBytes) {
		return false
	}
	o.enqueue(f, at)
	return true
}

// push queues f once the queue is at most half full (in frames and in
// bytes), waiting for the writer as needed. It reports false, without
// queueing, when ctx ends or stop is closed first.
func (o *outbox) push(ctx context.Context, stop <-chan struct{}, f []byte) bool {
	halfFrames, halfBytes := max(1, o.maxFrames/2), max(1, o.maxBytes/2)
	for {
		o.mu.Lock()
		if o.fits(len(f), halfFrames, halfBytes) {
			o.enqueue(f, time.Time{})
			o.mu.Unlock()
			return true
		}
		if o.room == nil {
			o.room = make(chan struct{})
		}
		room := o.room
		o.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return false
		case <-stop:
			return false
		}
	}
}

// pop takes the oldest queued frame for the writer, which must call sent
// once it is written or dropped.
func (o *outbox) pop() ([]byte, bool) {
	f, _, ok := o.popAt()
	return f, ok
}

// popAt is pop, with the time the hub's live dispatch queued the frame
// (zero for replies and replays).
func (o *outbox) popAt() ([]byte, time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.head == len(o.queue) {
		return nil, time.Time{}, false
	}
	q := o.queue[o.head]
	o.queue[o.head] = queued{}
	o.head++
	if o.head == len(o.queue) {
		o.head = 0
		if cap(o.queue) > outboxKeep {
			o.queue = nil
		} else {
			o.queue = o.queue[:0]
		}
	}
	return q.f, q.at, true
}

// sent releases a popped frame of n bytes and wakes the pushers waiting for
// room.
func (o *outbox) sent(n int) {
	o.mu.Lock()
	o.frames--
	o.bytes -= n
	room := o.room
	o.room = nil
	o.mu.Unlock()
	if room != nil {
		close(room)
	}
}

// waiting returns the frames queued and not yet popped.
func (o *outbox) waiting() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.queue) - o.head
}

// size returns the frames queued or being written, and their bytes.
func (o *outbox) size() (frames, bytes int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.frames, o.bytes
}
