package worker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/schema"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// A Step runs one request as the worker does, from its store to its
// answer: it begins the request's turn, recognises a request already
// decided or covered by a recorded cancel, loads the history window (an
// interrupted answer ends with the question it asked), compacts it,
// builds the agent (a first run, or the resume of an interrupted one from
// its checkpoint), runs it through the bridge, which streams the events
// to the sink and commits the turn, and records the outcome of a run
// that persisted nothing. The worker's consumer runs every request
// through its Step; a shadow replay runs its requests through one with
// its own store and a sink that keeps nothing, and so reports what the
// worker would persist.
//
// A Step does not touch Kafka: it fetches and commits no record, retries
// nothing (an error is returned; the worker decides whether to run the
// request again), writes no completion record to the control topic and
// no dead letter, and takes no cancel but a recorded one.
//
// A Step is safe for concurrent use: runs of different conversations may
// go at once. Runs of one conversation must go one after the other, in
// the order of its requests, as the worker runs them.
type Step struct {
	cfg     Config
	agents  *agents
	bridge  *bridge.Bridge
	metrics *metrics
	log     *slog.Logger
	now     func() time.Time
	// artifacts, when set, is where the runs' tools save artifacts
	// (ArtifactsFromContext; artifact.go).
	artifacts history.ArtifactService

	mu          sync.Mutex // guards running and peakRunning
	running     int
	peakRunning int

	// lastOwner is the last owner token Run gave a run (see nextOwner).
	lastOwner atomic.Int64
}

