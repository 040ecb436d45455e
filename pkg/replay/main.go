package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
)

// Main is the body of a replay binary (cmd/replay, pkg/replay's Main): it
// reads the configuration from args and lookup (the environment),
// connects, lets adjust change the Deps (nil: nothing to change; an error
// is a bad setting or option), runs the
// replay until it is done or SIGINT or SIGTERM, writes the summary on
// stdout and returns the exit code: 0 when done, 1 when it failed, 2 for
// bad flags or settings, 130 when interrupted (continue with -resume).
func Main(args []string, lookup func(string) (string, bool), stdout, stderr io.Writer, adjust func(Config, *Deps) error) int {
	var cfg Config
	if code, ok := flagenv.ParseCommand("replay", args, lookup, stderr, cfg.Bind); !ok {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	deps, closeDeps, err := Connect(ctx, cfg, stderr)
	if closeDeps != nil {
		defer closeDeps()
	}
	if err != nil {
		fmt.Fprintln(stderr, "replay:", err)
		return 2
	}
	if adjust != nil {
		if err := adjust(cfg, &deps); err != nil {
			fmt.Fprintln(stderr, "replay:", err)
			return 2
		}
	}
	sum, err := Run(ctx, cfg, deps)
	if sum != nil {
		if werr := sum.WriteText(stdout); werr != nil {
			fmt.Fprintln(stderr, "replay:", werr)
		}
	}
	switch {
	case errors.Is(err, ErrInterrupted):
		fmt.Fprintln(stderr, "replay:", err)
		return 130
	case err != nil:
		fmt.Fprintln(stderr, "replay:", err)
		return 1
	}
	return 0
}
