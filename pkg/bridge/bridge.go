package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// DefaultBufferSize is the default capacity of the buffer between the
// reader of the agent's events and the half that streams and persists them.
const DefaultBufferSize = 1000

// DefaultNotice is the notice streamed for a model error when Config.OnError
// is nil.
const DefaultNotice = "The model stopped with an error; the answer is incomplete."

// ErrAborted is returned by Handle.Wait after Handle.Abort.
var ErrAborted = errors.New("run aborted")

// ErrModelRetry is returned by Handle.Wait, wrapping the model's error, when
// the model failed before producing anything and Config.RetryModelError
// deemed the error worth retrying: nothing was persisted and no
// run.completed was emitted, so the caller may run the request again (with
// a new run id).
var ErrModelRetry = errors.New("model failed before any content; retry")

// Turn is the pending turn a run commits or discards; *history.Pending
// implements it. A plain Turn's Commit takes one answer of one agent: an
// answer of several parts (see Result.Parts) is given to it joined, under
// the last part's agent. Implement AnswerTurn to keep the parts apart.
type Turn interface {
	Commit(ctx context.Context, answer, agent string, status events.Status, at time.Time) (history.Committed, error)
	Discard()
}

// TransferTurn is a Turn told of the run's agent transfers, in order,
// before the bridge commits it (the worker's keeps the conversation's
// active agent with the turn).
type TransferTurn interface {
	Turn
	Transferred(from, to string)
}

// AnswerTurn is a Turn that also persists the run's token usage and
// interrupt, an interrupted answer without text, and an answer of several
// parts (history.Answer.Parts, one per agent's stretch of text);
// *history.Pending implements it. With a plain Turn, usage is not persisted and an
// interrupted run is persisted as incomplete (discarded when it has no
// text).
type AnswerTurn interface {
	Turn
	CommitAnswer(ctx context.Context, a history.Answer) (history.Committed, error)
}

// StateTurn is a Turn whose commit may change session state (the
// worker's is). After a commit that wrote the turn (not a duplicate: that
// run's changes are not the ones kept), the bridge emits state.changed
// with the keys it names, right before run.interrupted and run.completed;
// never when the run persisted nothing.
type StateTurn interface {
	Turn
	// StateChanged names the keys of the conversation and the user scopes
	// the committed turn set or deleted (without their prefix, sorted):
	// both empty when it changed none.
	StateChanged() (conversation, user []string)
}

// ArtifactTurn is a Turn whose commit publishes the artifacts the run's
// tools saved (the worker's is). After a commit that succeeded, a
// duplicate's included (a redelivery publishes the committed turn's
// manifest again), the bridge emits one artifact.saved per version it
// names, in order, right after the commit and before state.changed,
// run.interrupted and run.completed; never before the commit, never when
// the run persisted nothing or its commit failed.
type ArtifactTurn interface {
	Turn
	// PublishedArtifacts is the versions the commit published, in save
	// order: none before the commit.
	PublishedArtifacts() []events.ArtifactInfo
}

// Skip tells an OnSkip observer what the bridge left out and why.
type Skip struct {
	Source Source
	// Reason is one of "not-selected" (no predicate selected it),
	// "tool-call" (a tool-call message or a tool result), "action" (an agent
	// action such as a transfer or exit) and "empty" (no content).
	Reason string
}

// Config configures a Bridge.
type Config struct {
	// Sink receives the stream events of runs that do not bring their own
	// (Run.Sink). One of the two is required.
	Sink Sink
	// Stream selects the messages whose deltas are streamed; nil is the
	// default (see Predicate).
	Stream Predicate
	// Persist selects the messages that make the persisted answer; nil is
	// the default (see Predicate). Each contiguous stretch of one agent's
	// selected text is a part of the answer (Result.Parts), persisted as
	// an assistant message of its own.
	Persist Predicate
	// OnSkip, if set, observes every message or action left out. It is
	// called from the run's reader goroutine and must not block.
	OnSkip func(Skip)
	// OnError maps a model error to the notice streamed to clients. Default:
	// DefaultNotice. Notices are never persisted.
	OnError func(error) string
	// RetryModelError, if set, says whether a model error that happens
	// before any content is transient (a rate limit, an unreachable model
	// server): then the run ends with ErrModelRetry instead of completing
	// discarded. Default: never.
	RetryModelError func(error) bool
	// BufferSize bounds the buffer between the agent's event reader and the
	// streaming/persisting half. When it is full the reader waits: the
	// sink's pace bounds memory. Default DefaultBufferSize.
	BufferSize int
	// MaxDeltaBytes caps a token event's delta: deltas are coalesced up to
	// it, and a longer one is cut at rune boundaries. Default 4096.
	MaxDeltaBytes int
	// Now is the clock for event timestamps. Default time.Now.
	Now func() time.Time
	// Logger. Default: discard.
	Logger *slog.Logger
}

