// Package client is the Go client of Turnpike's public API: Send and
// History over the ingest HTTP API, and a WebSocket Conn to the push
// gateway that subscribes to conversations and reads their stream events.
//
// A Client is safe for concurrent use. A Conn's Next must be called from
// one goroutine; its other methods are safe for concurrent use.
package client
