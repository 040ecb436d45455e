// Command worker consumes the requests topic in a consumer group, runs the
// agent for each request, streams its tokens to the stream topic and
// persists the turn.
//
// Settings are flags or TURNPIKE_* environment variables (-h lists them).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/service"
)

func main() { os.Exit(run()) }

func run() int {
	var cfg service.WorkerConfig
	set := flagenv.New(flag.NewFlagSet("worker", flag.ContinueOnError), os.LookupEnv)
	cfg.Bind(set)
	if err := set.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	log := cfg.NewLogger(os.Stderr)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := service.RunWorker(ctx, cfg, service.Env{Logger: log, Registry: reg}, nil); err != nil {
		log.Error("worker stopped", "error", err)
		return 1
	}
	log.Info("worker stopped")
	return 0
}
