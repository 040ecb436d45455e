package pushgw

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// replayMaxWait is the fetch wait of a replay reader. A replay only reads
// offsets below the high watermark, so it rarely waits at all.
const replayMaxWait = 250 * time.Millisecond

// errCursorExpired: the cursor's successor is no longer retained.
var errCursorExpired = errors.New("cursor expired")

// errStopped: the subscription or its client ended.
var errStopped = errors.New("subscription stopped")

// replay brings sub from its since position to live (see the hand-over
// comment in hub.go). It finds the first offset to replay, serves
// [start, liveStart) from the ring view when the view covers start and from
// Kafka otherwise (there a cursor whose successor is no longer retained has
// expired), queues the subscribed frame first, then hands over the live
// frames buffered meanwhile and switches sub to live.
func (g *gateway) replay(ctx context.Context, c *session, sub *subscription) error {
	var start int64
	switch sub.since.kind {
	case sinceAfter:
		start = sub.since.offset + 1
	case sinceAll:
		first, err := g.firstOffset(ctx, sub.partition)
		if err != nil {
			return err
		}
		start = first
	}
	fromRing := start >= sub.ringFrom
	var frames [][]byte
	if fromRing && start < sub.liveStart {
		frames = sub.ring.collect(sub.key, start)
	}
	sub.ring = nil // the view may pin evicted chunks: drop it at once
	if !fromRing && sub.since.kind == sinceAfter {
		first, err := g.firstOffset(ctx, sub.partition)
		if err != nil {
			return err
		}
		if start < first {
			return errCursorExpired
		}
	}
	if sub.prior != nil {
		first, err := g.firstOffset(ctx, sub.prior.partition)
		if err != nil {
			return err
		}
		if sub.prior.from < first {
			return errCursorExpired
		}
	}
	if !c.send(ctx, subscribedFrame(sub.conversation, sub.partition)) {
		return errStopped
	}
	if p := sub.prior; p != nil && p.from < p.end {
		if err := g.readRange(ctx, c, sub.key, p.partition, p.from, p.end, true); err != nil {
			return err
		}
	}
	switch {
	case start >= sub.liveStart:
	case fromRing:
		g.metrics.ringReplays.Inc()
		for i, f := range frames {
			frames[i] = nil
			if !c.send(ctx, f) {
				return errStopped
			}
		}
		g.metrics.eventsOut.Add(float64(len(frames)))
	default:
		if err := g.readRange(ctx, c, sub.key, sub.partition, start, sub.liveStart, sub.since.kind == sinceAfter); err != nil {
			return err
		}
	}
	var spare [][]byte
	for {
		frames, live, ok := c.hub.takePending(sub, spare)
		if !ok {
			return errStopped
		}
		for _, f := range frames {
			if !c.send(ctx, f) {
				return errStopped
			}
		}
		g.metrics.eventsOut.Add(float64(len(frames)))
		if live {
			return nil
		}
		clear(frames)
		spare = frames
	}
}

// readRange queues the frames of key at offsets [start, end) of
// partition, read with a reader of its own. With resume (the range starts
// right after a cursor) offsets the reader skips because retention deleted
// them are an expired cursor, not a gap.
func (g *gateway) readRange(ctx context.Context, c *session, key string, partition int, start, end int64, resume bool) error {
	select {
	case g.replaySlots <- struct{}{}:
	case <-ctx.Done():
		return errStopped
	}
	defer func() { <-g.replaySlots }()
	g.metrics.replays.Inc()

	r, err := g.newReader(partition, replayMaxWait)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.SetOffset(start); err != nil {
		return fmt.Errorf("replay seek: %w", err)
	}
	for next := start; next < end; {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return errStopped
			}
			return fmt.Errorf("replay fetch: %w", err)
		}
		if m.Offset != next && resume {
			// The reader skipped offsets. If retention deleted them from
			// under the cursor, resuming here would leave a gap.
			first, err := g.firstOffset(ctx, partition)
			if err != nil {
				return err
			}
			if first > next {
				return errCursorExpired
			}
		}
		if m.Offset >= end {
			return nil
		}
		next = m.Offset + 1
		if string(m.Key) != key || !validValue(m.Value) {
			continue
		}
		if !c.send(ctx, eventFrame(m.Value, partition, m.Offset)) {
			return errStopped
		}
		g.metrics.eventsOut.Inc()
	}
	return nil
}