// Validate reports every configuration problem.
func (c Config) Validate() error {
	var errs []error
	if c.BufferSize < 0 {
		errs = append(errs, fmt.Errorf("bridge: BufferSize %d < 0", c.BufferSize))
	}
	if c.MaxDeltaBytes < 0 || c.MaxDeltaBytes > events.MaxDeltaBytes {
		errs = append(errs, fmt.Errorf("bridge: MaxDeltaBytes %d not in 0..%d", c.MaxDeltaBytes, events.MaxDeltaBytes))
	}
	return errors.Join(errs...)
}

// Bridge runs the split for many runs with one configuration.
type Bridge struct {
	cfg Config
}

// New returns a Bridge.
func New(cfg Config) (*Bridge, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Stream = orDefault(cfg.Stream)
	cfg.Persist = orDefault(cfg.Persist)
	if cfg.OnSkip == nil {
		cfg.OnSkip = func(Skip) {}
	}
	if cfg.OnError == nil {
		cfg.OnError = func(error) string { return DefaultNotice }
	}
	if cfg.BufferSize == 0 {
		cfg.BufferSize = DefaultBufferSize
	}
	if cfg.MaxDeltaBytes == 0 {
		cfg.MaxDeltaBytes = 4096
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Bridge{cfg: cfg}, nil
}

// Run describes one run of one request.
type Run struct {
	Identity  events.Identity
	RequestID string
	// RunID changes when a request is re-run after a worker failure.
	RunID string
	// Turn holds the pending user message. Required.
	Turn Turn
	// StopGeneration, if set, is called when the run is cancelled or
	// aborted, to stop the model (typically the cancel func of the context
	// the adk.Runner runs under). Without it a cancelled run still ends at
	// once, but the model keeps generating until it finishes on its own.
	StopGeneration func()
	// Sink, if set, receives this run's events instead of Config.Sink.
	Sink Sink
	// Agent, if set, is the sub-agent the run starts from (the agent the
	// conversation was left with): run.started says so.
	Agent string
}

// Result is how a run ended.
type Result struct {
	// Status is complete, incomplete, cancelled or discarded. A turn was
	// committed when Answer is not empty (Committed.N > 0); a run cancelled
	// before any content is cancelled with nothing committed.
	Status events.Status
	// Committed is the committed turn, when Status persisted one.
	Committed history.Committed
	// Answer is the persisted text, every part's joined ("" when
	// discarded).
	Answer string
	// Agent is the agent of the last persisted message.
	Agent string
	// Parts is the persisted answer, one part per contiguous stretch of
	// one agent's selected text, in order (A, then B, then A again is
	// three parts); each is persisted as an assistant message of its own.
	// At most history.MaxParts: a run whose text would start another part
	// ends its answer there, incomplete (the stream is not cut).
	Parts []history.Part
	// Tokens counts the deltas read from the model; Events the stream
	// events emitted, run.started and run.completed included.
	Tokens, Events int
	// ModelErr is the first model error (event or stream), if any.
	ModelErr error
	// Usage is the run's token usage: for each message of the run (each
	// model call), the usage it reported last, summed over the messages,
	// selected or not. Nil when the model reported none.
	Usage *schema.TokenUsage
	// UsageByAgent splits Usage by the agent whose messages reported it.
	UsageByAgent map[string]schema.TokenUsage
	// Interrupt is set when the run stopped to ask the user something
	// (Status interrupted): what it asked, and where it resumes.
	Interrupt *history.Interrupt
	// Transfers counts the agent.transfer events emitted.
	Transfers int
}

// Handle controls a started run.
type Handle struct {
	cancelOnce sync.Once
	cancel     chan struct{}
	abortOnce  sync.Once
	abort      chan struct{}
	done       chan struct{}
	stopGen    func()

	// set before done is closed
	res Result
	err error
}

// Cancel stops the run: the answer so far is persisted with status
// cancelled (with no answer yet nothing is persisted; the status is still
// cancelled) and run.completed is emitted.
// It returns at once; Wait reports the outcome.
func (h *Handle) Cancel() {
	h.cancelOnce.Do(func() {
		close(h.cancel)
		if h.stopGen != nil {
			h.stopGen()
		}
	})
}

// Abort stops the run and persists and emits nothing more; Wait returns
// ErrAborted. Used on shutdown past the drain deadline and by fenced
// (zombie) workers: the request will be redelivered and re-run.
func (h *Handle) Abort() {
	h.abortOnce.Do(func() {
		close(h.abort)
		if h.stopGen != nil {
			h.stopGen()
		}
	})
}

// Done is closed when the run has ended.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Wait waits for the run to end and for every goroutine it started. The
// error reports an infrastructure failure (the sink or the store); model
// errors are in Result.ModelErr with Status incomplete or discarded.
func (h *Handle) Wait() (Result, error) {
	<-h.done
	return h.res, h.err
}

// Run is Start followed by Wait.
func (b *Bridge) Run(ctx context.Context, run Run, iter *adk.AsyncIterator[*adk.AgentEvent]) (Result, error) {
	return b.Start(ctx, run, iter).Wait()
}

// Start begins consuming iter in the background. ctx provides values only:
// its cancellation is ignored (see the package doc).
func (b *Bridge) Start(ctx context.Context, run Run, iter *adk.AsyncIterator[*adk.AgentEvent]) *Handle {
	h := &Handle{
		cancel:  make(chan struct{}),
		abort:   make(chan struct{}),
		done:    make(chan struct{}),
		stopGen: run.StopGeneration,
	}
	r := &runner{
		cfg:   &b.cfg,
		run:   run,
		h:     h,
		ctx:   context.WithoutCancel(ctx),
		items: newItemQueue(b.cfg.BufferSize),
		quit:  make(chan struct{}),
	}
	sink := run.Sink
	if sink == nil {
		sink = b.cfg.Sink
	}
	if sink == nil {
		// A programming error: stop the agent (its iterator is unbounded,
		// so nothing blocks on the events left unread) and report it.
		run.Turn.Discard()
		if run.StopGeneration != nil {
			run.StopGeneration()
		}
		h.err = errors.New("bridge: no sink: set Config.Sink or Run.Sink")
		close(h.done)
		return h
	}
	r.emit = NewEmitter(sink, run.Identity, run.RequestID, run.RunID, b.cfg.Now)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.read(iter)
	}()
	go func() {
		res, err := r.coordinate()
		// The reader exits once the iterator ends or it sees quit: a push
		// to a full buffer returns once quit is closed.
		close(r.quit)
		wg.Wait()
		h.res, h.err = res, err
		close(h.done)
	}()
	return h
}

