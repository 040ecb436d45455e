package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/cloudwego/eino/adk"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// resume continues the interrupted run of request req.ResumeOf with
// req.Content as the answer to its question. That request must be the
// conversation's latest turn, interrupted; otherwise (a second resume,
// a message posted in between, an unknown request) it returns
// errNothingToResume. The interrupted run's checkpoint is copied under
// req's own id first, so the checkpoint of ResumeOf never changes: a
// re-run of req after a crash resumes from the same state, and an
// interrupt of the resumed run saves its checkpoint under req's id.
func (w *Worker) resume(runCtx, ctx context.Context, id events.Identity, req events.Request) (*adk.AsyncIterator[*adk.AgentEvent], error) {
	last, err := w.store.Window(ctx, id, 1)
	if err != nil {
		return nil, fmt.Errorf("read the latest turn: %w", err)
	}
	if len(last) == 0 || last[0].RequestID != req.ResumeOf {
		return nil, fmt.Errorf("%w: request %s is not the conversation's latest turn", errNothingToResume, req.ResumeOf)
	}
	in := last[0].Interrupt
	if last[0].Status != events.StatusInterrupted || in == nil {
		return nil, fmt.Errorf("%w: request %s was not interrupted (it ended %s)", errNothingToResume, req.ResumeOf, last[0].Status)
	}
	data, found, err := w.store.LoadCheckpoint(ctx, id, req.ResumeOf)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint: %w", err)
	}
	if !found {
		return nil, fmt.Errorf("%w: request %s has no checkpoint", errNothingToResume, req.ResumeOf)
	}
	if err := w.store.SaveCheckpoint(ctx, id, req.RequestID, data); err != nil {
		return nil, fmt.Errorf("copy checkpoint: %w", err)
	}
	targets := make(map[string]any, len(in.Targets))
	for _, t := range in.Targets {
		v, err := w.resumeValue(ctx, ResumeInfo{RunInfo: runInfoOf(req), Target: t, Agent: in.Agent, Tool: in.Tool,
			Question: in.Question, Answer: req.Content})
		if err != nil {
			return nil, fmt.Errorf("resume value of %s: %w", t, err)
		}
		targets[t] = v
	}
	runner, err := w.agents.runner(runCtx, runInfoOf(req))
	if err != nil {
		return nil, fmt.Errorf("build agent: %w", err)
	}
	iter, err := runner.ResumeWithParams(runCtx, checkpointKey(id, req.RequestID), &adk.ResumeParams{Targets: targets})
	if err != nil {
		// The checkpoint no longer fits the agents (a changed agent
		// configuration) or cannot be decoded: retrying cannot help.
		return nil, fmt.Errorf("%w: %w", errNothingToResume, err)
	}
	return iter, nil
}

// rejectResume completes a resume that has nothing to resume, or whose
// answer the custom agent's resume hook refused: rejected, with a notice
// saying why, and nothing persisted.
func (w *Worker) rejectResume(ctx context.Context, id events.Identity, requestID string, reason error) error {
	w.metrics.resumes.WithLabelValues("rejected").Inc()
	c, err := w.store.RecordOutcome(ctx, id, requestID, events.StatusRejected)
	if err != nil {
		return fmt.Errorf("record rejected: %w", err)
	}
	w.metrics.runs.WithLabelValues(string(c.Status)).Inc()
	sink := w.stream.run(w.tracing.KafkaHeaders(ctx))
	e := bridge.NewEmitter(sink, id, requestID, newRunID(), w.now)
	if !c.Duplicate {
		notice := "Nothing to resume: " + reason.Error()
		if bad := (badAnswer{}); errors.As(reason, &bad) {
			notice = bad.notice()
		}
		if err := e.Notice(ctx, notice); err != nil {
			return err
		}
	}
	if err := e.Completed(ctx, c.Status); err != nil {
		return err
	}
	if err := sink.Flush(); err != nil {
		return err
	}
	w.control.completed(id, requestID, c.Status)
	return nil
}

// countRun adds a finished run's tokens, transfers and interrupt to the
// metrics.
func (w *Worker) countRun(res bridge.Result) {
	for agent, u := range res.UsageByAgent {
		w.metrics.countTokens(w.agents.label(agent), u.PromptTokens, u.CompletionTokens)
	}
	w.metrics.transfers.Add(float64(res.Transfers))
	if res.Status == events.StatusInterrupted && !res.Committed.Duplicate {
		w.metrics.interrupts.Inc()
	}
}
