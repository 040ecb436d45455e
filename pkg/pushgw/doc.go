// Package pushgw is the push gateway of docs/api.md: clients subscribe to their
// conversations on the WebSocket GET /v1/stream, or follow one as
// Server-Sent Events on GET /v1/conversations/{c}/events, and receive the
// stream topic's events, live or resumed from a cursor, without gap or
// duplicate. Both transports share one subscription core (session.go).
//
// Pieces, one file each:
//   - gateway.go: Gateway, New, Run, ServeHTTP (admission, then the
//     upgrade), Ready.
//   - hub.go: the per-partition index of subscriptions, the fan-out, the
//     replay-to-live hand-over and the opening and idle close of each
//     partition's live reader (its comment is the correctness argument).
//   - ring.go: each partition's in-memory ring of recent records, bounded
//     by bytes, that serves recent resumes without Kafka.
//   - live.go: one kafka.Reader per open partition feeding the hub, and
//     the stream topic's partition list.
//   - replay.go: a subscription's catch-up, from the ring or from Kafka
//     with a reader of its own.
//   - session.go: what every connection has whatever its transport: the
//     admission rules (origin, token, connect rate), the outbound queue,
//     the subscriptions and their replays; the hub's sink.
//   - client.go: one WebSocket connection: reader and writer goroutines.
//   - sse.go: ServeEvents and one event stream: a session with one
//     subscription whose frames are written as Server-Sent Events.
//   - outbox.go: a connection's outbound queue, bounded in frames and bytes.
//   - wire.go: the socket under a connection, which coalesces a backlog of
//     frames into one write.
//   - origin.go, ratelimit.go: the origin policy (originAllowed, shared by
//     every transport) and per-user token buckets.
//   - frames.go: client and server frames; cursor.go: the cursor format.
//
// A replica reads the partitions of the stream topic its clients subscribe
// to (no consumer group; a partition's reader opens at its first subscriber
// and closes ReaderIdle after its last) and serves its own clients; a
// cursor is a partition offset, so it resumes on any replica. It reads the
// topic's partition count again every PartitionWatch: once partitions were
// added it places conversations by the new count and ends the moved
// subscriptions (unavailable), whose clients resume from their cursors
// across the former and the new home (live.go watchPartitions). Event streams
// are redirected to carry their conversation's shard hint (sse.go), which
// an edge may route by; it is never trusted.
//
// Goroutines: Run owns the live readers (started by the hub when a
// partition opens, stopped when it closes or Run ends) and the partition
// watch, and waits for every client; each
// client owns its reader goroutine and its replays; the writer goroutine of
// a client tears it down. An event stream's writer is ServeEvents's
// goroutine (HTTP/2) or, once it has taken its HTTP/1 connection over, a
// goroutine of its own with a reader that only waits for the peer's close;
// either way Run waits for it, and it waits for its replay and reader.
// Nothing on the fan-out path waits on a client: a client whose queue is
// full is closed with 4008. The writer also ends its
// connection when the token it connected with expires: a WebSocket with
// 4401, an event stream with an error event of code unauthenticated.
// Tokens expire on the system clock, or on the Clock given by WithClock
// (a test's, stepped past a token's exp).
//
// Locks, in order: a shard's mutex (hub.go) may be held while a client's
// outbox mutex is taken (outbox.mu is a leaf), while its close state is
// set (client.fail) and while Gateway.mu is taken (a partition's reader
// starts under its shard lock); client.mu is never held while taking a
// shard lock. An idle close runs on a timer's goroutine and only takes a
// shard lock. The hub's own lock (the partition list) is taken under a
// shard lock (register) but never held while one is taken (grow and
// shutdown copy what they need first).
// Gateway.mu, a limiter's mutex and a wire's mutex are leaves.
//
// Gateway's methods are safe for concurrent use; Run is called once.
// FormatCursor and ParseCursor are pure functions.
package pushgw
