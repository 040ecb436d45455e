package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cloudwego/eino/adk"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// resume continues the interrupted run of request req.ResumeOf with
// req.Content as the answer to its question. That request must be the
// conversation's latest turn, interrupted; otherwise (a second resume,
// a message posted in between, an unknown request) it returns
// errNothingToResume. The interrupted run's checkpoint is copied under
// req's own id first, so the checkpoint of ResumeOf never changes: a
// re-run of req after a crash resumes from the same state, and an
// interrupt of the resumed run saves its checkpoint under req's id.
//
// The resumed run starts from the agent the interrupted one started from
// (from, "": the root), as its checkpoint was taken from there.
func (w *Step) resume(runCtx, ctx context.Context, store history.Store, id events.Identity, req events.Request, from string, turn *stateTurn, log *slog.Logger) (*adk.AsyncIterator[*adk.AgentEvent], error) {
	last, err := store.Window(ctx, id, 1)
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
	data, found, err := store.LoadCheckpoint(ctx, id, req.ResumeOf)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint: %w", err)
	}
	if !found {
		return nil, fmt.Errorf("%w: request %s has no checkpoint", errNothingToResume, req.ResumeOf)
	}
	if err := store.SaveCheckpoint(ctx, id, req.RequestID, data); err != nil {
		return nil, fmt.Errorf("copy checkpoint: %w", err)
	}
	targets := make(map[string]any, len(in.Targets))
	for _, t := range in.Targets {
		v, err := w.agents.resumeValue(ctx, Resume{Request: requestOf(req), Target: t, Agent: in.Agent, Tool: in.Tool,
			Question: in.Question, Answer: req.Content})
		if err != nil {
			return nil, fmt.Errorf("resume value of %s: %w", t, err)
		}
		targets[t] = v
	}
	ag, err := w.agents.agent(runCtx, requestOf(req))
	if err != nil {
		return nil, fmt.Errorf("build agent: %w", err)
	}
	ag = w.startAgent(runCtx, ag, from, turn, log)
	if err := ctx.Err(); err != nil {
		// Stopped before the agent starts (ctx ends with the run's
		// stop until then): it does not.
		return nil, fmt.Errorf("%w: stopped before the agent started: %w", bridge.ErrAborted, context.Cause(ctx))
	}
	iter, err := newRunner(runCtx, ag, store).ResumeWithParams(runCtx, checkpointKey(id, req.RequestID), &adk.ResumeParams{Targets: targets})
	if err != nil {
		// The checkpoint no longer fits the agents (a changed agent
		// configuration) or cannot be decoded: retrying cannot help.
		return nil, fmt.Errorf("%w: %w", errNothingToResume, err)
	}
	return iter, nil
}

// rejectResume completes a resume that has nothing to resume, or whose
// answer the Go agent's resume hook refused: rejected, with a notice
// saying why, and nothing persisted.
func (w *Step) rejectResume(ctx context.Context, store history.Store, sink bridge.Sink, id events.Identity, requestID string, reason error) (bridge.Result, error) {
	w.metrics.resumes.WithLabelValues("rejected").Inc()
	c, err := store.RecordOutcome(ctx, id, requestID, events.StatusRejected)
	if err != nil {
		return bridge.Result{}, fmt.Errorf("record rejected: %w", err)
	}
	w.metrics.runs.WithLabelValues(string(c.Status)).Inc()
	notice := ""
	if !c.Duplicate {
		notice = "Nothing to resume: " + reason.Error()
		if bad := (badAnswer{}); errors.As(reason, &bad) {
			notice = bad.notice()
		}
	}
	return w.ended(ctx, sink, id, requestID, c, notice)
}
