package pushgw

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// The hand-over from replay to live, without gap or duplicate.
//
// Every partition has a shard whose mutex serialises three things: the live
// dispatcher delivering the record at offset o and advancing shard.next to
// o+1, a subscription registering, and a subscription switching to live.
// Kafka gives each partition's records in offset order, so under that lock
// shard.next splits the partition in two: every offset below it has been
// dispatched already, every offset at or above it will be dispatched later,
// by the same dispatcher, after the lock is released.
//
// register records liveStart = shard.next under the lock. From then on the
// dispatcher hands the subscription every record with offset >= liveStart
// and none below it. A subscription with since is registered "replaying":
// the dispatcher appends its frames to sub.pending (at most ReplayBuffer
// frames and ReplayBufferBytes, beyond that the client is shed with 4008)
// instead of queueing them. The replay produces exactly the records of
// [start, liveStart), so the two ranges neither overlap (no duplicate) nor
// leave a hole (no gap). When the replay is done, takePending hands the
// buffered frames over in batches; the batch that comes back empty flips
// sub.live under the lock, so the next dispatched frame goes straight to
// the client's queue, after every frame of the replay and of the buffer. A
// subscription without since is live from registration on; its subscribed
// frame is queued under the same lock, so it precedes the subscription's
// first event.
//
// The replay has two sources for [start, liveStart). The shard's ring holds
// every record of [ring.from, shard.next); register takes a view of it
// under the same lock as liveStart, so that view holds exactly the records
// of [ring.from, liveStart). When start >= ring.from the replay reads the
// view and never touches Kafka; otherwise a reader of its own reads
// [start, liveStart) from Kafka.
//
// A cursor names the record at (partition, offset); since it means start =
// offset+1. Offsets at or above liveStart have not been dispatched here
// yet: a cursor from a replica further ahead. awaitDispatched waits
// (boundedly) for the dispatcher to pass it, and register refuses it if it
// has not. "earliest" means start = the partition's first retained offset.
// An empty range (start >= liveStart) needs no read at all.
//
// Only records of the subscription's partition can reach it: subscriptions
// live in the shard of the partition their key hashes to, and each shard
// sees only its own partition's records.

// errCursorAhead refuses a cursor this gateway has not dispatched yet.
var errCursorAhead = errors.New("since: cursor is ahead of the stream")

// sink takes a subscription's frames: a client. Both methods are called with
// a shard lock held and never block.
type sink interface {
	// deliver queues frame, which the live dispatch queued at at (zero:
	// not a dispatched record). When the queue is full it sheds the client
	// (4008) and returns false.
	deliver(frame []byte, at time.Time) bool
	// overflow sheds the client because a replay buffer overflowed.
	overflow()
}

// subscription is one connection's interest in one identity key.
type subscription struct {
	sink         sink
	key          string // identity key, tenant/user/conversation
	conversation string
	partition    int
	since        since

	// Set by the subscribing client before the subscription is shared and
	// read-only afterwards. Nil for a subscription without since.
	cancel  func()        // stops the replay
	stopped chan struct{} // closed when the replay can no longer queue frames

	// Written by register under the shard lock before the subscription can
	// be dispatched to or replayed, then read only by the replay.
	liveStart int64    // the first offset the dispatcher delivers to it
	ringFrom  int64    // the ring holds every record of [ringFrom, liveStart)
	ring      ringView // those records; the replay drops it once read

	// Guarded by the mutex of the subscription's shard.
	indexed      bool     // in the shard's index
	removed      bool     // ended: never (again) in the index
	live         bool     // frames go straight to the sink
	overflowed   bool     // pending overflowed and the client was shed
	pending      [][]byte // live frames held back while replaying
	pendingBytes int
}