type itemKind uint8

const (
	itemDelta     itemKind = iota // a piece of a selected message
	itemToolCall                  // the current message turned out to be a tool call
	itemErr                       // a model error
	itemCutOff                    // the model cut the message off (length, content filter)
	itemUsage                     // token usage reported by the model
	itemTransfer                  // an agent handed over to another (text: the destination)
	itemInterrupt                 // the run stopped to ask the user something
)

// item is what the reader hands the coordinator.
type item struct {
	kind    itemKind
	msg     int // message index within the run
	text    string
	agent   string
	stream  bool
	persist bool
	err     error
	usage   *schema.TokenUsage
	intr    *history.Interrupt
}

type runner struct {
	cfg   *Config
	run   Run
	h     *Handle
	ctx   context.Context
	emit  *Emitter
	items *itemQueue
	quit  chan struct{} // closed when the coordinator has finished
}

// read walks the agent's events and hands selected content to the
// coordinator. It is the only goroutine that calls Next and Recv.
func (r *runner) read(iter *adk.AsyncIterator[*adk.AgentEvent]) {
	defer r.items.close()
	msg := 0
	for {
		ev, ok := iter.Next()
		if !ok {
			return
		}
		if ev == nil {
			continue
		}
		if ev.Err != nil {
			if !r.send(item{kind: itemErr, err: ev.Err, agent: ev.AgentName}) {
				return
			}
		}
		if ev.Action != nil {
			r.cfg.OnSkip(Skip{Source: Source{Agent: ev.AgentName}, Reason: "action"})
		}
		if ev.Output != nil && ev.Output.MessageOutput != nil {
			msg++
			if !r.output(ev, msg) {
				return
			}
		}
		// An action comes after the output of its event (the transfer
		// tool's result, the message before an interrupt).
		if a := ev.Action; a != nil {
			if a.TransferToAgent != nil && !r.send(item{kind: itemTransfer, agent: ev.AgentName, text: a.TransferToAgent.DestAgentName}) {
				return
			}
			if a.Interrupted != nil && !r.send(item{kind: itemInterrupt, agent: ev.AgentName, intr: interruptOf(ev.AgentName, a.Interrupted)}) {
				return
			}
		}
	}
}

