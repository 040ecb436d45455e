package pushgw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
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
//
// Readers on demand. A shard is closed until a subscribe acquires it: the
// first acquire lists the partition's end offset E, starts a live reader at
// E and sets shard.next = E and an empty ring from E, all under the shard
// lock before the reader can dispatch, so the split above holds from the
// first record on: nothing below E will be dispatched, everything from E
// on will. A resume on a partition just opened therefore has liveStart = E
// and ring.from = E, and replays [start, E) from Kafka: no gap, no
// duplicate, whatever the partition carried while it was closed. Every
// subscription (and every subscribe in progress) holds its shard; when the
// last hold is released the shard arms an idle timer (ReaderIdle), and a
// hold taken before it fires disarms it (the hysteresis: a reconnecting
// client finds the reader and its ring). When it fires on a shard still
// without holds, the reader is stopped and the ring dropped (memory stays
// bounded by the open partitions). A stopped reader may still be about to
// dispatch a record it fetched: each opening counts a generation, and
// dispatch drops records of any generation but the shard's current one.
//
// Partitions added. grow swaps in the longer partition list (new shards
// closed) under the hub's lock, then looks at every old shard for
// subscriptions whose key's home moved; register checks, under the shard
// lock, that no count change moved its subscription since it was placed.
// Either grow finds a subscription or register refuses it, so none stays
// on a partition its key's new events never reach unnoticed. A resume
// from a former home's cursor reads [cursor+1, the former home's end at
// the subscribe) of it, then the home from its first retained offset
// (since all): the former home's events of the key all precede its
// events in the new home, which holds none from before the change.

// errCursorAhead refuses a cursor this gateway has not dispatched yet.
var errCursorAhead = errors.New("since: cursor is ahead of the stream")

// errMoved refuses a subscription placed in a partition that is no longer
// its key's home: partitions were added meanwhile.
var errMoved = errors.New("the stream topic's partitions changed")

// sink takes a subscription's frames: a client. Both methods are called with
// a shard lock held and never block.
type sink interface {
	// deliver queues frame, which the live dispatch queued at at (zero:
	// not a dispatched record). When the queue is full it sheds the client
	// (4008) and returns false.
	deliver(frame []byte, at time.Time) bool
	// overflow sheds the client because a replay buffer overflowed.
	overflow()
	// moved ends sub, registered in a partition that is no longer its
	// key's home (hub.grow), telling the client to subscribe again. It is
	// called without a shard lock and may wait for sub's replay to stop.
	moved(sub *subscription)
}

// subscription is one connection's interest in one identity key.
type subscription struct {
	sink         sink
	key          string // identity key, tenant/user/conversation
	conversation string
	partition    int
	placedBy     int // the partition count partition was computed under (hub.place); 0: not placed by the hub
	since        since

	// Set by the subscribing client before the subscription is shared and
	// read-only afterwards. Nil for a subscription without since.
	cancel  func()        // stops the replay
	stopped chan struct{} // closed when the replay can no longer queue frames

	// A resume from a cursor of the key's former home (partitions were
	// added since): the replay first reads that partition's records of the
	// key in [prior.from, prior.end), then the home's from its first
	// retained offset (since is sinceAll). Nil otherwise. Set before the
	// subscription is shared.
	prior *priorRange

	// Written by register under the shard lock before the subscription can
	// be dispatched to or replayed, then read only by the replay.
	liveStart int64    // the first offset the dispatcher delivers to it
	ringFrom  int64    // the ring holds every record of [ringFrom, liveStart)
	ring      ringView // those records; the replay drops it once read

	// Guarded by the mutex of the subscription's shard (held is set by the
	// subscribing client before the subscription is shared).
	held         bool     // holds its shard open (acquire); remove releases it
	indexed      bool     // in the shard's index
	removed      bool     // ended: never (again) in the index
	live         bool     // frames go straight to the sink
	overflowed   bool     // pending overflowed and the client was shed
	pending      [][]byte // live frames held back while replaying
	pendingBytes int
}

