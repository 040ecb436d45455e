package worker

import (
	"context"
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
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// deps are a consumer's collaborators: Worker.Run opens or builds them
// from the Config and the options; tests give them directly.
type deps struct {
	// Store keeps the conversations. Required.
	Store history.Store
	// Artifacts, if set, keeps the artifacts the runs' tools save.
	Artifacts history.ArtifactService
	// Model is Config.Model's: the model of the agent configuration's
	// "default" and the default summarizer. Required without a Go agent.
	Model model.ToolCallingChatModel
	// ModelName labels Model's token usage in metrics. Default "default".
	ModelName string
	// Agent is the agent configuration (Config.AgentFile's). Default: one
	// agent named Config.AgentName with Config.Instruction and no tools,
	// whose assistant text is streamed and persisted.
	Agent *agentConfig
	// Models are the models the agent configuration names, by name.
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
	// Go, if set, holds the agent written in Go and its hooks (WithAgent,
	// WithAgentFactory…), run instead of the agent configuration's (Agent
	// and Models must then be unset); Model is then only the compaction
	// summarizer's default and may be nil.
	Go *options
	// Ready, if set, is called once by Run when the worker's topics exist
	// and its writers are open, before it joins the consumer group.
	Ready func()
}

// consumer consumes the requests topic in the consumer group and runs
// each record through the step: the worker without its process (store,
// servers, tracing), which Worker.Run adds.
type consumer struct {
	cfg     Config
	topics  topic.Names
	store   history.Store
	step    *Step
	ready   func() // deps.Ready
	log     *slog.Logger
	now     func() time.Time
	tracing *tracing.Tracing
	metrics *metrics
	// inflight bounds the records running or queued (MaxInflight): a slot
	// is taken after a record's fetch and given back when it is done or
	// dropped.
	inflight chan struct{}

	peakMu sync.Mutex // guards peak
	peak   int

	active *activeRuns
	// countBeforeJoin is the requests topic's partition count as last read
	// before the consumer group's latest join (home.go).
	countBeforeJoin atomic.Int64
	// runSeq counts the runs of records this process started: the low
	// half of their owner tokens (ownerToken).
	runSeq atomic.Uint32

	// set by Run
	control *controlChannel
	stream  *streamWriter
	dlq     *deadLetters
	mover   *mover // copies misplaced records home (home.go)

	// requestsDial, if set, dials the requests partitions' readers' broker
	// connections (tests); nil: a plain dial.
	requestsDial topic.DialFunc
	// sweepTicks, if set, says when to sweep expired step journals
	// (tests); nil: every journalSweepInterval.
	sweepTicks <-chan time.Time
	// sweepClock schedules the artifact sweeps (tests step one); nil: the
	// system clock.
	sweepClock sweepClock
}

// newConsumer validates cfg's consumer settings and builds the agent.
func newConsumer(cfg Config, d deps) (*consumer, error) {
	if err := cfg.validateConsumer(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	var errs []error
	if d.Store == nil {
		errs = append(errs, errors.New("worker: Store is required"))
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
	a, err := newAgents(cfg, d)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(d.Registerer)
	if err != nil {
		return nil, err
	}
	step, err := newStep(cfg, a, m, d.Logger, d.Now, 0)
	if err != nil {
		return nil, err
	}
	step.artifacts = d.Artifacts
	return &consumer{
		cfg:      cfg,
		topics:   cfg.topics(),
		store:    d.Store,
		step:     step,
		ready:    d.Ready,
		log:      d.Logger,
		now:      d.Now,
		tracing:  d.Tracing,
		metrics:  m,
		inflight: make(chan struct{}, cfg.MaxInflight),
		active:   newActiveRuns(),
	}, nil
}

// newAgents builds the agents of d: its Go agent, else the agent
// configuration's (or cfg's one agent), with the checks of each.
func newAgents(cfg Config, d deps) (*agents, error) {
	goAgent := d.Go != nil && d.Go.goAgent()
	var errs []error
	if d.Model == nil && !goAgent {
		errs = append(errs, errors.New("worker: Model is required"))
	}
	if goAgent && (d.Agent != nil || len(d.Models) > 0) {
		errs = append(errs, errors.New("worker: an agent written in Go and an agent configuration"))
	}
	if goAgent && cfg.CompactTokens > 0 && d.Go.summarizer == nil && d.Summarizer == nil && d.Model == nil {
		errs = append(errs, errors.New("worker: compaction (CompactTokens) needs a summarizer (WithSummarizer) or a Model"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if d.Go != nil {
		if err := d.Go.memoryCfg.validate(); err != nil {
			return nil, fmt.Errorf("worker: WithMemory: %w", err)
		}
	}
	if goAgent {
		a := goAgents(d.Go, d)
		cfg := d.Go.memoryCfg
		a.memory, a.memoryOf = d.Go.memory, func(string) MemoryConfig { return cfg }
		return a, nil
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	a, err := buildAgents(context.Background(), cfg, d.Agent, d)
	if err != nil {
		return nil, fmt.Errorf("worker: build agent: %w", err)
	}
	if d.Go != nil {
		a.memory = d.Go.memory
	}
	if err := a.checkMemory(d.Agent); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return a, nil
}

// notePeak records the in-flight high-water mark: the slots taken.
func (w *consumer) notePeak() {
	n := len(w.inflight)
	w.peakMu.Lock()
	if n > w.peak {
		w.peak = n
		w.metrics.peakInflight.Set(float64(n))
	}
	w.peakMu.Unlock()
}

// PeakInflight is the most records fetched and not yet done at once.
func (w *consumer) PeakInflight() int {
	w.peakMu.Lock()
	defer w.peakMu.Unlock()
	return w.peak
}

// PeakRunning is the most model runs in progress at once.
func (w *consumer) PeakRunning() int { return w.step.peak() }

// Run consumes until ctx ends, then stops fetching, lets in-flight runs
// finish within DrainTimeout, commits what is done, leaves the group and
// flushes its writers. It returns nil after a clean stop.
func (w *consumer) Run(ctx context.Context) error {
	if err := topic.Ensure(ctx, w.cfg.Brokers, w.cfg.Partitions, w.topics.Requests, w.topics.DLQ, w.topics.Control); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if err := topic.Ensure(ctx, w.cfg.Brokers, topic.StreamPartitions(w.cfg.Partitions, w.cfg.StreamPartitions), w.topics.Stream); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	w.stream = newStreamWriter(w.cfg.Brokers, w.topics.Stream, w.cfg.StreamBatchTimeout, w.metrics.streamWrite, w.metrics.firstTokenWrite, w.metrics.timeToFirstToken)
	w.dlq = newDeadLetters(w.cfg.Brokers, w.topics.DLQ)
	w.mover = newMover(w.cfg.Brokers, w.topics.Requests)
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

	sweepCtx, stopSweep := context.WithCancel(ctx)
	sweepDone := make(chan struct{}, 2)
	artifactSweeps := w.scheduleArtifactSweeps(sweepCtx) // before Ready: its first sweep is scheduled
	go func() {
		defer func() { sweepDone <- struct{}{} }()
		w.sweepJournals(sweepCtx)
	}()
	go func() {
		defer func() { sweepDone <- struct{}{} }()
		w.sweepArtifacts(sweepCtx, artifactSweeps)
	}()
	defer func() {
		stopSweep()
		<-sweepDone
		<-sweepDone
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
		Topics:            []string{w.topics.Requests},
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

// sleep waits d or until ctx ends; it reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	return sleepUnless(ctx, d, nil)
}

// sleepUnless is sleep that also ends early, reporting true, when wake is
// closed.
func sleepUnless(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-wake:
		return true
	case <-ctx.Done():
		return false
	}
}

// ownerToken is the owner token of a run of a record in generation gen:
// the generation in the high 32 bits, this process's run counter in the
// low 32. A partition has one owner per generation, whose runs of a
// record (retries) are one after the other in this process, so a later
// run of a request always has a higher token than an earlier one, and
// the new owner of a partition a higher one than a zombie of an older
// generation. The step journal's writes are fenced by it.
func (w *consumer) ownerToken(gen int32) int64 {
	return int64(gen)<<32 | int64(w.runSeq.Add(1))
}

// journalSweepInterval is how often a worker deletes expired step journals
// on a store without a TTL index (FerretDB).
const journalSweepInterval = time.Hour

// sweepJournals deletes the expired step journals (of requests that never
// reached a durable end) every journalSweepInterval (or at each value of
// sweepTicks) until ctx ends, when the store can
// (history.MongoStore.SweepSteps). On MongoDB the TTL index deletes them
// too; the sweep then finds few.
func (w *consumer) sweepJournals(ctx context.Context) {
	sw, ok := w.store.(interface {
		SweepSteps(ctx context.Context, now time.Time) (int, error)
	})
	if !ok || w.cfg.JournalOff {
		return
	}
	ticks := w.sweepTicks
	if ticks == nil {
		t := time.NewTicker(journalSweepInterval)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		n, err := sw.SweepSteps(ctx, w.now())
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("journal sweep", slog.Any("error", err))
			}
			continue
		}
		w.metrics.journalSwept.Add(float64(n))
	}
}
