package devstack

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/worker"
)

// Main is the body of a devstack binary (cmd/devstack, pkg/devstack's
// Main): it reads the configuration from args and lookup (the
// environment), runs the devstack until SIGINT or SIGTERM, with custom as
// the worker's agent when it is not nil, prints where it serves on stdout,
// logs on stderr, and returns the exit code: 0 after a clean stop, 1 when
// it fails, 2 for bad flags.
func Main(args []string, lookup func(string) (string, bool), stdout, stderr io.Writer, custom *worker.Custom) int {
	var cfg Config
	if code, ok := flagenv.ParseCommand("devstack", args, lookup, stderr, cfg.Bind); !ok {
		return code
	}
	cfg.Worker.Custom = custom
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