// priorRange is the part of a moved key's stream left in its former home.
type priorRange struct {
	partition int
	from, end int64 // offsets [from, end)
}

// liveReaders open partitions' live readers for a hub (the gateway's, in
// live.go).
type liveReaders interface {
	// endOffset returns the partition's end offset: where a live reader
	// opened now starts.
	endOffset(ctx context.Context, partition int) (int64, error)
	// startLive starts a live reader of partition at offset, which
	// dispatches as generation gen until stop is called. It is called with
	// the shard's lock held and must not block.
	startLive(partition int, offset int64, gen uint64) (stop func(), err error)
}

// stopper is a timer that can be stopped (time.AfterFunc's).
type stopper interface{ Stop() bool }

// hub routes the records of the stream topic to subscriptions. Its methods
// are safe for concurrent use; dispatch must be called by one goroutine per
// partition and generation, in offset order.
type hub struct {
	mu sync.RWMutex
	// Guarded by mu; grow replaces them (never changing a shard), so a
	// shard taken from the map stays that partition's shard. A shard's lock
	// is never taken while mu is held.
	partitions []int          // sorted partition ids, as the producers' balancer sees them
	shards     map[int]*shard // one per partition; replaced, never written, by grow
	ringBytes  int            // per partition: ringTotal split between the partitions
	shut       bool           // shutdown began: grow adds nothing

	ringTotal         int
	replayBuffer      int
	replayBufferBytes int
	readers           liveReaders
	readerIdle        time.Duration
	afterFunc         func(time.Duration, func()) stopper // time.AfterFunc; tests fire it by hand
	metrics           *metrics
	log               *slog.Logger
}

// shardState is the life of a shard's live reader.
type shardState int

const (
	shardClosed  shardState = iota // no reader; next and ring mean nothing
	shardOpening                   // an acquire is listing the end offset
	shardOpen                      // a reader dispatches as generation gen
	shardShut                      // the hub is shut down: never opens again
)

// shard holds one partition's subscriptions and recent records.
type shard struct {
	mu sync.Mutex
	// Guarded by mu.
	state    shardState
	opening  chan struct{}              // while shardOpening: closed when the opening ends, either way
	gen      uint64                     // the generation of the current (or last) live reader
	stop     func()                     // stops the live reader of gen while shardOpen
	holds    int                        // subscriptions and subscribes in progress
	idle     stopper                    // the idle close, armed while shardOpen without holds
	next     int64                      // the next offset the live dispatcher delivers
	subs     map[string][]*subscription // by identity key
	ring     ring
	advanced chan struct{} // closed when next advances; nil while no one waits
}

// hubConfig sizes a hub.
type hubConfig struct {
	replayBuffer      int           // frames held back per replaying subscription
	replayBufferBytes int           // bytes of those
	ringBytes         int           // ring bytes, split between the partitions
	readers           liveReaders   // opens the live readers
	readerIdle        time.Duration // how long a shard without holds stays open
}

// newHub returns a hub of partitions, every shard closed until acquired.
func newHub(partitions []int, cfg hubConfig, m *metrics, log *slog.Logger) *hub {
	h := &hub{
		partitions:        slices.Sorted(slices.Values(partitions)),
		shards:            make(map[int]*shard, len(partitions)),
		ringTotal:         cfg.ringBytes,
		replayBuffer:      cfg.replayBuffer,
		replayBufferBytes: cfg.replayBufferBytes,
		readers:           cfg.readers,
		readerIdle:        cfg.readerIdle,
		afterFunc:         func(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) },
		metrics:           m,
		log:               log,
	}
	if len(partitions) > 0 {
		h.ringBytes = cfg.ringBytes / len(partitions)
	}
	for _, p := range partitions {
		h.shards[p] = &shard{subs: make(map[string][]*subscription)}
	}
	return h
}