// NewStep returns the step of cfg's agent settings (the model, the agent
// file, the agent's name and instruction, the window, compaction, the run
// timeout) and of opts: the agent and hooks of WithAgent or
// WithAgentFactory, WithLogger (default: Config.LogLevel and LogFormat on
// stderr), WithRegistry (default: a registry of its own) for the
// worker's run metrics, WithBufferSize, WithMemory's service and
// settings, and WithArtifacts' service (the runs' saves are staged in it
// and published after their commits; nil: none). The other options and
// settings do not apply (Config.Memory opens no service here, and no
// artifact service is opened: without WithArtifacts, ArtifactsFromContext
// is nil; nor is the artifact sweep run or its age checked).
func NewStep(cfg Config, opts ...Option) (*Step, error) {
	o := collect(opts)
	if err := o.checkAgent(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if err := cfg.validateStep(o.goAgent()); err != nil {
		return nil, err
	}
	d, err := cfg.agentDeps(o)
	if err != nil {
		return nil, err
	}
	d.Logger = o.logger
	if d.Logger == nil {
		d.Logger = cfg.newLogger(os.Stderr)
	}
	d.Registerer = prometheus.NewRegistry()
	if o.registry != nil {
		d.Registerer = o.registry
	}
	d.Now = time.Now
	a, err := newAgents(cfg, d)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(d.Registerer)
	if err != nil {
		return nil, err
	}
	st, err := newStep(cfg, a, m, d.Logger, d.Now, o.bufferSize)
	if err != nil {
		return nil, err
	}
	st.artifacts = o.artifacts
	return st, nil
}

// newStep is the step of agents a, with its metrics, logger, clock and
// bridge buffer (0: bridge.DefaultBufferSize). cfg has its defaults.
func newStep(cfg Config, a *agents, m *metrics, log *slog.Logger, now func() time.Time, bufferSize int) (*Step, error) {
	bc := bridge.Config{Logger: log, Now: now, RetryModelError: a.retryModelError, BufferSize: bufferSize,
		Stream: a.stream, Persist: a.persist, OnError: a.notice}
	b, err := bridge.New(bc)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return &Step{cfg: cfg, agents: a, bridge: b, metrics: m, log: log, now: now}, nil
}

// Run runs request req against store, streaming its events to sink, and
// returns how it ended:
//
//   - a request already decided in store (a redelivery, a duplicate) is
//     not run again: Run emits its run.completed with the status it ended
//     with and returns that status, Committed.Duplicate set;
//   - a request a recorded cancel covers is recorded cancelled and
//     completes cancelled without running;
//   - a resume (req.ResumeOf) that does not answer the conversation's
//     pending interrupt, or whose answer a resume hook refused, is
//     recorded rejected and completes with a notice saying why;
//   - otherwise the agent runs, the turn is committed as the bridge
//     decides (the Result says what was persisted), and a run that
//     persisted nothing (discarded, cancelled before any content) has
//     its outcome recorded, so that a redelivery does not run it again.
//
// If sink has a Flush() error method, Run calls it before it decides what
// to record, and a Flush error fails Run. An error means the request did
// not end (the store or the sink failed, the agent could not be built, a
// transient model error before any content: bridge.ErrModelRetry); the
// caller may run it again with a new run id, as the worker does.
//
// With a store that is a history.Journal (MemoryStore and MongoStore are),
// and Config.JournalOff unset, a durable agent's steps (Durable, and the
// agent file's agents) are journaled: a later Run of the same request
// replays what an earlier one recorded and did not finish, and the
// journal is deleted when the request ends.
//
// ctx's values reach the agent, with the Request (RequestFromContext).
// When ctx ends the run is aborted, and Run returns an error wrapping
// bridge.ErrAborted: before the agent starts, the calls under way (the
// store's reads and single writes, the cancel lookup, compaction, the
// memory injection's search) are cancelled and the agent does not start;
// after, nothing more is streamed or persisted. The store's calls after
// the agent starts (the turn's commit) are not cancelled with ctx; each
// run is bounded by Config.RunTimeout.
func (s *Step) Run(ctx context.Context, req events.Request, store history.Store, sink bridge.Sink) (bridge.Result, error) {
	if err := ctx.Err(); err != nil {
		return bridge.Result{}, err
	}
	if err := req.Identity().Validate(); err != nil {
		return bridge.Result{}, err
	}
	if req.RequestID == "" {
		return bridge.Result{}, fmt.Errorf("%w request: no request id", events.ErrInvalid)
	}
	if req.CreatedAt.IsZero() {
		req.CreatedAt = s.now()
	}
	return s.run(context.WithoutCancel(ctx), req, store, sink, stepRun{stop: ctx})
}

// stepRun is what the worker's consumer adds to a run of the step; the
// zero value is a plain run.
type stepRun struct {
	// source is where the request's record is: kept with the turn, it
	// fences a worker that lost the partition.
	source *history.Source
	// cancelled, if set, says whether a cancel covers the request (asked
	// once the store said that none it recorded does).
	cancelled func(ctx context.Context) (bool, error)
	// started, if set, receives the run's handle when the agent starts:
	// cancels reach the run through it.
	started func(*bridge.Handle)
	// agentStarted, if set, is called when the agent starts, before its
	// first event.
	agentStarted func()
	// stop, once done, ends the run: before its agent starts, at once;
	// after, it may finish within drain (counted from the stop), then it
	// is aborted. nil: never.
	stop  context.Context
	drain time.Duration
	// owner is the run's owner token in the request's step journal: a
	// later run of the request has a higher one (the worker's: the group
	// generation, then its run counter). 0: nextOwner's.
	owner int64
}

// ownerOf is sr's owner token, or a new one of nextOwner's.
func (s *Step) ownerOf(sr stepRun) int64 {
	if sr.owner != 0 {
		return sr.owner
	}
	return s.nextOwner()
}

// nextOwner is an owner token for a run of Run: the clock's nanoseconds,
// and above every token this step gave before.
func (s *Step) nextOwner() int64 {
	for {
		last := s.lastOwner.Load()
		next := max(last+1, s.now().UnixNano())
		if s.lastOwner.CompareAndSwap(last, next) {
			return next
		}
	}
}

// run is Run with the consumer's additions. ctx carries the work (it is
// not cancelled when the run stops: stop is how a run is stopped). A run
// stopped before its agent starts returns as one stopped after: with an
// error wrapping bridge.ErrAborted.
func (s *Step) run(ctx context.Context, req events.Request, store history.Store, sink bridge.Sink, sr stepRun) (bridge.Result, error) {
	stopped, release := stopContext(sr.stop, sr.drain)
	defer release()
	res, err := s.runUntil(ctx, stopped, req, store, sink, sr)
	if err != nil && stopped.Err() != nil && !errors.Is(err, bridge.ErrAborted) {
		err = fmt.Errorf("%w: stopped before the agent started: %w", bridge.ErrAborted, err)
	}
	return res, err
}

// errStopped is the cause of a run's stop: stop closed and its drain
// passed.
var errStopped = errors.New("worker: the run was stopped")

// stopContext is a context that ends drain after stop ends (stop itself
// when drain is 0; never, for a nil stop), and its release (call it when
// the run returns).
func stopContext(stop context.Context, drain time.Duration) (context.Context, func()) {
	if stop != nil && drain <= 0 {
		return stop, func() {}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	if stop == nil {
		return ctx, func() { cancel(nil) }
	}
	go func() {
		select {
		case <-stop.Done():
		case <-ctx.Done():
			return
		}
		t := time.NewTimer(drain)
		defer t.Stop()
		select {
		case <-t.C:
			cancel(errStopped)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}

// untilStopped is ctx, ended also when stopped ends, and its release.
func untilStopped(ctx, stopped context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(stopped, func() { cancel(context.Cause(stopped)) })
	return ctx, func() { stop(); cancel(nil) }
}

// runUntil is run, stopped when stopped ends: before the agent starts, its
// calls (the store's, the cancel lookup, compaction, the memory
// injection) are cancelled; after, the run is aborted through its handle
// (its context is not cancelled, so that the commit is never cut halfway).
func (s *Step) runUntil(ctx, stopped context.Context, req events.Request, store history.Store, sink bridge.Sink, sr stepRun) (bridge.Result, error) {
	id := req.Identity()
	log := s.log.With(identityAttr(id), slog.String("request_id", req.RequestID))
	// The agent, its tools and the worker's hooks find the request in ctx
	// (RequestFromContext): its id keys side effects, as a run may happen
	// more than once.
	ctx = withRequest(ctx, requestOf(req))
	// Until the agent starts, the request's calls end when the run is
	// stopped: nothing they do is left half done (each is one write or a
	// read), and a stopped run must not wait on a store or a search that
	// does not answer.
	ctx, releaseCalls := untilStopped(ctx, stopped)
	defer releaseCalls()
	pending := history.Begin(store, id, req.RequestID, req.Content, req.CreatedAt)
	if sr.source != nil {
		pending.SetSource(*sr.source)
	}
	pending.SetKeepV1(s.cfg.HistoryV1)
	// One round trip: already decided (a redelivery, a duplicate record:
	// completed as it was the first time, without running the model
	// again), cancelled, or the window.
	windowMessages := s.cfg.WindowMessages
	if req.ResumeOf != "" || req.Reset != nil {
		windowMessages = 0 // a resume reads its checkpoint instead; a reset runs nothing
	}
	st, err := pending.Start(ctx, windowMessages)
	if err != nil {
		return bridge.Result{}, fmt.Errorf("start request: %w", err)
	}
	if st.Decided {
		// A crash between the commit and the publication of its
		// artifacts left them staged: the committed manifest is
		// published again (which makes no second version).
		// Its versions are announced again before the re-announced
		// run.completed (artifact.saved is at least once). Only when the
		// turn holds saves: duplicates are a hot path.
		var published []history.Artifact
		if st.Committed.Artifacts > 0 { // 0 without a turn
			if published, err = publishArtifacts(ctx, s.artifacts, store, id, req.RequestID, nil, true, s.lostArtifacts(log)); err != nil {
				return bridge.Result{}, err
			}
		}
		// A crash between the end and the journal's delete left it.
		s.dropJournal(ctx, store, id, req.RequestID, s.ownerOf(sr), st.Steps, log)
		log.Info("duplicate request", slog.Int64("turn", st.Committed.N), slog.String("status", string(st.Committed.Status)))
		s.metrics.duplicates.Inc()
		c := st.Committed
		c.Duplicate = true
		return s.endedWith(ctx, sink, id, req.RequestID, c, "", published)
	}
	if !st.Cancelled && sr.cancelled != nil {
		if st.Cancelled, err = sr.cancelled(ctx); err != nil {
			return bridge.Result{}, fmt.Errorf("read cancels: %w", err)
		}
	}
	if st.Cancelled {
		log.Info("cancelled before it ran")
		c, err := store.RecordOutcome(ctx, id, req.RequestID, events.StatusCancelled)
		if err != nil {
			return bridge.Result{}, fmt.Errorf("record cancelled: %w", err)
		}
		s.metrics.runs.WithLabelValues(string(c.Status)).Inc()
		s.dropJournal(ctx, store, id, req.RequestID, s.ownerOf(sr), st.Steps, log)
		return s.ended(ctx, sink, id, req.RequestID, c, "")
	}

	if req.Reset != nil {
		return s.reset(ctx, pending, sink, id, req, log)
	}

	// The step journal: what an earlier run of the request recorded is
	// replayed, and this run records its own steps (journal.go).
	owner := s.ownerOf(sr)
	jr, err := s.openJournal(ctx, store, id, req.RequestID, owner, st.Steps, log)
	if err != nil {
		return bridge.Result{}, err
	}
	if jr != nil {
		ctx = withJournal(ctx, jr)
	}
	// The session state as the conversation's newest turn left it: the
	// agent and its tools read and change it (StateFromContext), and the
	// turn's commit keeps the changes.
	state := newState(id, st.State, store)
	ctx = withState(ctx, state)
	// The run's artifact saves (ArtifactsFromContext) are staged, and
	// the turn's commit keeps their manifest (artifact.go).
	arts := newArtifacts(id, s.artifacts)
	if arts != nil {
		ctx = withArtifacts(ctx, arts)
	}
	turn := &stateTurn{Pending: pending, state: state, agent: st.State.Agent,
		arts: arts, artifacts: s.artifacts, lost: s.lostArtifacts(log), store: store, id: id, requestID: req.RequestID, question: req.Content}
	if s.agents.memory != nil {
		// Tools search the run's user's memories (MemoryFromContext);
		// the commit's turn is remembered after the run (rememberTurn).
		ctx = withMemory(ctx, s.runMemory(id, log))
		turn.remember = true
	}

	runID := newRunID()
	log = log.With(slog.String("run_id", runID))
	start := s.now()
	// From the agent's start the work is not cancelled by the stop: the
	// run is aborted through its handle instead (below).
	work := context.WithoutCancel(ctx)
	runCtx, stopGeneration := context.WithTimeout(work, s.cfg.RunTimeout)
	defer stopGeneration()
	var iter *adk.AsyncIterator[*adk.AgentEvent]
	if req.ResumeOf != "" {
		// A resume continues the interrupted run from its checkpoint; the
		// answer is this request's (persisted) user message.
		var err error
		if iter, err = s.resume(runCtx, ctx, store, id, req, st.State.From, turn, log); errors.Is(err, errNothingToResume) || errors.As(err, new(badAnswer)) {
			log.Info("resume rejected", slog.String("resume_of", req.ResumeOf), slog.Any("reason", err))
			if jr != nil && jr.exists() {
				s.dropJournal(ctx, store, id, req.RequestID, owner, &history.Steps{}, log)
			}
			return s.rejectResume(ctx, store, sink, id, req.RequestID, err)
		} else if err != nil {
			return bridge.Result{}, fmt.Errorf("resume %s: %w", req.ResumeOf, err)
		}
		s.metrics.resumes.WithLabelValues("resumed").Inc()
	} else {
		input, err := s.compactWindow(ctx, store, id, st.Window)
		if err != nil {
			return bridge.Result{}, fmt.Errorf("compact window: %w", err)
		}
		ag, err := s.agents.agent(runCtx, requestOf(req))
		if err != nil {
			return bridge.Result{}, fmt.Errorf("build agent: %w", err)
		}
		// The conversation was left with a sub-agent: the run starts there.
		ag = s.startAgent(runCtx, ag, st.State.Agent, turn, log)
		if s.agents.memoryOf != nil {
			sctx, release := untilStopped(runCtx, stopped)
			input = s.injectMemories(sctx, id, req.Content, s.agents.memoryOf(cmp.Or(turn.from, turn.root)), input, log)
			release()
		}
		if stopped.Err() != nil {
			// Stopped before the agent starts: it does not.
			return bridge.Result{}, fmt.Errorf("%w: stopped before the agent started: %w", bridge.ErrAborted, context.Cause(stopped))
		}
		// An interrupt saves the run's checkpoint under this request's id.
		iter = newRunner(runCtx, ag, store).Run(runCtx, input, adk.WithCheckPointID(checkpointKey(id, req.RequestID)))
	}
	s.runStarted()
	defer s.runEnded()
	if sr.agentStarted != nil {
		sr.agentStarted()
	}
	h := s.bridge.Start(work, bridge.Run{
		Identity:       id,
		RequestID:      req.RequestID,
		RunID:          runID,
		Turn:           turn,
		StopGeneration: stopGeneration,
		Sink:           sink,
		Agent:          turn.from,
	}, iter)
	if jr != nil {
		jr.setAbort(h.Abort)
	}
	if sr.started != nil {
		sr.started(h)
	}
	select {
	case <-h.Done():
	case <-stopped.Done():
		// The run must end (the worker loses the partition or stops; the
		// caller's context ended) and did not finish within the drain
		// deadline, counted from the stop: abort it (its request will be
		// run again).
		h.Abort()
	}
	res, err := h.Wait()
	if jr != nil {
		if jerr := jr.err(); jerr != nil {
			// A journal write failed and aborted the run: fenced (a newer
			// run owns the journal), raced, diverged or a store failure.
			err = jerr
		}
	}
	// Every event of the run must be in the sink before the request is
	// done: a failed write makes the whole request run again (the turn,
	// if committed, is then recognised as a duplicate).
	if ferr := flush(sink); ferr != nil && err == nil {
		err = ferr
	}
	if err != nil {
		// The turn may be committed all the same (the sink's flush, the
		// journal or the artifacts' publish failed after the commit):
		// its redelivery is a duplicate that remembers nothing, so it
		// is remembered now (turn.memory is set only by a commit that
		// wrote the turn).
		s.rememberTurn(work, turn.memory, log)
		return res, fmt.Errorf("run %s: %w", runID, err)
	}
	if jr != nil && jr.exists() {
		// The request reached its durable end: its journal goes.
		s.dropJournal(work, store, id, req.RequestID, owner, &history.Steps{}, log)
	}
	// After the run's last event is in the sink: off the token path,
	// after the commit, and never failing the request.
	s.rememberTurn(work, turn.memory, log)
	if res.Committed.N == 0 && !res.Committed.Duplicate {
		// Nothing persisted (discarded, or cancelled before any content):
		// record the outcome so a redelivery does not run the model again.
		// If this fails, a redelivery runs the model once more, which is
		// harmless for a run that kept nothing.
		if _, err := store.RecordOutcome(work, id, req.RequestID, res.Status); err != nil {
			log.Warn("record outcome", slog.String("status", string(res.Status)), slog.Any("error", err))
		}
	}
	s.metrics.runs.WithLabelValues(string(res.Status)).Inc()
	s.countRun(res)
	s.metrics.runSeconds.Observe(s.now().Sub(start).Seconds())
	log.Info("run completed", slog.String("status", string(res.Status)), slog.Int64("turn", res.Committed.N),
		slog.Int("tokens", res.Tokens), slog.Duration("took", s.now().Sub(start)))
	return res, nil
}

// startAgent is the agent of the tree under root a run starts from to
// start from agent name ("": the root), and sets turn's root and from.
// An agent the tree no longer has (the code or the agent file changed
// since the turn that left the conversation with it) is logged, and the
// run starts from the root.
func (s *Step) startAgent(ctx context.Context, root adk.Agent, name string, turn *stateTurn, log *slog.Logger) adk.Agent {
	turn.root, turn.from = root.Name(ctx), ""
	if name == "" || name == turn.root {
		return root
	}
	if a := findAgent(ctx, root, name); a != nil {
		turn.from = name
		return a
	}
	log.Warn("active agent not in the agent tree: the run starts from the root", slog.String("agent", name), slog.String("root", turn.root))
	turn.agent = ""
	return root
}

// ended completes a request that did not run (decided, cancelled,
// rejected): its notice, if any, and run.completed with c's status, under
// a run id of their own.
func (s *Step) ended(ctx context.Context, sink bridge.Sink, id events.Identity, requestID string, c history.Committed, notice string) (bridge.Result, error) {
	return s.endedWith(ctx, sink, id, requestID, c, notice, nil)
}

// endedWith is ended, announcing first the artifact versions published
// (a duplicate's: its committed turn's manifest, published again).
func (s *Step) endedWith(ctx context.Context, sink bridge.Sink, id events.Identity, requestID string, c history.Committed, notice string, published []history.Artifact) (bridge.Result, error) {
	e := bridge.NewEmitter(sink, id, requestID, newRunID(), s.now)
	if notice != "" {
		if err := e.Notice(ctx, notice); err != nil {
			return bridge.Result{}, err
		}
	}
	for _, a := range artifactInfos(published) {
		if err := e.ArtifactSaved(ctx, a); err != nil {
			return bridge.Result{}, err
		}
	}
	if err := e.Completed(ctx, c.Status); err != nil {
		return bridge.Result{}, err
	}
	if err := flush(sink); err != nil {
		return bridge.Result{}, err
	}
	return bridge.Result{Status: c.Status, Committed: c, Events: int(e.Seq())}, nil
}

// flush flushes sink, if it can be.
func flush(sink bridge.Sink) error {
	if f, ok := sink.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}

// runStarted and runEnded count model runs in progress.
func (s *Step) runStarted() {
	s.metrics.running.Inc()
	s.mu.Lock()
	s.running++
	s.peakRunning = max(s.peakRunning, s.running)
	s.mu.Unlock()
}

func (s *Step) runEnded() {
	s.metrics.running.Dec()
	s.mu.Lock()
	s.running--
	s.mu.Unlock()
}

// peak is the most model runs in progress at once.
func (s *Step) peak() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakRunning
}

// countRun adds a finished run's tokens, transfers and interrupt to the
// metrics.
func (s *Step) countRun(res bridge.Result) {
	for agent, u := range res.UsageByAgent {
		s.metrics.countTokens(s.agents.label(agent), u.PromptTokens, u.CompletionTokens)
	}
	s.metrics.transfers.Add(float64(res.Transfers))
	if res.Status == events.StatusInterrupted && !res.Committed.Duplicate {
		s.metrics.interrupts.Inc()
	}
}

// toMessages converts the history window to the model's input.
func toMessages(window []history.Message) []adk.Message {
	out := make([]adk.Message, 0, len(window))
	for _, m := range window {
		switch m.Role {
		case history.RoleUser:
			out = append(out, schema.UserMessage(m.Content))
		case history.RoleAssistant:
			out = append(out, schema.AssistantMessage(windowText(m), nil))
		}
	}
	return out
}

// windowText is a message's text as the model sees it: an interrupted
// answer ends with the question it asked.
func windowText(m history.Message) string {
	if m.Interrupt == nil || m.Interrupt.Question == "" {
		return m.Content
	}
	if m.Content == "" {
		return m.Interrupt.Question
	}
	return m.Content + "\n\n" + m.Interrupt.Question
}

// newRunID returns a fresh run id: each attempt at a request gets one.
func newRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "run-" + hex.EncodeToString(b[:])
}

// openJournal is the step journal of a run of request requestID with
// owner token owner, given the journal Start found (found: nil when
// none): nil when the store keeps no journals or Config.JournalOff. A
// run that found a journal claims it at once, so that every write of an
// older run (a zombie) is refused from here on, and counts its run; a
// journal owned by a newer run of this generation fences this one, and one
// of a later generation is errJournalAhead while it may still be written,
// then ignored (nil: the run goes live without a journal).
func (s *Step) openJournal(ctx context.Context, store history.Store, id events.Identity, requestID string, owner int64, found *history.Steps, log *slog.Logger) (*journalRun, error) {
	j, ok := store.(history.Journal)
	if !ok || s.cfg.JournalOff {
		return nil, nil
	}
	jr := &journalRun{
		j: j, id: id, requestID: requestID, owner: owner,
		limits:    history.JournalLimits{MaxBytes: s.cfg.JournalBytes, TTL: s.cfg.JournalTTL},
		stepBytes: s.cfg.JournalStepBytes, fail: s.cfg.JournalDivergence == DivergenceFail,
		metrics: s.metrics, log: log.With(slog.Int64("owner", owner)),
		recorded: map[string]history.Step{}, models: map[string]int{}, runs: 1,
	}
	if found == nil {
		return jr, nil
	}
	if found.Owner > owner {
		if found.Owner>>32 <= owner>>32 {
			return nil, fmt.Errorf("journal: owned by a newer run: %w", history.ErrFenced)
		}
		// A run of a later generation owns it: either this worker lost the
		// partition (a zombie: the new owner may be writing it), or the
		// consumer group was recreated and its generations started again
		// (the journal is an old group's). Nothing tells the two apart but
		// time: while the journal may still be written (its last write is
		// less than a run old), the record is retried, and a zombie stops
		// when its generation ends. Past that, no run that wrote it is
		// running: this run goes live without it, and never writes it.
		last := lastWrite(*found)
		if s.now().Sub(last) < s.cfg.RunTimeout {
			return nil, fmt.Errorf("%w (owner %d, last written %s)", errJournalAhead, found.Owner, last.Format(time.RFC3339))
		}
		log.Warn("journal: owned by a run of a later generation (the consumer group was recreated?) and not written for longer than a run: running without it",
			slog.Int64("journal_owner", found.Owner), slog.Int64("owner", owner), slog.Time("last_written", last))
		return nil, nil
	}
	runs, err := j.ClaimSteps(ctx, id, requestID, owner)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if runs > 0 { // else it was deleted meanwhile: nothing to replay
		jr.load(*found)
		jr.runs = runs
	}
	log.Info("journal found: replaying recorded steps", slog.Int("steps", len(found.Steps)), slog.Int("run", jr.runs))
	return jr, nil
}

// lastWrite is when a step of js was last recorded (zero: none is).
func lastWrite(js history.Steps) time.Time {
	var last time.Time
	for _, st := range js.Steps {
		if st.At.After(last) {
			last = st.At
		}
	}
	return last
}

// dropJournal deletes request requestID's journal when there is one
// (found not nil): the request reached its durable end. A failure is only
// logged: the journal expires (Config.JournalTTL), and a redelivery finds
// the request decided and deletes it then. It deletes with
// Config.JournalOff too: a journal written before the journal was turned
// off still goes at its request's end.
func (s *Step) dropJournal(ctx context.Context, store history.Store, id events.Identity, requestID string, owner int64, found *history.Steps, log *slog.Logger) {
	j, ok := store.(history.Journal)
	if !ok || found == nil {
		return
	}
	if err := j.DeleteSteps(ctx, id, requestID, owner); err != nil {
		log.Warn("journal: delete", slog.Any("error", err))
	}
}
