package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/eino/components/model"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/internal/tracing"
	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// Deps are the Worker's collaborators.
type Deps struct {
	// Store keeps the conversations. Required.
	Store history.Store
	// Model answers. Required: the agent's model, or the model named
	// "default" in the agent configuration.
	Model model.ToolCallingChatModel
	// ModelName labels Model's token usage in metrics. Default "default".
	ModelName string
	// Agent is the agent configuration (TURNPIKE_AGENT_CONFIG). Default:
	// one agent named Config.AgentName with Config.Instruction and no
	// tools, whose assistant text is streamed and persisted.
	Agent *AgentConfig
	// Models are the models the agent configuration names, by name, built
	// from its models section.
	Models map[string]model.ToolCallingChatModel
	// Summarizer, if set, writes the summaries of context compaction
	// instead of the model the agent configuration chooses (tests use a
	// scripted one).
	Summarizer model.BaseChatModel
	// Registerer receives the worker's metrics. Default: not exported.
	Registerer prometheus.Registerer
	// Logger. Default: discard.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Tracing, if set, continues each request's trace (from its record's
	// headers) and carries it into its stream events' headers.
	Tracing *tracing.Tracing
	// Custom, if set, is the agent instead of the agent configuration's
	// (Agent and Models must then be unset); Model is then only the
	// compaction summarizer's default and may be nil.
	Custom *Custom
	// Ready, if set, is called once by Run when the worker's topics exist
	// and its writers are open, before it joins the consumer group.
	Ready func()
}

// Worker runs requests from the requests topic.
type Worker struct {
	cfg     Config
	store   history.Store
	agents  *agents
	custom  *Custom // nil: the agent configuration's agent
	ready   func()  // Deps.Ready
	log     *slog.Logger
	now     func() time.Time
	tracing *tracing.Tracing
	metrics *metrics
	// inflight bounds the records fetched and not yet done (MaxInflight).
	inflight chan struct{}

	peakMu      sync.Mutex // guards peak, running, peakRunning
	peak        int
	running     int
	peakRunning int

	active *activeRuns
	// countBeforeJoin is the requests topic's partition count as last read
	// before the consumer group's latest join (home.go).
	countBeforeJoin atomic.Int64

	// set by Run
	control *controlChannel
	stream  *streamWriter
	dlq     *deadLetters
	mover   *mover // copies misplaced records home (home.go)
	bridge  *bridge.Bridge
}