// output hands the message of one event to the coordinator. It returns
// false when the coordinator has finished.
func (r *runner) output(ev *adk.AgentEvent, msg int) bool {
	mo := ev.Output.MessageOutput
	src := Source{Agent: ev.AgentName, Role: mo.Role}
	if src.Role == "" {
		src.Role = schema.Assistant
	}
	unused := item{kind: itemUsage, msg: msg, agent: ev.AgentName}
	if src.Role == schema.Tool {
		r.cfg.OnSkip(Skip{Source: src, Reason: "tool-call"})
		return r.usageOnly(unused, mo)
	}
	stream, persist := r.cfg.Stream(src), r.cfg.Persist(src)
	if !stream && !persist {
		r.cfg.OnSkip(Skip{Source: src, Reason: "not-selected"})
		return r.usageOnly(unused, mo)
	}
	base := item{kind: itemDelta, msg: msg, agent: ev.AgentName, stream: stream, persist: persist}
	if !mo.IsStreaming {
		return r.message(src, base, mo.Message, true)
	}
	return r.stream(src, base, mo.MessageStream)
}

// usageOnly reads a message that is not streamed or persisted (a tool
// result, another agent's text) only for the token usage it reports.
func (r *runner) usageOnly(base item, mo *adk.MessageVariant) bool {
	if !mo.IsStreaming {
		if m := mo.Message; m != nil && m.ResponseMeta != nil && m.ResponseMeta.Usage != nil {
			it := base
			it.usage = m.ResponseMeta.Usage
			return r.send(it)
		}
		return true
	}
	if mo.MessageStream == nil {
		return true
	}
	defer mo.MessageStream.Close()
	return r.drainUsage(base, mo.MessageStream)
}

// drainUsage reads s to its end, handing over only the usage its chunks
// report. The caller closes s.
func (r *runner) drainUsage(base item, s adk.MessageStream) bool {
	for {
		select {
		case <-r.quit:
			return false
		default:
		}
		m, err := s.Recv()
		if err != nil {
			return true // io.EOF, or an error the event reports as well
		}
		if m != nil && m.ResponseMeta != nil && m.ResponseMeta.Usage != nil {
			it := base
			it.usage = m.ResponseMeta.Usage
			if !r.send(it) {
				return false
			}
		}
	}
}

// stream reads one message stream to its end. It returns false when the
// coordinator has finished.
func (r *runner) stream(src Source, base item, s adk.MessageStream) bool {
	defer s.Close()
	for {
		select {
		case <-r.quit:
			return false
		default:
		}
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return true
		}
		if err != nil {
			return r.send(item{kind: itemErr, msg: base.msg, agent: base.agent, err: fmt.Errorf("stream recv: %w", err)})
		}
		if !r.message(src, base, m, false) {
			return false
		}
		if m != nil && len(m.ToolCalls) > 0 {
			// A tool-call message: drop the rest of it but its usage.
			// Whatever text it carried before the tool call was already
			// streamed; the coordinator removes it from the persisted
			// answer.
			return r.drainUsage(item{kind: itemUsage, msg: base.msg, agent: base.agent}, s)
		}
	}
}

