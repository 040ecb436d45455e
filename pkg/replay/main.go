package replay

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// Main is the body of a replay binary: cmd/replay is Main(). With
// worker.WithAgent or worker.WithAgentFactory among opts (and their hooks,
// worker.WithPersist…), a shadow replay runs that agent; without them it
// runs the agent of the settings, as cmd/worker does: the agent
// configuration file (-agent-config), else one agent on -model. Redrive
// mode runs no agent. Main exits 0 when done, 1 when the replay failed, 2
// for bad flags, settings or options, 130 when interrupted (continue with
// -resume).
func Main(opts ...worker.Option) {
	os.Exit(MainArgs(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr, opts...))
}

// MainArgs is Main with the arguments, the environment and the outputs
// given; it returns the exit code.
func MainArgs(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer, opts ...worker.Option) int {
	if err := checkOptions(opts); err != nil {
		_, _ = io.WriteString(stderr, err.Error()+"\n")
		return 2
	}
	var cfg config
	if code, ok := flagenv.ParseCommand("replay", args, lookupEnv, stderr, cfg.Bind); !ok {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	deps, closeDeps, err := connect(ctx, cfg, stderr, opts)
	if closeDeps != nil {
		defer closeDeps()
	}
	if err != nil {
		fmt.Fprintln(stderr, "replay:", err)
		return 2
	}
	sum, err := runReplay(ctx, cfg, deps)
	if sum != nil {
		if werr := sum.WriteText(stdout); werr != nil {
			fmt.Fprintln(stderr, "replay:", werr)
		}
	}
	switch {
	case errors.Is(err, errInterrupted):
		fmt.Fprintln(stderr, "replay:", err)
		return 130
	case err != nil:
		fmt.Fprintln(stderr, "replay:", err)
		return 1
	}
	return 0
}

// checkOptions reports the conflicts of opts (WithAgent beside
// WithAgentFactory, hooks without either), as the worker's command line
// does (worker.Config.RegisterFlags).
func checkOptions(opts []worker.Option) error {
	c := worker.DefaultConfig()
	return c.RegisterFlags(flag.NewFlagSet("replay", flag.ContinueOnError), func(string) (string, bool) { return "", false }, opts...)
}

// hasGoAgent reports whether opts bring an agent written in Go: the flags
// of a worker with such an agent have no -model
// (worker.Config.RegisterFlags).
func hasGoAgent(opts []worker.Option) bool {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	c := worker.DefaultConfig()
	_ = c.RegisterFlags(fs, func(string) (string, bool) { return "", false }, opts...)
	return fs.Lookup("model") == nil
}
