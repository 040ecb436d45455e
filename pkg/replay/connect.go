package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"log/slog"

	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// Connect builds the dependencies a replay needs from cfg, as cmd/replay
// runs it: the live store for redrive's lookups, the model and the optional
// MongoDB shadow store for shadow, a logger and the progress display on
// stderr. closeDeps releases them.
func Connect(ctx context.Context, cfg Config, stderr io.Writer) (d Deps, closeDeps func(), err error) {
	if err := cfg.Validate(); err != nil {
		return Deps{}, nil, err
	}
	cfg.setDefaults()
	var closers []func()
	closeDeps = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	d.Logger = cfg.NewLogger(stderr)
	d.Progress = stderr
	if f, ok := stderr.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			d.ProgressTTY = st.Mode()&os.ModeCharDevice != 0
		}
	}
	if cfg.DryRun {
		return d, closeDeps, nil
	}
	switch cfg.Mode {
	case ModeRedrive:
		if cfg.MongoURI == "" {
			return Deps{}, closeDeps, errors.New("redrive looks decisions up in the live store: set -mongo-uri or TURNPIKE_MONGO_URI (and -mongo-db)")
		}
		store, _, closeStore, err := cfg.OpenStore(ctx)
		if err != nil {
			return Deps{}, closeDeps, err
		}
		closers = append(closers, closeStore)
		d.Decisions = store
	case ModeShadow:
		if cfg.AgentFile != "" {
			if d.Step, err = fileStep(cfg, d.Logger); err != nil {
				return Deps{}, closeDeps, err
			}
		} else if d.Model, err = cfg.NewModel(); err != nil {
			return Deps{}, closeDeps, err
		}
		if cfg.ShadowMongoDB != "" {
			sh := cfg.Shared
			sh.MongoDB = cfg.ShadowMongoDB // Validate refused the live name
			store, _, closeStore, err := sh.OpenStore(ctx)
			if err != nil {
				return Deps{}, closeDeps, err
			}
			closers = append(closers, closeStore)
			d.ShadowStore = store
		}
	}
	return d, closeDeps, nil
}

// fileStep is the worker's run step for cfg.AgentFile's agent, with m's
// settings as its default model: the window, compaction and what is
// persisted are the worker's. Interrupted runs are checkpointed in the
// shadow store.
func fileStep(cfg Config, log *slog.Logger) (Step, error) {
	st, err := worker.NewStep(cfg.WorkerConfig(), worker.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("agent config %s: %w", cfg.AgentFile, err)
	}
	return st, nil
}
