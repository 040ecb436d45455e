package worker

import (
	"context"
	"errors"
	"strings"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Custom is an agent written in Go by the caller (pkg/worker's options)
// instead of one built from the agent configuration, with its hooks. Every
// field but NewAgent is optional.
type Custom struct {
	// NewAgent builds the agent of one run (a first run or a resume) of
	// one request. It is called on the run's goroutine, concurrently for
	// runs of different conversations. An error fails the attempt: it is
	// retried like a transient model error (up to MaxAttempts, then the
	// record is dead-lettered), or dead-lettered at once when it wraps
	// events.ErrInvalid.
	NewAgent func(ctx context.Context, r RunInfo) (adk.Agent, error)
	// Stream and Persist select what the bridge streams and persists.
	// Default: assistant text of any agent.
	Stream, Persist bridge.Predicate
	// Notice maps a model error to the notice streamed to clients.
	// Default: bridge.DefaultNotice.
	Notice func(error) string
	// Transient says whether a model error before any content is worth
	// running the request again, in addition to the errors the worker
	// recognises itself (timeouts, refused connections, HTTP 408/429/5xx).
	Transient func(error) bool
	// ResumeValue turns the user's answer into the value a resumed
	// interrupt receives (tool.GetResumeContext[T] asserts its type).
	// Default: the answer as a string. An error wrapping events.ErrInvalid
	// rejects the resume (the interrupt stays pending); any other error is
	// retried like a transient model error.
	ResumeValue func(ctx context.Context, r ResumeInfo) (any, error)
	// ModelLabel labels an agent's token usage in metrics. Default "custom".
	ModelLabel func(agent string) string
	// Summarizer writes the summaries of context compaction. Default:
	// Deps.Summarizer, else Deps.Model.
	Summarizer model.BaseChatModel
}

// RunInfo identifies the run an agent is built for.
type RunInfo struct {
	events.Identity
	RequestID string
	// ResumeOf is the interrupted request a resume continues ("" for a
	// first run).
	ResumeOf string
}

// ResumeInfo is one interrupt a resume answers.
type ResumeInfo struct {
	RunInfo
	// Target is the interrupt's id (a key of adk.ResumeParams.Targets).
	Target string
	// Agent and Tool raised the interrupt; Question is what it asked.
	Agent, Tool, Question string
	// Answer is the user's answer.
	Answer string
}

type runInfoKey struct{}

// WithRunInfo returns ctx carrying r (RunInfoFrom reads it).
func WithRunInfo(ctx context.Context, r RunInfo) context.Context {
	return context.WithValue(ctx, runInfoKey{}, r)
}

// RunInfoFrom returns the run ctx belongs to: every context the worker
// hands an agent (and so its tools) carries it.
func RunInfoFrom(ctx context.Context) (RunInfo, bool) {
	r, ok := ctx.Value(runInfoKey{}).(RunInfo)
	return r, ok
}

func runInfoOf(req events.Request) RunInfo {
	return RunInfo{Identity: req.Identity(), RequestID: req.RequestID, ResumeOf: req.ResumeOf}
}

// customAgents is agents for a Custom agent.
func customAgents(c *Custom, d Deps) (*agents, error) {
	if c.NewAgent == nil {
		return nil, errors.New("worker: the custom agent has no NewAgent")
	}
	a := &agents{stream: c.Stream, persist: c.Persist, summaryInstruction: DefaultSummaryInstruction, label: c.ModelLabel}
	if a.label == nil {
		a.label = func(string) string { return "custom" }
	}
	a.runner = func(ctx context.Context, r RunInfo) (*adk.Runner, error) {
		ag, err := c.NewAgent(ctx, r)
		if err == nil && ag == nil {
			err = errors.New("NewAgent returned no agent")
		}
		if err != nil {
			// Retried like a model error; classify dead-letters one that
			// wraps events.ErrInvalid at once.
			return nil, retryRecord{err}
		}
		return adk.NewRunner(ctx, adk.RunnerConfig{Agent: ag, EnableStreaming: true, CheckPointStore: checkpoints{d.Store}}), nil
	}
	switch {
	case c.Summarizer != nil:
		a.summarizer, a.summarizerModel = c.Summarizer, "summarizer"
	case d.Summarizer != nil:
		a.summarizer, a.summarizerModel = d.Summarizer, "summarizer"
	case d.Model != nil:
		a.summarizer, a.summarizerModel = d.Model, labelOr(d.ModelName, DefaultModel)
	}
	return a, nil
}

// resumeValue is the value the interrupt r answers is resumed with.
func (w *Worker) resumeValue(ctx context.Context, r ResumeInfo) (any, error) {
	if w.custom == nil || w.custom.ResumeValue == nil {
		return r.Answer, nil
	}
	v, err := w.custom.ResumeValue(ctx, r)
	switch {
	case errors.Is(err, events.ErrInvalid):
		return nil, badAnswer{err}
	case err != nil:
		return nil, retryRecord{err}
	}
	return v, nil
}

// retryRecord marks an error of a custom agent's NewAgent or ResumeValue:
// the record is retried as after a model error before any content. It
// adds nothing to the error's text, so that a dead-letter reason is the
// caller's own error, not a model's.
type retryRecord struct{ error }

func (e retryRecord) Unwrap() error { return e.error }

// badAnswer is a custom agent's ResumeValue refusing the answer: the
// resume completes rejected, with the hook's own error as the notice, and
// the interrupt stays pending.
type badAnswer struct{ error }

func (e badAnswer) Unwrap() error { return e.error }

// notice is the rejected resume's notice: the hook's error, without the
// "invalid: " that marks it refused (pkg/worker's Permanent).
func (e badAnswer) notice() string {
	return "Answer rejected: " + strings.TrimPrefix(e.Error(), events.ErrInvalid.Error()+": ")
}

// retryModelError is the bridge's RetryModelError: the worker's own
// classification, or the custom agent's.
func (w *Worker) retryModelError(err error) bool {
	if transientModelError(err) {
		return true
	}
	return w.custom != nil && w.custom.Transient != nil && err != nil && w.custom.Transient(err)
}

// AskUserTool returns the ask_user tool, for agents written in Go.
func AskUserTool() tool.InvokableTool { return askUser{} }
