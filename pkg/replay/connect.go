package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// connect builds the dependencies a replay needs from cfg, as cmd/replay
// runs it: the live store for redrive's lookups; for shadow, the worker's
// run step of opts' agent (else of the settings': newStep) and the optional
// MongoDB shadow store; a logger and the progress display on stderr.
// closeDeps releases them.
func connect(ctx context.Context, cfg config, stderr io.Writer, opts []worker.Option) (d deps, closeDeps func(), err error) {
	if err := cfg.Validate(); err != nil {
		return deps{}, nil, err
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
	case modeRedrive:
		if cfg.MongoURI == "" {
			return deps{}, closeDeps, errors.New("redrive looks decisions up in the live store: set -mongo-uri or TURNPIKE_MONGO_URI (and -mongo-db)")
		}
		store, closeStore, err := cfg.OpenStore(ctx)
		if err != nil {
			return deps{}, closeDeps, err
		}
		closers = append(closers, closeStore)
		d.Decisions = store
	case modeShadow:
		if d.Step, err = newStep(cfg, d.Logger, opts); err != nil {
			return deps{}, closeDeps, err
		}
		if cfg.ShadowMongoDB != "" {
			sh := cfg.shared
			sh.MongoDB = cfg.ShadowMongoDB // Validate refused the live name
			store, closeStore, err := sh.OpenStore(ctx)
			if err != nil {
				return deps{}, closeDeps, err
			}
			closers = append(closers, closeStore)
			d.ShadowStore = store
		}
	}
	return d, closeDeps, nil
}

// newStep is the worker's run step a shadow replay runs each request
// through (worker.NewStep): the window, compaction, the agent through the
// bridge, what is persisted. The agent is opts' (written in Go), else the
// settings': the agent configuration file, or one chat model agent on the
// model, or with -agent direct the model streamed directly (directAgent,
// run by the step as an agent written in Go).
func newStep(cfg config, log *slog.Logger, opts []worker.Option) (*worker.Step, error) {
	wc := cfg.WorkerConfig()
	if cfg.Agent == agentDirect {
		if hasGoAgent(opts) {
			return nil, errors.New("agent direct streams the model of -model: it cannot run an agent written in Go (use -agent adk)")
		}
		m, err := wc.NewModel()
		if err != nil {
			return nil, err
		}
		a := &directAgent{name: wc.AgentName, instruction: wc.Instruction, model: m}
		opts = []worker.Option{worker.WithAgent(a), worker.WithModelLabel(func(string) string { return wc.Model })}
	}
	// A shadow replay runs without long-term memory (the options' own
	// WithMemory is overridden): it would write the replayed turns'
	// memories (live ones, with the options' service), and a search would
	// give a past request the memories of turns that came after it. And
	// without artifacts (the options' WithArtifacts is overridden too): a
	// replayed run's saves would be staged, and published, in the live
	// store; its tools find no artifacts (ArtifactsFromContext is nil).
	st, err := worker.NewStep(wc, append(opts[:len(opts):len(opts)], worker.WithLogger(log), worker.WithBufferSize(shadowBufferSize),
		worker.WithMemory(nil, worker.MemoryConfig{}), worker.WithArtifacts(nil))...)
	if errors.Is(err, worker.ErrNoMemoryService) {
		err = fmt.Errorf("%w; a shadow replay runs without long-term memory: take memory out of the agent file to replay it (pkg/replay)", err)
	}
	if err != nil && cfg.AgentFile != "" {
		return nil, fmt.Errorf("agent config %s: %w", cfg.AgentFile, err)
	}
	return st, err
}
