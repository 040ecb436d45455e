package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// Durable makes the ChatModelAgent of cfg durable on Turnpike: it adds the
// handler that journals the agent's steps while a request runs (each
// model output that asks for tools, each tool result) and replays them
// when the request runs again, so that a re-run after a crash, a moved
// partition or a retry does not call the model or run the tool again for a
// step already done. Apply it to the supervisor and to each sub-agent:
//
//	agent, err := adk.NewChatModelAgent(ctx, worker.Durable(&adk.ChatModelAgentConfig{…}))
//
// It reads cfg.Name (each agent's steps are keyed by its name), so call it
// on a config whose Name is set. transfer_to_agent and exit (they act on
// eino's run state) and ask_user (AskUser: it reads its resume state) run
// on every run and are never journaled; alwaysRun names more such tools.
// A tool that returns an error is not journaled (an interrupt is one), so
// an interrupting tool of your own is handled without naming it. Durable
// returns cfg.
//
// Outside a worker's run (or with Config.JournalOff, or a store that is not
// a history.Journal) the handler does nothing. The agents of the agent
// file are durable without it. See ToolStepFromContext for what stays at
// least once.
func Durable(cfg *adk.ChatModelAgentConfig, alwaysRun ...string) *adk.ChatModelAgentConfig {
	cfg.Handlers = append(cfg.Handlers, newDurableHandler(cfg.Name, alwaysRun))
	return cfg
}

// ToolStep identifies one tool call of a durable run (see Durable), so
// that a tool with a side effect can deduplicate it at its own service.
// The journal makes a tool run once per request but for two windows: a
// tool killed while it runs, or after its side effect and before its
// result was recorded, runs again on the request's next run, with the same
// Key.
type ToolStep struct {
	// Key is the same on every run of the request that replays the model
	// output that asked for the tool: the request id, the agent, the
	// ordinal of the model call and the tool call's id, which the model
	// chose (for an agent used as a tool, after the key of the tool call
	// that runs it). A model output the journal did not keep (over the step or
	// journal limit, or expired with the journal) is generated again on
	// a re-run, and a model may then choose other call ids: key such a
	// side effect on the request (RequestFromContext) and its own
	// arguments as well.
	Key string
	// Attempt is the run's number among the runs of the request that
	// found its journal or wrote it (1 for the first). Above 1, the step
	// may have run before. 1 means only that this run found no journal:
	// a request whose journal was not kept (a step over a limit, the
	// journal expired or deleted) starts at 1 again. Deduplicate on Key;
	// Attempt is for logs and metrics.
	Attempt int
}

// ToolStepFromContext returns the step of the tool call ctx belongs to: the
// worker puts it in the context of every journaled tool call of a durable
// agent's run (not in transfer_to_agent's, exit's or the alwaysRun tools').
func ToolStepFromContext(ctx context.Context) (ToolStep, bool) {
	s, ok := ctx.Value(toolStepKey{}).(ToolStep)
	return s, ok
}

type toolStepKey struct{}

// Divergence policies of a replay whose inputs differ from the journal's
// (Config.JournalDivergence).
const (
	// DivergenceLive drops the journal's steps from the divergent one on
	// and runs live from there.
	DivergenceLive = "live"
	// DivergenceFail fails the request (dead-lettered, completed failed).
	DivergenceFail = "fail"
)

// errStepRaced means a step this run made live was recorded first by
// another run of the request (a newer owner's is fenced; this one is
// newer): the run stops and its next attempt replays the recorded step.
var errStepRaced = errors.New("journal: the step was recorded first by another run of the request")

// errJournalAhead means the request's journal is owned by a run of a
// later consumer-group generation and was written less than a run ago
// (openJournal): the record is retried, neither dropped nor run.
var errJournalAhead = errors.New("journal: owned by a run of a later generation, written less than a run ago (this worker lost the partition, or the consumer group was recreated): retried")

// errDiverged is a replay's input that differs from the journal's, under
// DivergenceFail.
var errDiverged = errors.New("journal: the run's inputs differ from its journal")

