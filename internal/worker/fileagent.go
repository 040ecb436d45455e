package worker

import (
	"context"
	"time"

	"github.com/cloudwego/eino/adk"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
)

// FileAgent is the agent of an agent configuration file (or the supervisor
// and its sub-agents), built as the worker builds it, for runs outside the
// worker: shadow replays. It is safe for concurrent use: an agent with
// tools gets a fresh runner for every run, as in the worker.
type FileAgent struct {
	a *agents
}

// NewFileAgent builds spec's agent with the models of d (Model for
// "default", Models for the others), checkpointing interrupted runs in
// d.Store. Tools use d.Now (default time.Now).
func NewFileAgent(ctx context.Context, spec *AgentConfig, d Deps) (*FileAgent, error) {
	if d.Now == nil {
		d.Now = time.Now
	}
	a, err := buildAgents(ctx, Config{}, spec, d)
	if err != nil {
		return nil, err
	}
	return &FileAgent{a: a}, nil
}

// Run runs one request: the window, the new user message last. The
// request, if ctx carries it (WithRunInfo), is the one the runner is
// built for.
func (f *FileAgent) Run(ctx context.Context, messages []adk.Message, opts ...adk.AgentRunOption) *adk.AsyncIterator[*adk.AgentEvent] {
	info, _ := RunInfoFrom(ctx)
	r, err := f.a.runner(ctx, info)
	if err != nil {
		iter, gen := adk.NewAsyncIteratorPair[*adk.AgentEvent]()
		gen.Send(&adk.AgentEvent{Err: err})
		gen.Close()
		return iter
	}
	return r.Run(ctx, messages, opts...)
}

// Persist selects the messages whose text makes the answer (the file's
// "persist"); nil means the bridge's default.
func (f *FileAgent) Persist() bridge.Predicate { return f.a.persist }
