// Package pushgw is the WebSocket push gateway of API.md: clients subscribe
// to their conversations on GET /v1/stream and receive the stream topic's
// events, live or resumed from a cursor, without gap or duplicate.
//
// Pieces, one file each:
//   - gateway.go: Gateway, New, Run, ServeHTTP, Ready.
//   - hub.go: the per-partition index of subscriptions, the fan-out, and the
//     replay-to-live hand-over (its comment is the correctness argument).
//   - live.go: one kafka.Reader per partition feeding the hub.
//   - replay.go: a subscription's catch-up read with a reader of its own.
//   - client.go: one connection: reader and writer goroutines, bounded queue.
//   - frames.go: client and server frames; cursor.go: the cursor format.
//
// Goroutines: Run owns the live readers and waits for every client; each
// client owns its reader goroutine and its replays; the writer goroutine of
// a client tears it down. Nothing on the fan-out path waits on a client: a
// client whose queue is full is closed with 4008.
//
// Locks, in order: a shard's mutex (hub.go) may be held while a client's
// close state is set (client.fail); client.mu is never held while taking a
// shard lock. Gateway.mu is a leaf.
//
// Gateway's methods are safe for concurrent use; Run is called once.
// FormatCursor and ParseCursor are pure functions.
package pushgw