// journalRun is the journal of one run of a request: what the run found
// recorded (replayed instead of done again) and what it records. Its
// methods are safe for concurrent use (eino runs a round's tools at once).
type journalRun struct {
	j         history.Journal
	id        events.Identity
	requestID string
	owner     int64
	limits    history.JournalLimits
	stepBytes int
	fail      bool // DivergenceFail
	metrics   *metrics
	log       *slog.Logger

	mu       sync.Mutex // guards the fields below
	recorded map[string]history.Step
	order    []string       // recorded's keys in the journal's order
	models   map[string]int // each agent's completed model calls, by scope and agent
	runs     int            // this run's number
	touched  bool           // the journal exists (found or written): delete it at the end
	failed   error          // a journal write failed: the run stops with it
	abort    func()         // aborts the run (the bridge handle's Abort)
}

type journalKey struct{}

// withJournal returns ctx carrying jr.
func withJournal(ctx context.Context, jr *journalRun) context.Context {
	return context.WithValue(ctx, journalKey{}, jr)
}

func journalFrom(ctx context.Context) *journalRun {
	jr, _ := ctx.Value(journalKey{}).(*journalRun)
	return jr
}

// load takes the steps a run found recorded.
func (jr *journalRun) load(js history.Steps) {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	for _, s := range js.Steps {
		jr.recorded[s.Key] = s
		jr.order = append(jr.order, s.Key)
	}
	jr.touched = true
}

// setAbort gives jr the run's abort; a journal write that failed before
// the run's handle existed aborts it now.
func (jr *journalRun) setAbort(abort func()) {
	jr.mu.Lock()
	jr.abort = abort
	failed := jr.failed
	jr.mu.Unlock()
	if failed != nil {
		abort()
	}
}

// err is the failure that stopped the run, if a journal write did.
func (jr *journalRun) err() error {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	return jr.failed
}

// stop makes err the run's end: the run is aborted (nothing is persisted;
// the worker retries the record, or drops it when err is fenced), and stop
// returns once the abort reached ctx, so that the agent sees the run
// stopped, not an error of its own to report.
func (jr *journalRun) stop(ctx context.Context, err error) error {
	jr.mu.Lock()
	if jr.failed == nil {
		jr.failed = err
	}
	abort := jr.abort
	jr.mu.Unlock()
	if abort != nil {
		abort()
	}
	<-ctx.Done()
	return err
}

// record writes step s (before its effect is used). A step over the caps
// is not recorded: it stays at least once. It returns an error when the
// run must stop.
func (jr *journalRun) record(ctx context.Context, kind string, s history.Step) error {
	if err := ctx.Err(); err != nil {
		return err // the run is stopping: it records nothing more
	}
	if len(s.Data)+len(s.State) > jr.stepBytes {
		jr.skipped(kind, "step", len(s.Data)+len(s.State))
		return nil
	}
	got, err := jr.j.RecordStep(ctx, jr.id, jr.requestID, jr.owner, s, jr.limits)
	switch {
	case errors.Is(err, history.ErrJournalFull):
		jr.skipped(kind, "journal", len(s.Data))
		return nil
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return jr.stop(ctx, fmt.Errorf("journal %s step: %w", kind, err))
	case got.Owner != jr.owner:
		return jr.stop(ctx, errStepRaced)
	case got.Hash != s.Hash:
		// Another call of this run recorded the key for another input:
		// the key does not tell the two apart (a model that gave two
		// calls of one round the same id). Recording neither over the
		// other, this call's result is used unrecorded (it runs again
		// on a re-run, whose lookup diverges there) or, under
		// DivergenceFail, the run fails.
		return jr.collided(ctx, kind, s.Key)
	}
	jr.metrics.journalSteps.WithLabelValues(kind, "recorded").Inc()
	jr.mu.Lock()
	if _, ok := jr.recorded[s.Key]; !ok {
		jr.order = append(jr.order, s.Key)
	}
	jr.recorded[s.Key] = got
	jr.touched = true
	jr.mu.Unlock()
	return ctx.Err()
}

// collided handles a step key that another call of this run recorded for
// another input: a divergence within the run.
func (jr *journalRun) collided(ctx context.Context, kind, key string) error {
	jr.metrics.journalDivergences.Inc()
	jr.log.Warn("journal: another call of the run recorded the step for another input: this call's is not recorded",
		slog.String("kind", kind), slog.String("step", key),
		slog.String("policy", map[bool]string{true: DivergenceFail, false: DivergenceLive}[jr.fail]))
	if jr.fail {
		return jr.stop(ctx, Permanent(fmt.Errorf("%w at step %s: two calls of the run, one key", errDiverged, key)))
	}
	return ctx.Err()
}