// hub routes the records of the stream topic to subscriptions. Its methods
// are safe for concurrent use; dispatch must be called by one goroutine per
// partition, in offset order.
type hub struct {
	partitions        []int          // sorted partition ids, as the producers' balancer sees them
	shards            map[int]*shard // one per partition; the map itself is read-only
	replayBuffer      int
	replayBufferBytes int
	metrics           *metrics
	log               *slog.Logger
}

// shard holds one partition's subscriptions and recent records.
type shard struct {
	mu sync.Mutex
	// Guarded by mu.
	next     int64                      // the next offset the live dispatcher delivers
	subs     map[string][]*subscription // by identity key
	ring     ring
	advanced chan struct{} // closed when next advances; nil while no one waits
}

// hubConfig sizes a hub.
type hubConfig struct {
	replayBuffer      int // frames held back per replaying subscription
	replayBufferBytes int // bytes of those
	ringBytes         int // ring bytes, split between the partitions
}

// newHub returns a hub whose dispatchers start at starts (partition → first
// offset they will deliver).
func newHub(starts map[int]int64, cfg hubConfig, m *metrics, log *slog.Logger) *hub {
	h := &hub{
		shards:            make(map[int]*shard, len(starts)),
		replayBuffer:      cfg.replayBuffer,
		replayBufferBytes: cfg.replayBufferBytes,
		metrics:           m,
		log:               log,
	}
	perPartition := 0
	if len(starts) > 0 {
		perPartition = cfg.ringBytes / len(starts)
	}
	for p, off := range starts {
		h.partitions = append(h.partitions, p)
		h.shards[p] = &shard{next: off, subs: make(map[string][]*subscription), ring: newRing(perPartition, off)}
	}
	slices.Sort(h.partitions)
	return h
}

// partitionOf returns the partition the producers' Murmur2 balancer writes key to.
func (h *hub) partitionOf(key string) int {
	return kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: []byte(key)}, h.partitions...)
}

// dispatched reports whether partition's dispatcher has delivered offset.
func (h *hub) dispatched(partition int, offset int64) bool {
	s := h.shards[partition]
	s.mu.Lock()
	defer s.mu.Unlock()
	return offset < s.next
}

// awaitDispatched waits until partition's dispatcher has delivered offset,
// for at most wait. It returns errCursorAhead when wait runs out and
// errStopped when ctx ends or stop is closed.
func (h *hub) awaitDispatched(ctx context.Context, stop <-chan struct{}, partition int, offset int64, wait time.Duration) error {
	s := h.shards[partition]
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if offset < s.next {
			s.mu.Unlock()
			return nil
		}
		if s.advanced == nil {
			s.advanced = make(chan struct{})
		}
		advanced := s.advanced
		s.mu.Unlock()
		select {
		case <-advanced:
		case <-timer.C:
			return errCursorAhead
		case <-ctx.Done():
			return errStopped
		case <-stop:
			return errStopped
		}
	}
}

// register adds sub to the index and sets sub.liveStart (and, with since,
// the ring view). A subscription without since becomes live at once, with
// hello (its subscribed frame) delivered first; one with since buffers
// until its replay calls takePending. A cursor at or beyond liveStart is
// refused (errCursorAhead), and so is a subscription removed already
// (errStopped).
func (h *hub) register(sub *subscription, hello []byte) error {
	s := h.shards[sub.partition]
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub.removed {
		return errStopped
	}
	sub.liveStart = s.next
	if sub.since.kind == sinceAfter && sub.since.offset >= s.next {
		sub.removed = true
		return errCursorAhead
	}
	if sub.since.kind == sinceLive {
		sub.live = true
		sub.sink.deliver(hello, time.Time{})
	} else {
		sub.ringFrom, sub.ring = s.ring.from, s.ring.view()
	}
	s.subs[sub.key] = append(s.subs[sub.key], sub)
	sub.indexed = true
	h.metrics.subscriptions.Inc()
	return nil
}

