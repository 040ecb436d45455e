// Command ingest serves Turnpike's HTTP API: it takes user messages and writes
// them durably to the requests topic, and serves conversation history.
//
// Settings are flags or TURNPIKE_* environment variables (-h lists them).
package main

import (
	"context"
	"os"

	"github.com/turnpike-dev/turnpike/internal/service"
)

func main() {
	var cfg service.IngestConfig
	os.Exit(service.Main("ingest", os.Args[1:], os.LookupEnv, os.Stderr, &cfg, func(ctx context.Context, env service.Env) error {
		return service.RunIngest(ctx, cfg, env, nil)
	}))
}
