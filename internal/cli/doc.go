// Package cli is the turnpike command-line client: send a message and watch
// its answer stream, watch a conversation, read its history. It talks to a
// running stack through the public API only (pkg/client).
package cli