// message hands one message or chunk to the coordinator.
func (r *runner) message(src Source, base item, m *schema.Message, whole bool) bool {
	if m == nil {
		return true
	}
	if len(m.ToolCalls) > 0 {
		r.cfg.OnSkip(Skip{Source: src, Reason: "tool-call"})
		if !r.send(item{kind: itemToolCall, msg: base.msg}) {
			return false
		}
		// A model may report its usage on the tool-call chunk itself (or
		// on a whole tool-call message): it counts like any other.
		if rm := m.ResponseMeta; rm != nil && rm.Usage != nil {
			return r.send(item{kind: itemUsage, msg: base.msg, agent: base.agent, usage: rm.Usage})
		}
		return true
	}
	if m.Content != "" {
		it := base
		it.text = m.Content
		if !r.send(it) {
			return false
		}
	} else if whole {
		r.cfg.OnSkip(Skip{Source: src, Reason: "empty"})
	}
	if rm := m.ResponseMeta; rm != nil {
		if rm.Usage != nil && !r.send(item{kind: itemUsage, msg: base.msg, agent: base.agent, usage: rm.Usage}) {
			return false
		}
		if rm.FinishReason == "length" || rm.FinishReason == "content_filter" {
			return r.send(item{kind: itemCutOff, msg: base.msg, err: fmt.Errorf("model cut the answer off: finish reason %q", rm.FinishReason)})
		}
	}
	return true
}

func (r *runner) send(it item) bool {
	return r.items.push(it, r.quit)
}

