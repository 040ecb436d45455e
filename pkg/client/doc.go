// Package client is the Go client of Turnpike's public API: Send and
// History over the ingest HTTP API, and a WebSocket Conn to the push
// gateway that subscribes to conversations and reads their stream events.
// Events opens the same stream of one conversation over Server-Sent Events
// (an EventStream), and a Subscription can use either transport.
//
// Whatever it reads from the servers (frames, events, answers, history
// pages), the client ignores the members it does not know, as docs/api.md
// asks of clients: later versions add members without a version bump.
// Conn.Next checks the members of an event that it knows as
// events.DecodeEvent does. Readers that must keep up with very many frames
// a second read them with Conn.NextRaw into a reused buffer and decode them
// with a FrameView, which only picks out the fields and validates nothing.
//
// A Client is safe for concurrent use. A Conn's Next and NextRaw must be
// called from one goroutine; its other methods are safe for concurrent use.
// So must an EventStream's Next; its Close may be called from any.
// A FrameView is not safe for concurrent use.
package client
