// Command pushgw pushes stream events to WebSocket clients subscribed to
// their conversations, and to Server-Sent Events clients following one,
// with resume from a cursor. cmd/pushgw is pkg/pushgw's Main.
//
// Settings are flags or TURNPIKE_* environment variables (-h lists them).
package main

import "github.com/turnpike-dev/turnpike/pkg/pushgw"

func main() { pushgw.Main() }
