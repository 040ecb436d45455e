// Command replay replays records of the requests topic or its DLQ:
//
//	replay -mode redrive -topic dlq            # re-publish dead letters to the requests topic
//	replay -mode shadow -since 2h -model echo  # run past traffic offline, results in a JSONL report
//
// Selection by partition, offset and time range, filters by tenant, user
// and conversation, -dry-run, a checkpoint for -resume. See the README's
// "Replaying topics" section; flags: replay -h.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/replay"
)

func main() { os.Exit(run()) }

func run() int {
	var cfg replay.Config
	set := flagenv.New(flag.NewFlagSet("replay", flag.ContinueOnError), os.LookupEnv)
	cfg.Bind(set)
	if err := set.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "replay:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	deps, closeDeps, err := replay.Connect(ctx, cfg, os.Stderr)
	if closeDeps != nil {
		defer closeDeps()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "replay:", err)
		return 2
	}
	sum, err := replay.Run(ctx, cfg, deps)
	if sum != nil {
		if werr := sum.WriteText(os.Stdout); werr != nil {
			fmt.Fprintln(os.Stderr, "replay:", werr)
		}
	}
	switch {
	case errors.Is(err, replay.ErrInterrupted):
		fmt.Fprintln(os.Stderr, "replay:", err)
		return 130
	case err != nil:
		fmt.Fprintln(os.Stderr, "replay:", err)
		return 1
	}
	return 0
}