func (jr *journalRun) skipped(kind, limit string, size int) {
	jr.metrics.journalSkipped.WithLabelValues(kind).Inc()
	jr.log.Warn("journal: step not recorded, over the "+limit+" limit: it will run again if the request does",
		slog.String("kind", kind), slog.Int("bytes", size))
}

// lookup returns the step recorded under key, if any, after checking
// that it was recorded for the same input: a step recorded for another
// input (the run diverged) is dropped from the journal with every step
// after it (DivergenceLive), or fails the run (DivergenceFail).
func (jr *journalRun) lookup(ctx context.Context, kind, key, hash string) (*history.Step, error) {
	jr.mu.Lock()
	s, ok := jr.recorded[key]
	jr.mu.Unlock()
	if !ok {
		return nil, nil
	}
	if s.Hash == hash {
		jr.metrics.journalSteps.WithLabelValues(kind, "replayed").Inc()
		return &s, nil
	}
	jr.metrics.journalDivergences.Inc()
	jr.log.Warn("journal: the run's input differs from its recorded step", slog.String("step", key),
		slog.String("policy", map[bool]string{true: DivergenceFail, false: DivergenceLive}[jr.fail]))
	if jr.fail {
		return nil, jr.stop(ctx, Permanent(fmt.Errorf("%w at step %s", errDiverged, key)))
	}
	jr.mu.Lock()
	i := slices.Index(jr.order, key)
	if i < 0 {
		// Another call's divergence, at an earlier step, truncated the
		// journal meanwhile: the run is live from there already.
		jr.mu.Unlock()
		return nil, nil
	}
	for _, k := range jr.order[i:] {
		delete(jr.recorded, k)
	}
	jr.order = jr.order[:i]
	jr.mu.Unlock()
	if err := jr.j.TruncateSteps(ctx, jr.id, jr.requestID, jr.owner, i); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, jr.stop(ctx, fmt.Errorf("journal: truncate at %s: %w", key, err))
	}
	return nil, nil
}

// stepScopeKey is the context key of the journal key of the tool call
// the context belongs to (see withStepScope).
type stepScopeKey struct{}

// withStepScope returns ctx inside journaled tool call key: the steps of a
// durable agent that the tool runs (adk.NewAgentTool) are keyed under it.
func withStepScope(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, stepScopeKey{}, key)
}

// stepScope is the prefix of the keys of the steps run in ctx: "" at the
// run's top level (the keys of existing journals), "<tool key>/" inside a
// journaled tool call. A durable agent used as a tool thus counts its
// model calls per call of the tool: a replayed call skips its steps
// without shifting the next call's, and two parallel calls do not share
// keys.
func stepScope(ctx context.Context) string {
	if s, _ := ctx.Value(stepScopeKey{}).(string); s != "" {
		return s + "/"
	}
	return ""
}

// modelKey is the key of agent's next model call in scope; done counts
// it completed.
func (jr *journalRun) modelKey(scope, agent string) (key string, done func()) {
	jr.mu.Lock()
	k := jr.models[scope+agent] + 1
	jr.mu.Unlock()
	return fmt.Sprintf("%sm/%s/%d", scope, agent, k), func() {
		jr.mu.Lock()
		jr.models[scope+agent] = k
		jr.mu.Unlock()
	}
}

// toolKey is the key of tool call callID, asked for by agent's latest
// completed model call in scope.
func (jr *journalRun) toolKey(scope, agent, callID string) string {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	return fmt.Sprintf("%st/%s/%d/%s", scope, agent, jr.models[scope+agent], callID)
}

// exists reports whether the request has a journal: found at the start,
// or written by this run.
func (jr *journalRun) exists() bool {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	return jr.touched
}

func (jr *journalRun) attempt() int {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	return jr.runs
}

// durableHandler is Durable's ChatModelAgent handler: it wraps the
// agent's model and invokable tools. It keeps no state of its own (the
// run's journal comes in the context), so one agent may serve many runs.
type durableHandler struct {
	*adk.BaseChatModelAgentMiddleware
	agent     string
	alwaysRun map[string]bool
}

