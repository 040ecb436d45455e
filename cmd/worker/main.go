// Command worker consumes the requests topic in a consumer group, runs the
// agent for each request, streams its tokens to the stream topic and
// persists the turn.
//
// Settings are flags or TURNPIKE_* environment variables (-h lists them).
package main

import (
	"context"
	"os"

	"github.com/turnpike-dev/turnpike/internal/service"
)

func main() {
	var cfg service.WorkerConfig
	os.Exit(service.Main("worker", os.Args[1:], os.LookupEnv, os.Stderr, &cfg, func(ctx context.Context, env service.Env) error {
		return service.RunWorker(ctx, cfg, env, nil)
	}))
}