// New validates cfg and builds the agent.
func New(cfg Config, d Deps) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	var errs []error
	if d.Store == nil {
		errs = append(errs, errors.New("worker: Store is required"))
	}
	if d.Model == nil && d.Custom == nil {
		errs = append(errs, errors.New("worker: Model is required"))
	}
	if d.Custom != nil && (d.Agent != nil || len(d.Models) > 0) {
		errs = append(errs, errors.New("worker: a custom agent and an agent configuration"))
	}
	if d.Custom != nil && cfg.CompactTokens > 0 && d.Custom.Summarizer == nil && d.Summarizer == nil && d.Model == nil {
		errs = append(errs, errors.New("worker: compaction (CompactTokens) needs a summarizer or a Model"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Registerer == nil {
		d.Registerer = prometheus.NewRegistry()
	}
	m, err := newMetrics(d.Registerer)
	if err != nil {
		return nil, err
	}
	var ag *agents
	if d.Custom != nil {
		ag, err = customAgents(d.Custom, d)
	} else {
		ag, err = buildAgents(context.Background(), cfg, d.Agent, d)
	}
	if err != nil {
		return nil, fmt.Errorf("worker: build agent: %w", err)
	}
	return &Worker{
		cfg:      cfg,
		store:    d.Store,
		agents:   ag,
		custom:   d.Custom,
		ready:    d.Ready,
		log:      d.Logger,
		now:      d.Now,
		tracing:  d.Tracing,
		metrics:  m,
		inflight: make(chan struct{}, cfg.MaxInflight),
		active:   newActiveRuns(),
	}, nil
}

// notePeak records the in-flight high-water mark.
func (w *Worker) notePeak() {
	n := len(w.inflight)
	w.peakMu.Lock()
	if n > w.peak {
		w.peak = n
		w.metrics.peakInflight.Set(float64(n))
	}
	w.peakMu.Unlock()
}

// PeakInflight is the most records fetched and not yet done at once.
func (w *Worker) PeakInflight() int {
	w.peakMu.Lock()
	defer w.peakMu.Unlock()
	return w.peak
}

// PeakRunning is the most model runs in progress at once.
func (w *Worker) PeakRunning() int {
	w.peakMu.Lock()
	defer w.peakMu.Unlock()
	return w.peakRunning
}

// runStarted and runEnded count model runs in progress.
func (w *Worker) runStarted() {
	w.metrics.running.Inc()
	w.peakMu.Lock()
	w.running++
	w.peakRunning = max(w.peakRunning, w.running)
	w.peakMu.Unlock()
}

func (w *Worker) runEnded() {
	w.metrics.running.Dec()
	w.peakMu.Lock()
	w.running--
	w.peakMu.Unlock()
}

// Run consumes until ctx ends, then stops fetching, lets in-flight runs
// finish within DrainTimeout, commits what is done, leaves the group and
// flushes its writers. It returns nil after a clean stop.
func (w *Worker) Run(ctx context.Context) error {
	if err := topic.Ensure(ctx, w.cfg.Brokers, w.cfg.Partitions, w.cfg.Topics.All()...); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	w.stream = newStreamWriter(w.cfg.Brokers, w.cfg.Topics.Stream, w.cfg.StreamBatchTimeout, w.metrics.streamWrite)
	w.dlq = newDeadLetters(w.cfg.Brokers, w.cfg.Topics.DLQ)
	w.mover = newMover(w.cfg.Brokers, w.cfg.Topics.Requests)
	bc := bridge.Config{Logger: w.log, Now: w.now, RetryModelError: w.retryModelError,
		Stream: w.agents.stream, Persist: w.agents.persist}
	if w.custom != nil {
		bc.OnError = w.custom.Notice
	}
	b, err := bridge.New(bc)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	w.bridge = b
	w.control = newControlChannel(w)
	defer func() {
		// Writers flush what they hold on Close.
		if err := errors.Join(w.stream.Close(), w.dlq.Close(), w.mover.Close(), w.control.Close()); err != nil {
			w.log.Warn("close writers", slog.Any("error", err))
		}
	}()
	controlCtx, stopControl := context.WithCancel(ctx)
	controlDone := make(chan error, 1)
	go func() { controlDone <- w.control.run(controlCtx) }()
	defer func() {
		stopControl()
		if err := <-controlDone; err != nil {
			w.log.Warn("control topic", slog.Any("error", err))
		}
	}()

	if w.ready != nil {
		w.ready()
	}
	if n, err := w.requestPartitions(ctx); err == nil && w.countBeforeJoin.Load() == 0 {
		w.countBeforeJoin.Store(int64(n)) // else the first generation rejoins once
	}
	group, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                w.cfg.GroupID,
		Brokers:           w.cfg.Brokers,
		Topics:            []string{w.cfg.Topics.Requests},
		StartOffset:       kafka.FirstOffset,
		SessionTimeout:    w.cfg.SessionTimeout,
		HeartbeatInterval: w.cfg.SessionTimeout / 4,
		RebalanceTimeout:  w.cfg.DrainTimeout + 5*time.Second,
		// Partitions added to the topic trigger a rebalance.
		WatchPartitionChanges:  true,
		PartitionWatchInterval: w.cfg.PartitionWatchInterval,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			w.log.Debug("consumer group: " + fmt.Sprintf(msg, args...))
		}),
	})
	if err != nil {
		return fmt.Errorf("worker: consumer group: %w", err)
	}
	// Closing the group ends the current generation, which cancels every
	// partition loop and waits for them (they drain first), then leaves the
	// group.
	stop := context.AfterFunc(ctx, func() { _ = group.Close() })
	defer stop()
	defer group.Close()

	backoff := w.cfg.RetryBackoffMin
	for {
		gen, err := group.Next(ctx)
		switch {
		case ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed):
			_ = group.Close() // waits for the last generation's partition loops
			return nil
		case err != nil:
			w.log.Warn("join consumer group", slog.Any("error", err))
			if !sleep(ctx, backoff) {
				continue
			}
			backoff = min(2*backoff, w.cfg.RetryBackoffMax)
			continue
		}
		backoff = w.cfg.RetryBackoffMin
		// One goroutine reads the partition count records are placed by in
		// this generation, starts the partitions, and ends the generation
		// when the count changes (home.go).
		gen.Start(func(genCtx context.Context) { w.runGeneration(genCtx, gen) })
	}
}

// sleep waits d or until ctx ends; it reports whether the full d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// newRunID returns a fresh run id: each attempt at a request gets one.
func newRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "run-" + hex.EncodeToString(b[:])
}
