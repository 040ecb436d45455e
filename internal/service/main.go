package service

import (
	"context"
	"io"
	"log/slog"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
)

// Configurable is a service's configuration as a binary reads it.
type Configurable interface {
	Bind(set *flagenv.Set)
	NewLogger(w io.Writer) *slog.Logger
}

// Main is the body of a service binary: it binds cfg's flags (defaults from
// lookup, the environment), parses args, builds the logger and a metrics
// registry with the Go and process collectors, and runs run until SIGINT or
// SIGTERM. It returns the process's exit code: 0 after a clean stop, 1 when
// run fails, 2 for bad flags or settings.
func Main(name string, args []string, lookup func(string) (string, bool), stderr io.Writer, cfg Configurable,
	run func(ctx context.Context, env Env) error) int {
	if code, ok := flagenv.ParseCommand(name, args, lookup, stderr, cfg.Bind); !ok {
		return code
	}
	log := cfg.NewLogger(stderr)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, Env{Logger: log, Registry: reg}); err != nil {
		log.Error(name+" stopped", "error", err)
		return 1
	}
	log.Info(name + " stopped")
	return 0
}