// coordinate streams and concatenates what the reader hands over, then
// commits or discards the turn and emits run.completed.
func (r *runner) coordinate() (Result, error) {
	var (
		res    Result
		answer answerParts
		// Where message curMsg starts: the answer's last part before it,
		// and that part's length then.
		msgPart, msgOff int
		capped          bool // a part beyond history.MaxParts was refused
		curMsg          int  // the message being persisted (messages count from 1)
		sinkErr         error
		incomplete      bool
		retry           bool // a transient model error before any content
		cancelled       bool
		pending         []item           // a batch drained from the buffer
		usage           = map[int]item{} // the last usage each message reported
	)
	ctx := r.ctx
	aborted := func() (Result, error) {
		r.run.Turn.Discard()
		res.Events = int(r.emit.Seq())
		return res, ErrAborted
	}
	emit := func(f func() error) {
		if sinkErr != nil {
			return
		}
		if err := f(); err != nil {
			sinkErr = fmt.Errorf("emit: %w", err)
		}
	}
	emit(func() error { return r.emit.StartedFrom(ctx, r.run.Agent) })
	tt, _ := r.run.Turn.(TransferTurn)
loop:
	for {
		// Take everything buffered, so deltas that piled up while the sink
		// was busy leave as one token event.
		batch, closed := r.items.take(pending)
		if len(batch) == 0 && closed {
			break
		}
		// An abort or a cancel comes before what the reader delivered with
		// it: both close their channel before they stop the generation, so
		// the error a stopped model reports ("context canceled") is their
		// consequence, and taking it first would end the run incomplete
		// (or, after an abort, persist it).
		if len(batch) > 0 {
			select {
			case <-r.h.abort:
				return aborted()
			case <-r.h.cancel:
				// The batch is left out, but not the usage the model
				// reported in it: those tokens were spent.
				for _, it := range batch {
					if it.kind == itemUsage {
						usage[it.msg] = it
					}
				}
				cancelled = true
				break loop
			default:
			}
		}
		// With nothing taken, wait for the reader; otherwise go on at once
		// (closedChan), unless abort or cancel is there too.
		next := closedChan
		if len(batch) == 0 {
			next = r.items.ready
		}
		select {
		case <-next:
		case <-r.h.abort:
			return aborted()
		case <-r.h.cancel:
			cancelled = true
			break loop
		}
		if len(batch) == 0 {
			continue
		}
		pending = batch
		var delta []byte
		var deltaAgent string
		flush := func() {
			if len(delta) > 0 {
				d, a := string(delta), deltaAgent
				emit(func() error { return r.emit.Token(ctx, d, a, string(schema.Assistant)) })
				delta = delta[:0]
			}
		}
		for _, it := range pending {
			switch it.kind {
			case itemDelta:
				res.Tokens++
				if it.persist && !capped {
					if it.msg != curMsg {
						curMsg = it.msg
						msgPart, msgOff = answer.mark()
					}
					if answer.add(it.agent, it.text) {
						res.Agent = it.agent
					} else {
						capped, incomplete = true, true
					}
				}
				if it.stream {
					if it.agent != deltaAgent {
						flush()
					}
					deltaAgent = it.agent
					// A delta longer than the cap (a whole message, a
					// large chunk) leaves in pieces cut at rune boundaries.
					for t := it.text; t != ""; {
						if len(delta)+len(t) <= r.cfg.MaxDeltaBytes {
							delta = append(delta, t...)
							break
						}
						if len(delta) > 0 {
							flush()
							continue
						}
						n := runeCut(t, r.cfg.MaxDeltaBytes)
						delta = append(delta, t[:n]...)
						flush()
						t = t[n:]
					}
				}
			case itemToolCall:
				if it.msg == curMsg {
					answer.cut(msgPart, msgOff)
				}
			case itemErr, itemCutOff:
				flush()
				incomplete = true
				if it.kind == itemErr && res.Tokens == 0 && res.ModelErr == nil &&
					r.cfg.RetryModelError != nil && r.cfg.RetryModelError(it.err) {
					retry = true
					res.ModelErr = it.err
					continue
				}
				if res.ModelErr != nil {
					// eino reports a failed stream twice: from Recv and as
					// an event error. One notice per run is enough.
					continue
				}
				res.ModelErr = it.err
				notice := r.cfg.OnError(it.err)
				emit(func() error { return r.emit.Notice(ctx, notice) })
				r.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "model error", slog.String("tenant", r.run.Identity.Tenant),
					slog.String("user", r.run.Identity.User), slog.String("conversation", r.run.Identity.Conversation),
					slog.String("request_id", r.run.RequestID), slog.String("run_id", r.run.RunID), slog.Any("error", it.err))
			case itemUsage:
				usage[it.msg] = it
			case itemTransfer:
				flush()
				from, to := it.agent, it.text
				res.Transfers++
				if tt != nil {
					tt.Transferred(from, to)
				}
				emit(func() error { return r.emit.Transfer(ctx, from, to) })
			case itemInterrupt:
				flush()
				if res.Interrupt == nil {
					res.Interrupt = it.intr
				} else {
					// Several interrupts in one run (parallel tool calls):
					// one answer resumes them all.
					res.Interrupt.Targets = append(res.Interrupt.Targets, it.intr.Targets...)
				}
			}
		}
		flush()
	}
	res.Usage, res.UsageByAgent = sumUsage(usage)

	if retry && res.Tokens == 0 && !cancelled {
		r.run.Turn.Discard()
		res.Events = int(r.emit.Seq())
		return res, errors.Join(fmt.Errorf("%w: %w", ErrModelRetry, res.ModelErr), sinkErr)
	}
	at, canCommit := r.run.Turn.(AnswerTurn)
	interrupted := res.Interrupt != nil && !cancelled && !incomplete && canCommit
	if res.Interrupt != nil && !interrupted {
		// An error or a cancel overrides the interrupt: the run cannot be
		// resumed, and ends as it would without it.
		res.Interrupt = nil
		incomplete = incomplete || !cancelled
	}
	switch {
	case interrupted:
		res.Status = events.StatusInterrupted
	case answer.empty() && cancelled:
		// Cancelled before any content: nothing to persist, but the
		// client asked for the cancel and is told so.
		r.run.Turn.Discard()
		res.Status = events.StatusCancelled
	case answer.empty():
		r.run.Turn.Discard()
		res.Status = events.StatusDiscarded
	case cancelled:
		res.Status = events.StatusCancelled
	case incomplete:
		res.Status = events.StatusIncomplete
	default:
		res.Status = events.StatusComplete
	}
	if !answer.empty() || interrupted {
		res.Parts = answer.parts()
		res.Answer = answer.joined()
		if len(res.Parts) > 0 {
			res.Agent = res.Parts[len(res.Parts)-1].Agent
		}
		if res.Agent == "" && interrupted {
			res.Agent = res.Interrupt.Agent
		}
		var c history.Committed
		var err error
		if canCommit {
			a := history.Answer{Text: res.Answer, Agent: res.Agent, Status: res.Status,
				At: r.cfg.Now(), Usage: toEventsUsage(res.Usage), Interrupt: res.Interrupt}
			if len(res.Parts) > 1 {
				a.Text, a.Agent, a.Parts = "", "", res.Parts
			}
			c, err = at.CommitAnswer(ctx, a)
		} else {
			c, err = r.run.Turn.Commit(ctx, res.Answer, res.Agent, res.Status, r.cfg.Now())
		}
		if err != nil {
			res.Events = int(r.emit.Seq())
			return res, errors.Join(fmt.Errorf("commit turn: %w", err), sinkErr)
		}
		res.Committed = c
		res.Status = c.Status // a duplicate reports the status first committed
	}
	// The commit published the run's artifacts (a duplicate's, the
	// committed turn's): each version is announced, after the commit only.
	if at, ok := r.run.Turn.(ArtifactTurn); ok && res.Committed.N > 0 {
		for _, a := range at.PublishedArtifacts() {
			emit(func() error { return r.emit.ArtifactSaved(ctx, a) })
		}
	}
	// Only a turn this run wrote changed state: nothing for a run that
	// persisted nothing, nor for a duplicate (the earlier run's turn, and
	// its changes, are the ones kept).
	if st, ok := r.run.Turn.(StateTurn); ok && res.Committed.N > 0 && !res.Committed.Duplicate {
		if conv, user := st.StateChanged(); len(conv)+len(user) > 0 {
			emit(func() error { return r.emit.StateChanged(ctx, conv, user) })
		}
	}
	if res.Status == events.StatusInterrupted && res.Interrupt != nil {
		in := events.Interrupt{Agent: res.Interrupt.Agent, Tool: res.Interrupt.Tool, Question: res.Interrupt.Question}
		emit(func() error { return r.emit.Interrupted(ctx, in) })
	}
	emit(func() error { return r.emit.CompletedWithUsage(ctx, res.Status, toEventsUsage(res.Usage)) })
	res.Events = int(r.emit.Seq())
	return res, sinkErr
}

