// Package replay runs a shadow replay with an agent written in Go: the
// past requests of the requests topic (selected by time, partition,
// offset, tenant, user or conversation) through the agent of pkg/worker's
// options, offline, each conversation's history rebuilt as it goes, with
// one JSONL line per request (its answer, status, tokens and latency)
// in a report. Compare a new agent with what production answered before
// shipping it. Nothing is written to the stream topic or the live store.
//
//	func main() { replay.Main(worker.WithAgentFactory(newAgent)) }
//	// go run . -mode shadow -since 2h -kafka-brokers kafka:9092 -report new.jsonl
//
// The settings are cmd/replay's (-h lists them); the agent and its hooks
// (worker.WithPersist…) come from the options, and each request runs
// through the worker's own run step (worker.Step: the window, compaction,
// the agent, what is persisted), so the report's answers are what the
// worker would persist.
package replay

import (
	"errors"
	"flag"
	"io"
	"os"

	ireplay "github.com/turnpike-dev/turnpike/internal/replay"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// Main is the body of a replay binary running the agent of opts in
// shadow mode (redrive mode does not run it, but opts must include
// worker.WithAgent or worker.WithAgentFactory whatever the mode). It exits
// 0 when done, 1 when the replay failed, 2 for bad flags, settings or
// options, 130 when interrupted (continue with -resume).
func Main(opts ...worker.Option) {
	os.Exit(MainArgs(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr, opts...))
}

// MainArgs is Main with the arguments, the environment and the outputs
// given; it returns the exit code.
func MainArgs(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer, opts ...worker.Option) int {
	goAgent, err := hasGoAgent(opts)
	if err == nil && !goAgent {
		err = errors.New("replay: no agent: use worker.WithAgent or worker.WithAgentFactory")
	}
	if err != nil {
		_, _ = io.WriteString(stderr, err.Error()+"\n")
		return 2
	}
	return ireplay.Main(args, lookupEnv, stdout, stderr, func(cfg ireplay.Config, d *ireplay.Deps) error {
		// The worker's own run step, with the replay's window, run timeout
		// and content limit: the report's answers are what the worker
		// would persist.
		st, err := worker.NewStep(cfg.WorkerConfig(), append(opts, worker.WithLogger(d.Logger))...)
		if err != nil {
			return err
		}
		d.Step = st
		return nil
	})
}

// hasGoAgent reports whether opts bring an agent written in Go, and their
// conflicts: the flags of a worker with such an agent have no -model
// (worker.Config.RegisterFlags).
func hasGoAgent(opts []worker.Option) (bool, error) {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	c := worker.DefaultConfig()
	if err := c.RegisterFlags(fs, func(string) (string, bool) { return "", false }, opts...); err != nil {
		return false, err
	}
	return fs.Lookup("model") == nil, nil
}
