// Command devstack runs the whole Turnpike pipeline in one process, with
// an embedded Kafka-protocol broker and an embedded MongoDB-compatible
// store:
//
//	go run ./cmd/devstack
//
// Settings are flags or TURNPIKE_* environment variables (-h lists them).
// It is pkg/devstack's Main; a Go program runs the devstack with its own
// eino agent through pkg/devstack.
package main

import "github.com/turnpike-dev/turnpike/pkg/devstack"

func main() { devstack.Main() }
