// Command pushgw pushes stream events to WebSocket clients subscribed to
// their conversations, with resume from a cursor.
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
	var cfg service.PushgwConfig
	set := flagenv.New(flag.NewFlagSet("pushgw", flag.ContinueOnError), os.LookupEnv)
	cfg.Bind(set)
	if err := set.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "pushgw:", err)
		return 2
	}
	log := cfg.NewLogger(os.Stderr)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := service.RunPushgw(ctx, cfg, service.Env{Logger: log, Registry: reg}, nil); err != nil {
		log.Error("pushgw stopped", "error", err)
		return 1
	}
	log.Info("pushgw stopped")
	return 0
}
