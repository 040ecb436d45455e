package pushgw

import "sort"

// ringEntryOverhead is what a ring entry costs beyond its frame and key:
// the entry itself and the slice headers, rounded up.
const ringEntryOverhead = 64

// ringChunks is how many chunks a full ring is cut into: eviction drops a
// whole chunk, so a full ring holds between (ringChunks-1)/ringChunks of
// its bytes and all of them.
const ringChunks = 8

// ringChunkMaxEntries caps the entries of one chunk, so that a chunk's
// slice stays small when frames are tiny.
const ringChunkMaxEntries = 1024

// ring holds the most recent records of one partition, bounded by bytes, so
// that recent resumes need not read Kafka. It is guarded by its shard's
// mutex, except that a view taken under that mutex may be read without it.
//
// Invariant: every valid record (good key, good value) of the partition
// with an offset in [from, next) — next being the shard's — is in the ring,
// in offset order. Records are appended in place and never modified;
// eviction drops whole chunks from the front. So a view (the chunks' slice
// headers at one moment) stays valid and unchanged after the mutex is
// released: appends land beyond its lengths and eviction only forgets
// chunks, which the view keeps alive until it is dropped.
type ring struct {
	max    int // bytes; 0 disables the ring
	target int // bytes per chunk before a new one starts

	chunks []*ringChunk // oldest first; the last one takes appends
	bytes  int
	from   int64
}

type ringChunk struct {
	entries []ringEntry
	bytes   int
}

// ringEntry is one record: its offset, key and frame (shared with every
// recipient, never modified).
type ringEntry struct {
	offset int64
	key    []byte
	frame  []byte
}

// ringView is a read-only snapshot of a ring's entries, oldest first.
type ringView [][]ringEntry

func newRing(maxBytes int, start int64) ring {
	return ring{max: maxBytes, target: max(1, maxBytes/ringChunks), from: start}
}

func entryBytes(key, frame []byte) int { return len(key) + len(frame) + ringEntryOverhead }

// add appends the record at offset, the next one after every record in
// the ring, and evicts the oldest chunks beyond max. A record bigger than
// the whole ring empties it.
func (r *ring) add(offset int64, key, frame []byte) {
	n := entryBytes(key, frame)
	if n > r.max {
		r.reset(offset + 1)
		return
	}
	var tail *ringChunk
	if len(r.chunks) > 0 {
		tail = r.chunks[len(r.chunks)-1]
	}
	// A chunk is never empty (it takes its first record as it starts).
	if tail == nil || tail.bytes+n > r.target || len(tail.entries) >= ringChunkMaxEntries {
		tail = &ringChunk{entries: make([]ringEntry, 0, min(16, ringChunkMaxEntries))}
		r.chunks = append(r.chunks, tail)
	}
	tail.entries = append(tail.entries, ringEntry{offset: offset, key: key, frame: frame})
	tail.bytes += n
	r.bytes += n
	// The loop stops before it reaches the tail: the tail holds no more
	// than max bytes, as either one record of at most max (a bigger one
	// reset the ring above) or records that fit its target (<= max).
	for r.bytes > r.max {
		head := r.chunks[0]
		r.bytes -= head.bytes
		r.from = head.entries[len(head.entries)-1].offset + 1
		r.chunks[0] = nil
		r.chunks = r.chunks[1:]
	}
}

// reset empties the ring; it covers nothing before start.
func (r *ring) reset(start int64) {
	clear(r.chunks)
	r.chunks = r.chunks[:0]
	r.bytes = 0
	r.from = start
}

// view returns a snapshot of the ring's entries, safe to read after the
// shard mutex is released.
func (r *ring) view() ringView {
	if len(r.chunks) == 0 {
		return nil
	}
	v := make(ringView, len(r.chunks))
	for i, c := range r.chunks {
		v[i] = c.entries
	}
	return v
}

// collect returns the frames of key in v at offsets >= start, in order.
func (v ringView) collect(key string, start int64) [][]byte {
	// The first chunk whose last entry is at or after start.
	i := sort.Search(len(v), func(i int) bool { return v[i][len(v[i])-1].offset >= start })
	var frames [][]byte
	for ; i < len(v); i++ {
		entries := v[i]
		j := sort.Search(len(entries), func(j int) bool { return entries[j].offset >= start })
		for _, e := range entries[j:] {
			if string(e.key) == key {
				frames = append(frames, e.frame)
			}
		}
	}
	return frames
}
