package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// reset applies a reset request (req.Reset) in the conversation's order:
// no agent runs; the store records the reset of the parts it names with
// the request's decision, and the request completes with that status
// (complete). The next run of the conversation starts from the reset
// state. A store that cannot reset makes the record permanent (it is
// dead-lettered).
func (s *Step) reset(ctx context.Context, pending *history.Pending, sink bridge.Sink, id events.Identity, req events.Request, log *slog.Logger) (bridge.Result, error) {
	c, err := pending.Reset(ctx, history.Reset{State: req.Reset.State, Agent: req.Reset.Agent})
	if errors.Is(err, history.ErrNotResettable) {
		return bridge.Result{}, fmt.Errorf("%w %w", events.ErrInvalid, err)
	}
	if err != nil {
		return bridge.Result{}, err
	}
	log.Info("conversation state reset", slog.Bool("state", req.Reset.State), slog.Bool("agent", req.Reset.Agent), slog.Bool("duplicate", c.Duplicate))
	s.metrics.runs.WithLabelValues(string(c.Status)).Inc()
	return s.ended(ctx, sink, id, req.RequestID, c, "")
}
