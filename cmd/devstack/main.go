// Command devstack runs the whole Turnpike pipeline in one process, with an
// embedded Kafka-protocol broker and an embedded MongoDB-compatible store:
//
//	go run ./cmd/devstack
//
// Settings are flags or TURNPIKE_* environment variables (-h lists them).
// A Go program runs the devstack with its own eino agent through
// pkg/devstack.
package main

import (
	"os"

	"github.com/turnpike-dev/turnpike/internal/devstack"
)

func main() { os.Exit(run()) }

func run() int { return devstack.Main(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr) }