// answerParts is the persisted answer being built: one part per
// contiguous stretch of one agent's text.
type answerParts struct {
	agents []string
	texts  [][]byte
}

// add appends text of agent: to the last part when that is agent's, else
// as a new part. It reports false, adding nothing, when that part would
// be one more than history.MaxParts.
func (a *answerParts) add(agent, text string) bool {
	n := len(a.agents)
	if n == 0 || a.agents[n-1] != agent {
		if n == history.MaxParts {
			return false
		}
		a.agents, a.texts = append(a.agents, agent), append(a.texts, nil)
		n++
	}
	a.texts[n-1] = append(a.texts[n-1], text...)
	return true
}

// mark is where the answer ends now: its last part (-1: none) and that
// part's length, for cut.
func (a *answerParts) mark() (part, off int) {
	n := len(a.agents)
	if n == 0 {
		return -1, 0
	}
	return n - 1, len(a.texts[n-1])
}

// cut takes the answer back to a mark: what was added since is dropped.
func (a *answerParts) cut(part, off int) {
	a.agents, a.texts = a.agents[:part+1], a.texts[:part+1]
	if part >= 0 {
		a.texts[part] = a.texts[part][:off]
	}
}

func (a *answerParts) empty() bool { return len(a.agents) == 0 }

func (a *answerParts) parts() []history.Part {
	out := make([]history.Part, len(a.agents))
	for i := range a.agents {
		out[i] = history.Part{Agent: a.agents[i], Text: string(a.texts[i])}
	}
	return out
}

func (a *answerParts) joined() string {
	var b []byte
	for _, t := range a.texts {
		b = append(b, t...)
	}
	return string(b)
}

// runeCut returns where to cut s, longer than n bytes, to keep at most n
// bytes at a rune boundary: never 0, so a cap below a rune's size still
// moves on by one whole rune.
func runeCut(s string, n int) int {
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if cut == 0 {
		_, cut = utf8.DecodeRuneInString(s)
	}
	return cut
}

// sumUsage adds up the last usage each message reported, in total and by
// agent. Both are nil when no message reported any.
func sumUsage(byMsg map[int]item) (*schema.TokenUsage, map[string]schema.TokenUsage) {
	if len(byMsg) == 0 {
		return nil, nil
	}
	total := &schema.TokenUsage{}
	byAgent := make(map[string]schema.TokenUsage)
	for _, it := range byMsg {
		u := it.usage
		total.PromptTokens += u.PromptTokens
		total.CompletionTokens += u.CompletionTokens
		total.TotalTokens += u.TotalTokens
		a := byAgent[it.agent]
		a.PromptTokens += u.PromptTokens
		a.CompletionTokens += u.CompletionTokens
		a.TotalTokens += u.TotalTokens
		byAgent[it.agent] = a
	}
	return total, byAgent
}

func toEventsUsage(u *schema.TokenUsage) *events.Usage {
	if u == nil {
		return nil
	}
	return &events.Usage{PromptTokens: int64(u.PromptTokens), CompletionTokens: int64(u.CompletionTokens), TotalTokens: int64(u.TotalTokens)}
}