// acquire holds partition's shard open for a subscription, opening it (its
// live reader at the partition's end offset) if it is closed. Every
// successful acquire is paired with one release. It fails when the end
// offset cannot be listed or the reader started, and with errStopped when
// ctx ends first or the hub is shut down.
func (h *hub) acquire(ctx context.Context, partition int) error {
	s := h.shard(partition)
	for {
		s.mu.Lock()
		switch s.state {
		case shardOpen:
			s.holds++
			if s.idle != nil {
				s.idle.Stop() // if it fires anyway, it finds a hold and leaves
				s.idle = nil
			}
			s.mu.Unlock()
			return nil
		case shardShut:
			s.mu.Unlock()
			return errStopped
		case shardOpening:
			wait := s.opening
			s.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return errStopped
			}
		default:
			s.state, s.opening = shardOpening, make(chan struct{})
			s.mu.Unlock()
			return h.open(ctx, partition, s)
		}
	}
}

// open opens s (shardOpening) and takes the first hold.
func (h *hub) open(ctx context.Context, partition int, s *shard) error {
	start, err := h.readers.endOffset(ctx, partition)
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.opening)
	s.opening = nil
	if s.state == shardShut {
		return errStopped
	}
	if err == nil {
		s.gen++
		s.stop, err = h.readers.startLive(partition, start, s.gen)
	}
	if err != nil {
		s.state = shardClosed
		return fmt.Errorf("open partition %d: %w", partition, err)
	}
	h.mu.RLock()
	ringBytes := h.ringBytes
	h.mu.RUnlock()
	s.state, s.next, s.ring, s.holds = shardOpen, start, newRing(ringBytes, start), 1
	h.metrics.liveReaders.Inc()
	h.log.Debug("live reader opened", "partition", partition, "offset", start)
	return nil
}

// release drops a hold of acquire. The last one arms the idle close.
func (h *hub) release(partition int) {
	s := h.shard(partition)
	s.mu.Lock()
	defer s.mu.Unlock()
	h.releaseLocked(partition, s)
}

// releaseLocked is release with s.mu held.
func (h *hub) releaseLocked(partition int, s *shard) {
	s.holds--
	if s.holds > 0 || s.state != shardOpen {
		return
	}
	gen := s.gen
	s.idle = h.afterFunc(h.readerIdle, func() { h.closeIdle(partition, gen) })
}

// closeIdle closes partition's shard if it is still open as generation gen
// with no hold: the reader stops and the ring is dropped.
func (h *hub) closeIdle(partition int, gen uint64) {
	s := h.shard(partition)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != shardOpen || s.gen != gen || s.holds > 0 {
		return
	}
	s.closeLocked(shardClosed)
	h.metrics.liveReaders.Dec()
	h.log.Debug("live reader closed: no subscriber", "partition", partition, "next", s.next)
}

// closeLocked stops the live reader and drops the ring; s.mu is held.
func (s *shard) closeLocked(state shardState) {
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	s.state = state
	s.ring = ring{}
}

// shutdown stops every live reader and idle timer; no shard opens again,
// and grow adds none.
func (h *hub) shutdown() {
	h.mu.Lock()
	h.shut = true
	shards := h.shards
	h.mu.Unlock()
	for _, s := range shards {
		s.mu.Lock()
		if s.state == shardOpen {
			h.metrics.liveReaders.Dec()
		}
		s.closeLocked(shardShut)
		s.mu.Unlock()
	}
}

// shard returns partition's shard (nil: not a partition of the topic).
func (h *hub) shard(partition int) *shard {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.shards[partition]
}

// partitionOf returns the partition the producers' Murmur2 balancer writes
// key to, under the partition count the hub knows now.
func (h *hub) partitionOf(key string) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return homeOf(key, h.partitions)
}

// place returns key's partition and the partition count it was computed
// under, for subscription.placedBy.
func (h *hub) place(key string) (partition, count int) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return homeOf(key, h.partitions), len(h.partitions)
}

// movedSince reports whether partitions were added since sub was placed
// (grow) and its key's home is now another partition: its new events go
// there.
func (h *hub) movedSince(sub *subscription) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return sub.placedBy != 0 && sub.placedBy != len(h.partitions) && homeOf(sub.key, h.partitions) != sub.partition
}

