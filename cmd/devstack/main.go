// Command devstack runs the whole Turnpike pipeline in one process, with an
// embedded Kafka-protocol broker and an embedded MongoDB-compatible store:
//
//	go run ./cmd/devstack
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

	"github.com/turnpike-dev/turnpike/internal/devstack"
	"github.com/turnpike-dev/turnpike/internal/flagenv"
)

func main() { os.Exit(run()) }

func run() int {
	var cfg devstack.Config
	set := flagenv.New(flag.NewFlagSet("devstack", flag.ContinueOnError), os.LookupEnv)
	cfg.Bind(set)
	if err := set.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "devstack:", err)
		return 2
	}
	log := cfg.NewLogger(os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := devstack.Run(ctx, cfg, devstack.Listeners{}, log, func(st devstack.Stack) {
		fmt.Printf("\nTurnpike devstack\n  ingest  %s\n  stream  %s\n", st.IngestURL(), st.StreamURL())
		fmt.Printf("  %s\n", st.Exposure())
		if st.DevToken != "" {
			fmt.Printf("  dev token (tenant default, user %s, valid 7 days):\n\n    export TURNPIKE_TOKEN=%s\n\n", cfg.DevUser, st.DevToken)
		}
	})
	if err != nil {
		log.Error("devstack stopped", "error", err)
		return 1
	}
	log.Info("devstack stopped")
	return 0
}
