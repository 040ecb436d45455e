// Command loadgen drives a running Turnpike stack (the devstack or a
// deployed one) through its public API, measures token latency and
// throughput against the raw Kafka floor, and checks every answer:
//
//	go run ./cmd/loadgen -auth-secret $TURNPIKE_AUTH_SECRET -kafka-brokers 127.0.0.1:9092
//
// It prints a summary, writes the JSON result to -out, and exits 0 only
// when it found no violation and no error. Flags: go run ./cmd/loadgen -h.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/loadgen"
)

func main() { os.Exit(run()) }

func run() int {
	var cfg loadgen.Config
	var cpuProfile string
	set := flagenv.New(flag.NewFlagSet("loadgen", flag.ContinueOnError), os.LookupEnv)
	cfg.Bind(set)
	set.String(&cpuProfile, "cpuprofile", "", "", "write a CPU profile of loadgen itself to this file")
	if err := set.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		return 2
	}
	if st, err := os.Stderr.Stat(); err == nil {
		cfg.Progress, cfg.ProgressTTY = os.Stderr, st.Mode()&os.ModeCharDevice != 0
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadgen: cpu profile:", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	res, err := loadgen.Run(ctx, cfg, log)
	if res == nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		return 2
	}
	code := res.ExitCode()
	if werr := res.WriteSummary(os.Stdout); werr != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", werr)
	}
	if werr := res.WriteJSONFile(cfg.Out); werr != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", werr)
		code = 1
	} else {
		fmt.Fprintln(os.Stderr, "loadgen: result written to", cfg.Out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		code = 1
	}
	return code
}