func homeOf(key string, partitions []int) int {
	return kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: []byte(key)}, partitions...)
}

// formerHome reports whether partition was key's home under a smaller
// partition count than the hub's now: the balancer over partitions
// 0..m-1 for some m below the count (Kafka numbers a topic's partitions
// densely from 0 and only adds them).
func (h *hub) formerHome(key string, partition int) bool {
	h.mu.RLock()
	parts := h.partitions
	h.mu.RUnlock()
	if partition < 0 || partition >= len(parts) || parts[partition] != partition {
		return false
	}
	for m := partition + 1; m < len(parts); m++ {
		if homeOf(key, parts[:m]) == partition {
			return true
		}
	}
	return false
}

// grow takes the stream topic's partition list read now. If it holds
// partitions the hub does not have (partitions were added: Kafka never
// removes any), grow adds their shards, closed, so that partitionOf places
// keys by the new count from then on, and returns the subscriptions
// registered in a partition that is no longer their key's home: their new
// events go to the new home, so they must subscribe again there. A
// subscription registering concurrently either sees the new count
// (register refuses it if its partition moved) or is registered before
// grow looks at its shard (and is returned). added is how many partitions
// were added.
func (h *hub) grow(partitions []int) (added int, moved []*subscription) {
	h.mu.Lock()
	if h.shut {
		h.mu.Unlock()
		return 0, nil
	}
	var shards map[int]*shard
	for _, p := range partitions {
		if h.shards[p] != nil {
			continue
		}
		if shards == nil {
			shards = maps.Clone(h.shards)
		}
		shards[p] = &shard{subs: make(map[string][]*subscription)}
		added++
	}
	if added == 0 {
		h.mu.Unlock()
		return 0, nil
	}
	old := h.shards
	h.shards = shards
	h.partitions = slices.Sorted(maps.Keys(shards))
	h.ringBytes = h.ringTotal / len(h.partitions)
	parts := h.partitions
	h.mu.Unlock()

	for p, s := range old {
		s.mu.Lock()
		for key, subs := range s.subs {
			if homeOf(key, parts) != p {
				moved = append(moved, subs...)
			}
		}
		s.mu.Unlock()
	}
	return added, moved
}

// dispatched reports whether partition's dispatcher has delivered offset.
func (h *hub) dispatched(partition int, offset int64) bool {
	s := h.shard(partition)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == shardOpen && offset < s.next
}

// awaitDispatched waits until partition's dispatcher has delivered offset,
// for at most wait. It returns errCursorAhead when wait runs out and
// errStopped when ctx ends or stop is closed.
func (h *hub) awaitDispatched(ctx context.Context, stop <-chan struct{}, partition int, offset int64, wait time.Duration) error {
	s := h.shard(partition)
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
	s := h.shard(sub.partition)
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub.removed || s.state != shardOpen {
		return errStopped
	}
	if h.movedSince(sub) {
		sub.removed = true
		return errMoved
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
// later register fails; sub's hold on its shard (acquire) is released.
// Removing twice, or before registering, is harmless.
func (h *hub) remove(sub *subscription) {
	s := h.shard(sub.partition)
	s.mu.Lock()
	defer s.mu.Unlock()
	sub.removed = true
	sub.pending, sub.pendingBytes = nil, 0
	if sub.held {
		sub.held = false
		h.releaseLocked(sub.partition, s)
	}
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
	s := h.shard(sub.partition)
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

// dispatch routes the record at offset of partition, read by the live
// reader of generation gen, to the subscriptions of its key and keeps it in
// the partition's ring. The frame is built once and shared by every
// recipient and the ring; nothing here blocks on a client. recorded is the
// record's Kafka timestamp, for the delivery lag metric. A record of a
// reader that was stopped (another generation, or the shard closed) is
// dropped.
func (h *hub) dispatch(partition int, gen uint64, offset int64, key, value []byte, recorded time.Time) {
	s := h.shard(partition)
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
	if s.state != shardOpen || s.gen != gen {
		return // a stopped reader's: the shard's next means another reader
	}
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
