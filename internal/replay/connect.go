package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cloudwego/eino/components/model"

	"github.com/turnpike-dev/turnpike/internal/worker"
	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/history"
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
		m, err := cfg.NewModel()
		if err != nil {
			return Deps{}, closeDeps, err
		}
		d.Model = m
		if cfg.AgentFile != "" {
			if d.Agent, d.Persist, err = fileAgent(ctx, cfg, m); err != nil {
				return Deps{}, closeDeps, err
			}
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

// fileAgent builds the agent of cfg.AgentFile as the worker would, with m
// as its default model. Interrupted runs are checkpointed in memory: a
// shadow replay never resumes them.
func fileAgent(ctx context.Context, cfg Config, m model.ToolCallingChatModel) (Agent, bridge.Predicate, error) {
	spec, err := worker.LoadAgentConfig(cfg.AgentFile)
	if err != nil {
		return nil, nil, err
	}
	models, err := cfg.NewAgentModels(spec, os.Getenv)
	if err != nil {
		return nil, nil, err
	}
	fa, err := worker.NewFileAgent(ctx, spec, worker.Deps{Store: history.NewMemoryStore(), Model: m, ModelName: cfg.ModelName(), Models: models})
	if err != nil {
		return nil, nil, fmt.Errorf("agent config %s: %w", cfg.AgentFile, err)
	}
	return fa, fa.Persist(), nil
}
