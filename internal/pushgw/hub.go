package pushgw

import (
	"errors"
	"log/slog"
	"slices"
	"sync"

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
// the dispatcher appends its frames to sub.pending (at most ReplayBuffer,
// beyond that the client is shed with 4008) instead of queueing them. The
// replay reads exactly [start, liveStart) from Kafka with its own reader, so
// the two ranges neither overlap (no duplicate) nor leave a hole (no gap).
// When the replay is done, takePending hands the buffered frames over in
// batches; the batch that comes back empty flips sub.live under the lock, so
// the next dispatched frame goes straight to the client's queue, after every
// frame of the replay and of the buffer. A subscription without since is
// live from registration on; its subscribed frame is queued under the same
// lock, so it precedes the subscription's first event.
//
// A cursor names the record at (partition, offset); since it means start =
// offset+1. Offsets at or above liveStart have not been dispatched here yet,
// so such a cursor is refused. "earliest" means start = the partition's first
// retained offset. An empty range (start >= liveStart) skips Kafka.
//
// Only records of the subscription's partition can reach it: subscriptions
// live in the shard of the partition their key hashes to, and each shard
// sees only its own partition's records.

// errCursorAhead refuses a cursor this gateway has not dispatched yet.
var errCursorAhead = errors.New("since: cursor is ahead of the stream")

// sink takes a subscription's frames: a client. Both methods are called with
// a shard lock held and never block.
type sink interface {
	// deliver queues frame. When the queue is full it sheds the client
	// (4008) and returns false.
	deliver(frame []byte) bool
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

	// liveStart is written by register under the shard lock before the
	// subscription can be dispatched to or replayed, and read-only after.
	liveStart int64

	// Guarded by the mutex of the subscription's shard.
	indexed    bool     // in the shard's index
	removed    bool     // ended: never (again) in the index
	live       bool     // frames go straight to the sink
	overflowed bool     // pending overflowed and the client was shed
	pending    [][]byte // live frames held back while replaying
}

// hub routes the records of the stream topic to subscriptions. Its methods
// are safe for concurrent use; dispatch must be called by one goroutine per
// partition, in offset order.
type hub struct {
	partitions   []int          // sorted partition ids, as the producers' balancer sees them
	shards       map[int]*shard // one per partition; the map itself is read-only
	replayBuffer int
	metrics      *metrics
	log          *slog.Logger
}

// shard holds one partition's subscriptions.
type shard struct {
	mu sync.Mutex
	// Guarded by mu.
	next int64                      // the next offset the live dispatcher delivers
	subs map[string][]*subscription // by identity key
}

// newHub returns a hub whose dispatchers start at starts (partition → first
// offset they will deliver).
func newHub(starts map[int]int64, replayBuffer int, m *metrics, log *slog.Logger) *hub {
	h := &hub{shards: make(map[int]*shard, len(starts)), replayBuffer: replayBuffer, metrics: m, log: log}
	for p, off := range starts {
		h.partitions = append(h.partitions, p)
		h.shards[p] = &shard{next: off, subs: make(map[string][]*subscription)}
	}
	slices.Sort(h.partitions)
	return h
}

// partitionOf returns the partition the producers' Murmur2 balancer writes key to.
func (h *hub) partitionOf(key string) int {
	return kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: []byte(key)}, h.partitions...)
}

// register adds sub to the index and sets sub.liveStart. A subscription
// without since becomes live at once, with hello (its subscribed frame)
// delivered first; one with since buffers until its replay calls
// takePending. A cursor at or beyond liveStart is refused (errCursorAhead),
// and so is a subscription removed already (errStopped).
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
		sub.sink.deliver(hello)
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
	sub.pending = nil
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
	frames, sub.pending = sub.pending, spare[:0]
	return frames, false, true
}

// dispatch routes the record at offset of partition to the subscriptions of
// its key. The frame is built once and shared by every recipient; nothing
// here blocks on a client.
func (h *hub) dispatch(partition int, offset int64, key, value []byte) {
	s := h.shards[partition]
	if s == nil {
		return
	}
	bad := ""
	if _, err := events.ParseKey(string(key)); err != nil {
		bad = err.Error()
	} else if !validValue(value) {
		bad = "value is not a JSON object ending in '}'"
	}
	if bad != "" {
		h.metrics.badRecords.Inc()
		h.log.Debug("skipped bad stream record", "partition", partition, "offset", offset, "reason", bad)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if offset < s.next {
		return // already dispatched; delivering it again would duplicate it
	}
	s.next = offset + 1
	subs := s.subs[string(key)]
	if bad != "" || len(subs) == 0 {
		return
	}
	frame := eventFrame(value, partition, offset)
	delivered := 0
	for _, sub := range subs {
		switch {
		case sub.live:
			if sub.sink.deliver(frame) {
				delivered++
			}
		case sub.overflowed:
		case len(sub.pending) >= h.replayBuffer:
			sub.overflowed, sub.pending = true, nil
			sub.sink.overflow()
		default:
			sub.pending = append(sub.pending, frame)
		}
	}
	if delivered > 0 {
		h.metrics.eventsOut.Add(float64(delivered))
	}
}