func newDurableHandler(agent string, alwaysRun []string) *durableHandler {
	h := &durableHandler{BaseChatModelAgentMiddleware: &adk.BaseChatModelAgentMiddleware{}, agent: agent,
		alwaysRun: map[string]bool{adk.TransferToAgentToolName: true, adk.ToolInfoExit.Name: true, toolAskUser: true}}
	for _, n := range alwaysRun {
		h.alwaysRun[n] = true
	}
	return h
}

// WrapModel answers a recorded model call from the journal, and records a
// live one that asks for tools before its output ends.
func (h *durableHandler) WrapModel(ctx context.Context, m model.BaseChatModel, mc *adk.ModelContext) (model.BaseChatModel, error) {
	jr := journalFrom(ctx)
	if jr == nil {
		return m, nil
	}
	var tools []string
	if mc != nil {
		for _, t := range mc.Tools {
			tools = append(tools, t.Name)
		}
	}
	return &journalModel{inner: m, jr: jr, agent: h.agent, tools: tools}, nil
}

// WrapInvokableToolCall answers a recorded tool call from the journal, and
// records a live one's result before returning it.
func (h *durableHandler) WrapInvokableToolCall(_ context.Context, endpoint adk.InvokableToolCallEndpoint, tc *adk.ToolContext) (adk.InvokableToolCallEndpoint, error) {
	if h.alwaysRun[tc.Name] {
		return endpoint, nil
	}
	return func(ctx context.Context, args string, opts ...tool.Option) (string, error) {
		jr := journalFrom(ctx)
		if jr == nil {
			return endpoint(ctx, args, opts...)
		}
		key, hash := jr.toolKey(stepScope(ctx), h.agent, tc.CallID), hashOf(tc.Name, args)
		rec, err := jr.lookup(ctx, "tool", key, hash)
		if err != nil {
			return "", err
		}
		st := StateFromContext(ctx)
		if rec != nil {
			// The state the call changed in its first run is changed
			// again, as if it ran.
			if err := st.replay(rec.State); err != nil {
				return "", err
			}
			// So are the artifacts it saved (staged then, under these
			// tokens): they join the run's manifest without a new save.
			ArtifactsFromContext(ctx).replay(rec.Artifacts)
			return string(rec.Data), nil
		}
		// The call's changes of the session state are journaled with its
		// result, in the same step.
		view, changes := st.recording()
		if view != nil {
			ctx = withState(ctx, view)
		}
		artsView, saves := ArtifactsFromContext(ctx).recording()
		if artsView != nil {
			ctx = withArtifacts(ctx, artsView)
		}
		out, err := endpoint(withStepScope(context.WithValue(ctx, toolStepKey{}, ToolStep{Key: jr.requestID + "/" + key, Attempt: jr.attempt()}), key), args, opts...)
		if err != nil {
			return out, err // not recorded: an interrupt is an error too
		}
		state, err := changes.encode()
		if err != nil {
			return "", fmt.Errorf("journal: encode the state of step %s: %w", key, err)
		}
		if err := jr.record(ctx, "tool", history.Step{Key: key, Hash: hash, Data: []byte(out), State: state, Artifacts: saves.recorded()}); err != nil {
			return "", err
		}
		return out, nil
	}, nil
}

// journalModel is one model call of a durable run.
type journalModel struct {
	inner model.BaseChatModel
	jr    *journalRun
	agent string
	tools []string
}

// begin finds the call's step: its key, its input's hash and, when it is
// recorded for that input, the recorded output.
func (m *journalModel) begin(ctx context.Context, in []*schema.Message) (key, hash string, done func(), replay *schema.Message, err error) {
	key, done = m.jr.modelKey(stepScope(ctx), m.agent)
	hash = hashModelInput(in, m.tools)
	rec, err := m.jr.lookup(ctx, "model", key, hash)
	if err != nil || rec == nil {
		return key, hash, done, nil, err
	}
	var msg schema.Message
	if err := json.Unmarshal(rec.Data, &msg); err != nil {
		return key, hash, done, nil, fmt.Errorf("journal: decode step %s: %w", key, err)
	}
	done()
	return key, hash, done, &msg, nil
}

