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
// The settings are cmd/replay's (-h lists them); the agent and the
// persist predicate (worker.WithPersist) come from the options, so the
// report's answers are what the worker would persist.
package replay

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/cloudwego/eino/adk"

	"github.com/turnpike-dev/turnpike/internal/publicapi"
	ireplay "github.com/turnpike-dev/turnpike/internal/replay"
	iworker "github.com/turnpike-dev/turnpike/internal/worker"
	"github.com/turnpike-dev/turnpike/pkg/events"
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
	wc, err := publicapi.WorkerConfig(worker.DefaultConfig(), opts)
	if err == nil && wc.Custom == nil {
		err = errors.New("replay: no agent: use worker.WithAgent or worker.WithAgentFactory")
	}
	if err != nil {
		_, _ = io.WriteString(stderr, err.Error()+"\n")
		return 2
	}
	custom := wc.Custom
	return ireplay.Main(args, lookupEnv, stdout, stderr, func(d *ireplay.Deps) {
		d.Persist = custom.Persist
		d.AgentFor = func(ctx context.Context, req events.Request) (ireplay.Agent, error) {
			ri := iworker.RunInfo{Identity: req.Identity(), RequestID: req.RequestID, ResumeOf: req.ResumeOf}
			ag, err := custom.NewAgent(ctx, ri)
			if err == nil && ag == nil {
				err = errors.New("the agent factory returned no agent")
			}
			if err != nil {
				return nil, err
			}
			return runner{adk.NewRunner(ctx, adk.RunnerConfig{Agent: ag, EnableStreaming: true}), ri}, nil
		}
	})
}

// runner runs an agent with its request in the context, as the worker
// does (worker.RequestFromContext).
type runner struct {
	r  *adk.Runner
	ri iworker.RunInfo
}

func (r runner) Run(ctx context.Context, messages []adk.Message, opts ...adk.AgentRunOption) *adk.AsyncIterator[*adk.AgentEvent] {
	return r.r.Run(iworker.WithRunInfo(ctx, r.ri), messages, opts...)
}
