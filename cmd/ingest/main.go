// Command ingest serves Turnpike's HTTP API: it takes user messages and writes
// them durably to the requests topic, and serves conversation history.
// cmd/ingest is pkg/ingest's Main.
//
// Settings are flags or TURNPIKE_* environment variables (-h lists them).
package main

import "github.com/turnpike-dev/turnpike/pkg/ingest"

func main() { ingest.Main() }
