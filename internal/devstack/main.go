package devstack

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// Main is the body of a devstack binary (cmd/devstack, pkg/devstack's
// Main): it reads the configuration from args and lookup (the
// environment), runs the devstack until SIGINT or SIGTERM, with the
// worker's agent and hooks of opts (pkg/worker's options; none: the agent
// file's, else one agent on TURNPIKE_MODEL), prints where it serves on
// stdout, logs on stderr, and returns the exit code: 0 after a clean stop,
// 1 when it fails, 2 for bad flags or options.
func Main(args []string, lookup func(string) (string, bool), stdout, stderr io.Writer, opts ...worker.Option) int {
	cfg := Config{WorkerOptions: opts}
	if code, ok := flagenv.ParseCommand("devstack", args, lookup, stderr, cfg.Bind); !ok {
		return code
	}
	log := cfg.NewLogger(stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := Run(ctx, cfg, Listeners{}, log, func(st Stack) {
		fmt.Fprint(stdout, st.Banner(cfg.DevUser))
	})
	if err != nil {
		log.Error("devstack stopped", "error", err)
		return 1
	}
	log.Info("devstack stopped")
	return 0
}