// end records out if it asks for tools (a final answer is not journaled:
// the turn's commit records it) and counts the call completed.
func (m *journalModel) end(ctx context.Context, key, hash string, done func(), out *schema.Message) error {
	if len(out.ToolCalls) > 0 {
		data, err := json.Marshal(out)
		if err != nil {
			return fmt.Errorf("journal: encode step %s: %w", key, err)
		}
		if err := m.jr.record(ctx, "model", history.Step{Key: key, Hash: hash, Data: data}); err != nil {
			return err
		}
	}
	done()
	return nil
}

func (m *journalModel) Generate(ctx context.Context, in []*schema.Message, opts ...model.Option) (*schema.Message, error) {
	key, hash, done, replay, err := m.begin(ctx, in)
	if err != nil {
		return nil, err
	}
	if replay != nil {
		return replay, nil
	}
	out, err := m.inner.Generate(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	if err := m.end(ctx, key, hash, done, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Stream streams a live output's chunks as they come and holds back the
// end of the stream until the output is recorded: eino runs the tools of
// a streamed output only once it has the whole message, so no tool starts
// before the output that asked for it is durable. A replayed output is
// streamed as its text, then its tool calls with its recorded usage.
func (m *journalModel) Stream(ctx context.Context, in []*schema.Message, opts ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	key, hash, done, replay, err := m.begin(ctx, in)
	if err != nil {
		return nil, err
	}
	if replay != nil {
		return replayStream(replay), nil
	}
	src, err := m.inner.Stream(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	r, w := schema.Pipe[*schema.Message](1)
	// The goroutine ends with src: at its end, or when the reader is
	// closed (its next Send reports it).
	go func() {
		defer w.Close()
		defer src.Close()
		var chunks []*schema.Message
		for {
			c, err := src.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				w.Send(nil, err)
				return
			}
			chunks = append(chunks, c)
			if w.Send(c, nil) {
				return
			}
		}
		if len(chunks) == 0 {
			done() // an empty answer: nothing to record
			return
		}
		out, err := schema.ConcatMessages(chunks)
		if err == nil {
			err = m.end(ctx, key, hash, done, out)
		}
		if err != nil {
			w.Send(nil, err)
		}
	}()
	return r, nil
}

// replayStream streams a recorded output: its text (so that it is streamed
// again under the new run id), then its tool calls and response metadata
// (the recorded usage).
func replayStream(msg *schema.Message) *schema.StreamReader[*schema.Message] {
	var chunks []*schema.Message
	rest := *msg
	if msg.Content != "" {
		chunks = append(chunks, &schema.Message{Role: msg.Role, Content: msg.Content, Name: msg.Name, Extra: msg.Extra})
		rest.Content, rest.Extra = "", nil
	}
	return schema.StreamReaderFromArray(append(chunks, &rest))
}

// hashModelInput fingerprints what identifies a model call's step, not the
// conversation's history: the system messages (the agent's instruction;
// not the worker's summary of the history), the tools offered, and the
// messages from the last user message on (the request's own message, or
// the context eino gives an agent after a transfer or as a tool, and the
// steps after it), each message's role, content, name, tool call id and
// tool calls. The window before the last user message is left out:
// compaction may rewrite it between two runs of a request (a summarizer
// that failed in one and not the other, a summary saved in neither) when
// nothing about the request or the agent changed. Any step before it
// that changed diverged first (its own input or output is in the journal).
func hashModelInput(in []*schema.Message, tools []string) string {
	type call struct{ ID, Name, Args string }
	type msg struct {
		Role, Content, Name, ToolCallID string
		Calls                           []call
	}
	last := -1 // the last user message
	for i, m := range in {
		if m != nil && m.Role == schema.User {
			last = i
		}
	}
	ms := make([]msg, 0, len(in))
	for i, m := range in {
		if m == nil || i < last && (m.Role != schema.System || strings.HasPrefix(m.Content, summaryPrefix)) {
			continue
		}
		x := msg{Role: string(m.Role), Content: m.Content, Name: m.Name, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			x.Calls = append(x.Calls, call{c.ID, c.Function.Name, c.Function.Arguments})
		}
		ms = append(ms, x)
	}
	tools = slices.Sorted(slices.Values(tools))
	b, _ := json.Marshal(struct {
		M []msg
		T []string
	}{ms, tools})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// hashOf fingerprints a tool call: the tool and its arguments.
func hashOf(name, args string) string {
	sum := sha256.Sum256([]byte(name + "\x00" + args))
	return hex.EncodeToString(sum[:])
}
