// Command pushgw pushes stream events to WebSocket clients subscribed to
// their conversations, and to Server-Sent Events clients following one,
// with resume from a cursor.
//
// Settings are flags or TURNPIKE_* environment variables (-h lists them).
package main

import (
	"context"
	"os"

	"github.com/turnpike-dev/turnpike/internal/service"
)

func main() {
	var cfg service.PushgwConfig
	os.Exit(service.Main("pushgw", os.Args[1:], os.LookupEnv, os.Stderr, &cfg, func(ctx context.Context, env service.Env) error {
		return service.RunPushgw(ctx, cfg, env, nil)
	}))
}
