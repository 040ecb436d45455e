package worker

import (
	"context"
	"errors"
	"strings"

	"github.com/cloudwego/eino/adk"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// goAgents is the agents of an agent written in Go: the options' factory
// (or their shared agent) and hooks. The summarizer of compaction is
// WithSummarizer's, else d.Summarizer's, else d.Model's (Config.Model).
func goAgents(o *options, d deps) *agents {
	factory := o.factory
	if factory == nil {
		shared := o.shared
		factory = func(context.Context, Request) (adk.Agent, error) { return shared, nil }
	}
	a := &agents{
		stream: o.stream, persist: o.persist, notice: o.notice, transient: o.transient,
		summaryInstruction: defaultSummaryInstruction, label: o.modelLabel,
	}
	if a.label == nil {
		a.label = func(string) string { return "custom" }
	}
	a.agent = func(ctx context.Context, r Request) (adk.Agent, error) {
		ag, err := factory(ctx, r)
		if err == nil && ag == nil {
			err = errors.New("the agent factory returned no agent")
		}
		if err != nil {
			// Retried like a model error; classify dead-letters one marked
			// Permanent at once.
			return nil, retryRecord{err}
		}
		return ag, nil
	}
	if o.resume != nil || len(o.resumeByTool) > 0 {
		byTool, fallback := o.resumeByTool, o.resume
		a.resume = func(ctx context.Context, r Resume) (any, error) {
			if f, ok := byTool[r.Tool]; ok {
				return f(ctx, r)
			}
			if fallback != nil {
				return fallback(ctx, r)
			}
			return r.Answer, nil
		}
	}
	switch {
	case o.summarizer != nil:
		a.summarizer, a.summarizerModel = o.summarizer, "summarizer"
	case d.Summarizer != nil:
		a.summarizer, a.summarizerModel = d.Summarizer, "summarizer"
	case d.Model != nil:
		a.summarizer, a.summarizerModel = d.Model, labelOr(d.ModelName, defaultModel)
	}
	return a
}

// resumeValue is the value the interrupt r answers is resumed with.
func (a *agents) resumeValue(ctx context.Context, r Resume) (any, error) {
	if a.resume == nil {
		return r.Answer, nil
	}
	v, err := a.resume(ctx, r)
	switch {
	case isPermanent(err):
		return nil, badAnswer{err}
	case err != nil:
		return nil, retryRecord{err}
	}
	return v, nil
}

// retryRecord marks an error of a Go agent's factory or resume hook: the
// record is retried as after a model error before any content. It adds
// nothing to the error's text, so that a dead-letter reason is the
// caller's own error, not a model's.
type retryRecord struct{ error }

func (e retryRecord) Unwrap() error { return e.error }

// badAnswer is a Go agent's resume hook refusing the answer: the resume
// completes rejected, with the hook's own error as the notice, and the
// interrupt stays pending.
type badAnswer struct{ error }

func (e badAnswer) Unwrap() error { return e.error }

// notice is the rejected resume's notice: the hook's error, without the
// "invalid: " of one that wraps events.ErrInvalid.
func (e badAnswer) notice() string {
	return "Answer rejected: " + strings.TrimPrefix(e.Error(), events.ErrInvalid.Error()+": ")
}

// retryModelError is the bridge's RetryModelError: the worker's own
// classification, or the Go agent's (WithTransientErrors).
func (a *agents) retryModelError(err error) bool {
	if transientModelError(err) {
		return true
	}
	return a.transient != nil && err != nil && a.transient(err)
}