// remove ends sub: no frame reaches its sink once remove returns, and a
// later register fails. Removing twice, or before registering, is harmless.
func (h *hub) remove(sub *subscription) {
	s := h.shards[sub.partition]
	s.mu.Lock()
	defer s.mu.Unlock()
	sub.removed = true
	sub.pending, sub.pendingBytes = nil, 0
	if !sub.indexed {
		return
	}
	sub.indexed = false
	list := s.subs[sub.key]
	if i := slices.Index(list, sub); i >= 0 {
		last := len(list) - 1
		list[i], list[last] = list[last], nil
		list = list[:last]
	}
	if len(list) == 0 {
		delete(s.subs, sub.key)
	} else {
		s.subs[sub.key] = list
	}
	h.metrics.subscriptions.Dec()
}

// takePending hands over the frames sub buffered during its replay, reusing
// spare as the next buffer. When none are left it switches sub to live and
// returns live = true. ok is false when sub was removed or overflowed.
func (h *hub) takePending(sub *subscription, spare [][]byte) (frames [][]byte, live, ok bool) {
	s := h.shards[sub.partition]
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub.removed || sub.overflowed {
		return nil, false, false
	}
	if len(sub.pending) == 0 {
		sub.live = true
		return nil, true, true
	}
	frames, sub.pending, sub.pendingBytes = sub.pending, spare[:0], 0
	return frames, false, true
}

// dispatch routes the record at offset of partition to the subscriptions of
// its key and keeps it in the partition's ring. The frame is built once and
// shared by every recipient and the ring; nothing here blocks on a client.
// recorded is the record's Kafka timestamp, for the delivery lag metric.
func (h *hub) dispatch(partition int, offset int64, key, value []byte, recorded time.Time) {
	s := h.shards[partition]
	if s == nil {
		return
	}
	began := time.Now()
	bad := ""
	if _, err := events.ParseKey(string(key)); err != nil {
		bad = err.Error()
	} else if !validValue(value) {
		bad = "value is not a JSON object ending in '}'"
	}
	var frame []byte
	if bad != "" {
		h.metrics.badRecords.Inc()
		h.log.Debug("skipped bad stream record", "partition", partition, "offset", offset, "reason", bad)
	} else {
		frame = eventFrame(value, partition, offset)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if offset < s.next {
		return // already dispatched; delivering it again would duplicate it
	}
	if offset > s.next {
		// The stream topic is neither compacted nor transactional, so its
		// offsets are dense: the live reader skipped records (retention
		// deleted them before it read them). The ring must not claim them.
		h.metrics.skippedRecords.Add(float64(offset - s.next))
		h.log.Warn("live reader skipped records", "partition", partition, "from", s.next, "to", offset)
		s.ring.reset(offset)
	}
	s.next = offset + 1
	if s.advanced != nil {
		close(s.advanced)
		s.advanced = nil
	}
	if bad != "" {
		return
	}
	s.ring.add(offset, key, frame)
	subs := s.subs[string(key)]
	if len(subs) == 0 {
		return
	}
	delivered := 0
	queued := time.Now()
	for _, sub := range subs {
		switch {
		case sub.live:
			if sub.sink.deliver(frame, queued) {
				delivered++
			}
		case sub.overflowed:
		case len(sub.pending) >= h.replayBuffer || (len(sub.pending) > 0 && sub.pendingBytes+len(frame) > h.replayBufferBytes):
			sub.overflowed, sub.pending, sub.pendingBytes = true, nil, 0
			sub.sink.overflow()
		default:
			sub.pending = append(sub.pending, frame)
			sub.pendingBytes += len(frame)
		}
	}
	if delivered > 0 {
		h.metrics.eventsOut.Add(float64(delivered))
		done := time.Now()
		h.metrics.fanout.Observe(done.Sub(began).Seconds())
		if !recorded.IsZero() {
			h.metrics.deliveryLag.Observe(max(0, done.Sub(recorded).Seconds()))
		}
	}
}
