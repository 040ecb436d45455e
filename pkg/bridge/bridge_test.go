package bridge_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

var testID = events.Identity{Tenant: "acme", User: "u1", Conversation: "c1"}

func newBridge(t *testing.T, sink bridge.Sink, mod func(*bridge.Config)) *bridge.Bridge {
	t.Helper()
	cfg := bridge.Config{Sink: sink}
	if mod != nil {
		mod(&cfg)
	}
	b, err := bridge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// summary of a run's events: the streamed text, the notices, the final status.
type summary struct {
	text     string
	notices  int
	status   events.Status
	tokens   int
	hasFinal bool
}

func summarize(t *testing.T, evs []events.Event, runID string) summary {
	t.Helper()
	var s summary
	for i, e := range evs {
		m := e.Header()
		if m.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d, want %d (contiguous from 1)", i, m.Seq, i+1)
		}
		if m.RequestID != "req-1" || m.RunID != runID || m.Conversation != testID.Conversation || m.TS <= 0 {
			t.Fatalf("event %d meta %+v lacks request_id/run_id/conversation/ts", i, m)
		}
		if s.hasFinal {
			t.Fatalf("event %d (%s) after run.completed", i, e.Type())
		}
		switch e := e.(type) {
		case *events.RunStartedEvent:
			if i != 0 {
				t.Fatalf("run.started at position %d", i)
			}
		case *events.TokenEvent:
			if e.Role != "assistant" || e.Delta == "" {
				t.Fatalf("bad token event %+v", e)
			}
			s.text += e.Delta
			s.tokens++
		case *events.NoticeEvent:
			s.notices++
		case *events.RunCompletedEvent:
			s.status, s.hasFinal = e.Status, true
		}
		if _, err := events.DecodeEvent(events.MarshalEvent(e)); err != nil {
			t.Fatalf("event %d does not survive the wire: %v", i, err)
		}
	}
	return s
}

func TestRunGuarantees(t *testing.T) {
	t.Parallel()
	boom := errors.New("model exploded")
	tests := []struct {
		name         string
		steps        []step
		wantStreamed string
		wantNotices  int
		wantStatus   events.Status
		wantPersist  string // "" means the turn must be discarded
		wantTokens   int    // Result.Tokens: the deltas read from the model
	}{
		{
			name:         "a streamed answer is streamed and persisted complete",
			steps:        []step{{agent: "a", chunks: []*schema.Message{text("Hello "), text("there "), text("world")}}},
			wantStreamed: "Hello there world", wantStatus: events.StatusComplete, wantPersist: "Hello there world", wantTokens: 3,
		},
		{
			name:         "a non-streamed answer is streamed as one delta and persisted complete",
			steps:        []step{{agent: "a", whole: text("all at once")}},
			wantStreamed: "all at once", wantStatus: events.StatusComplete, wantPersist: "all at once", wantTokens: 1,
		},
		{
			name:         "an error from the stream's Recv persists the partial answer as incomplete with one notice",
			steps:        []step{{agent: "a", chunks: []*schema.Message{text("half "), text("an ")}, recvErr: boom}, {agent: "a", err: boom}},
			wantStreamed: "half an ", wantNotices: 1, wantStatus: events.StatusIncomplete, wantPersist: "half an ", wantTokens: 2,
		},
		{
			name:         "an event error after content persists the answer as incomplete",
			steps:        []step{{agent: "a", chunks: []*schema.Message{text("partial")}}, {agent: "a", err: boom}},
			wantStreamed: "partial", wantNotices: 1, wantStatus: events.StatusIncomplete, wantPersist: "partial", wantTokens: 1,
		},
		{
			name:        "an error before any content persists nothing, not even the user message",
			steps:       []step{{agent: "a", err: boom}},
			wantNotices: 1, wantStatus: events.StatusDiscarded,
		},
		{
			name:       "an empty stream persists nothing",
			steps:      []step{{agent: "a", chunks: []*schema.Message{}}},
			wantStatus: events.StatusDiscarded,
		},
		{
			name:       "no events at all persists nothing",
			wantStatus: events.StatusDiscarded,
		},
		{
			name:         "a stream cut off at the length limit is incomplete",
			steps:        []step{{agent: "a", chunks: []*schema.Message{text("cut "), finish("off", "length")}}},
			wantStreamed: "cut off", wantNotices: 1, wantStatus: events.StatusIncomplete, wantPersist: "cut off", wantTokens: 2,
		},
		{
			name: "tool calls and tool results are neither streamed nor persisted",
			steps: []step{
				{agent: "a", chunks: []*schema.Message{toolCall()}},
				{agent: "a", role: schema.Tool, whole: schema.ToolMessage("12:00", "call-1")},
				{agent: "a", whole: toolCall()},
				{agent: "a", chunks: []*schema.Message{text("It is "), finish("noon", "stop")}},
			},
			wantStreamed: "It is noon", wantStatus: events.StatusComplete, wantPersist: "It is noon", wantTokens: 2,
		},
		{
			name: "text before a tool call in the same message is streamed but not persisted",
			steps: []step{
				{agent: "a", chunks: []*schema.Message{text("let me check "), toolCall()}},
				{agent: "a", chunks: []*schema.Message{text("done")}},
			},
			wantStreamed: "let me check done", wantStatus: events.StatusComplete, wantPersist: "done", wantTokens: 2,
		},
		{
			name: "the rest of a tool-call message after the call is neither streamed nor persisted",
			steps: []step{
				{agent: "a", chunks: []*schema.Message{toolCall(), text("stray text"), finish("", "length")}},
				{agent: "a", chunks: []*schema.Message{text("done")}},
			},
			wantStreamed: "done", wantStatus: events.StatusComplete, wantPersist: "done", wantTokens: 1,
		},
		{
			name:         "actions are skipped",
			steps:        []step{{agent: "a", action: adk.NewExitAction()}, {agent: "a", whole: text("bye")}},
			wantStreamed: "bye", wantStatus: events.StatusComplete, wantPersist: "bye", wantTokens: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			sink := &recordingSink{}
			turn := &fakeTurn{}
			iter, done := script(ctx, tt.steps...)
			res, err := newBridge(t, sink, nil).Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter)
			<-done
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			s := summarize(t, sink.snapshot(), "run-1")
			if s.text != tt.wantStreamed || s.notices != tt.wantNotices || s.status != tt.wantStatus || !s.hasFinal {
				t.Fatalf("streamed %+v, want text %q notices %d status %s", s, tt.wantStreamed, tt.wantNotices, tt.wantStatus)
			}
			if res.Status != tt.wantStatus {
				t.Fatalf("result status %s, want %s", res.Status, tt.wantStatus)
			}
			if n := len(sink.snapshot()); res.Tokens != tt.wantTokens || res.Events != n {
				t.Fatalf("result counts %d tokens and %d events, want %d deltas read and the %d events emitted", res.Tokens, res.Events, tt.wantTokens, n)
			}
			if tt.wantPersist == "" {
				if len(turn.committed) != 0 || turn.discarded != 1 {
					t.Fatalf("want discarded once and nothing committed, got committed %q discarded %d", turn.committed, turn.discarded)
				}
				return
			}
			if len(turn.committed) != 1 || turn.committed[0] != tt.wantPersist || turn.statuses[0] != tt.wantStatus || turn.discarded != 0 {
				t.Fatalf("committed %q %v (discarded %d), want %q %s", turn.committed, turn.statuses, turn.discarded, tt.wantPersist, tt.wantStatus)
			}
			if res.Answer != tt.wantPersist || res.Committed.N != 1 {
				t.Fatalf("result %+v", res)
			}
			if sink.keys[0] != testID {
				t.Fatalf("events keyed %v, want %v", sink.keys[0], testID)
			}
		})
	}
}

func TestPredicatesSelectWhatIsStreamedAndPersisted(t *testing.T) {
	t.Parallel()
	steps := []step{
		{agent: "supervisor", chunks: []*schema.Message{text("Let me ask. ")}},
		{agent: "researcher", chunks: []*schema.Message{text("Found it. ")}},
		// A message of another role (an agent echoing its instructions):
		// only a predicate that names the role selects it.
		{agent: "researcher", role: schema.System, whole: text("You are a researcher. ")},
		{agent: "supervisor", whole: text("The answer is 42.")},
	}
	tests := []struct {
		name         string
		stream       bridge.Predicate
		persist      bridge.Predicate
		wantStreamed string
		wantPersist  string
		wantAgent    string
		wantSkips    int
	}{
		{
			name:         "nil predicates select assistant messages of every agent and nothing else",
			wantStreamed: "Let me ask. Found it. The answer is 42.", wantPersist: "Let me ask. Found it. The answer is 42.", wantAgent: "supervisor", wantSkips: 1,
		},
		{
			name:         "And of no predicates selects messages of every role",
			stream:       bridge.And(),
			persist:      bridge.Role(schema.Assistant),
			wantStreamed: "Let me ask. Found it. You are a researcher. The answer is 42.", wantPersist: "Let me ask. Found it. The answer is 42.", wantAgent: "supervisor",
		},
		{
			name:         "the supervisor alone is persisted while everyone is streamed",
			persist:      bridge.AgentRole("supervisor", schema.Assistant),
			wantStreamed: "Let me ask. Found it. The answer is 42.", wantPersist: "Let me ask. The answer is 42.", wantAgent: "supervisor", wantSkips: 1,
		},
		{
			name:         "Not excludes an agent from both halves",
			stream:       bridge.And(bridge.Role(schema.Assistant), bridge.Not(bridge.AgentRole("supervisor", schema.Assistant))),
			persist:      bridge.And(bridge.Role(schema.Assistant), bridge.Not(bridge.AgentRole("supervisor", schema.Assistant))),
			wantStreamed: "Found it. ", wantPersist: "Found it. ", wantAgent: "researcher", wantSkips: 3,
		},
		{
			name:         "Or combines agents",
			stream:       bridge.Or(bridge.AgentRole("researcher", schema.Assistant), bridge.AgentRole("nobody", schema.Assistant)),
			persist:      bridge.Or(bridge.AgentRole("researcher", schema.Assistant)),
			wantStreamed: "Found it. ", wantPersist: "Found it. ", wantAgent: "researcher", wantSkips: 3,
		},
		{
			name:        "a predicate selecting nothing discards the turn",
			stream:      bridge.Or(),
			persist:     bridge.Or(),
			wantSkips:   4,
			wantPersist: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			sink := &recordingSink{}
			turn := &fakeTurn{}
			var skips atomic.Int32
			b := newBridge(t, sink, func(c *bridge.Config) {
				c.Stream, c.Persist = tt.stream, tt.persist
				c.OnSkip = func(s bridge.Skip) {
					if s.Reason != "not-selected" {
						t.Errorf("unexpected skip %+v", s)
					}
					skips.Add(1)
				}
			})
			iter, done := script(ctx, steps...)
			res, err := b.Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter)
			<-done
			if err != nil {
				t.Fatal(err)
			}
			s := summarize(t, sink.snapshot(), "run-1")
			if s.text != tt.wantStreamed {
				t.Fatalf("streamed %q, want %q", s.text, tt.wantStreamed)
			}
			if res.Answer != tt.wantPersist || res.Agent != tt.wantAgent {
				t.Fatalf("persisted %q by %q, want %q by %q", res.Answer, res.Agent, tt.wantPersist, tt.wantAgent)
			}
			if got := int(skips.Load()); got != tt.wantSkips {
				t.Fatalf("OnSkip called %d times, want %d", got, tt.wantSkips)
			}
		})
	}
}

func TestOnSkipSeesToolCallsAndActions(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	var reasons []string
	b := newBridge(t, &recordingSink{}, func(c *bridge.Config) {
		c.OnSkip = func(s bridge.Skip) { reasons = append(reasons, s.Reason) } // called from one goroutine
	})
	iter, done := script(ctx,
		step{agent: "a", whole: toolCall()},
		step{agent: "a", role: schema.Tool, whole: schema.ToolMessage("r", "call-1")},
		step{agent: "a", action: adk.NewExitAction()},
		step{agent: "a", whole: text("ok")},
	)
	if _, err := b.Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: &fakeTurn{}}, iter); err != nil {
		t.Fatal(err)
	}
	<-done
	if got := strings.Join(reasons, ","); got != "tool-call,tool-call,action" {
		t.Fatalf("skips %s", got)
	}
}

// The context given to Start carries values only: a client going away
// mid-run stops neither the generation nor the persistence. The sink and
// the turn refuse work under an ended context, as Kafka and MongoDB do, so
// a bridge that used the caller's context could neither stream nor commit.
func TestCancelledCallerContextAbortsNeitherGenerationNorPersistence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(b *bridge.Bridge, ctx context.Context, run bridge.Run, iter *adk.AsyncIterator[*adk.AgentEvent]) (bridge.Result, error)
	}{
		{name: "A caller context ending after Start is ignored by the run.", run: func(b *bridge.Bridge, ctx context.Context, run bridge.Run, iter *adk.AsyncIterator[*adk.AgentEvent]) (bridge.Result, error) {
			return b.Start(ctx, run, iter).Wait()
		}},
		{name: "A caller context ending during Run is ignored by the run.", run: func(b *bridge.Bridge, ctx context.Context, run bridge.Run, iter *adk.AsyncIterator[*adk.AgentEvent]) (bridge.Result, error) {
			return b.Run(ctx, run, iter)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			callerCtx, callerGone := context.WithCancel(ctx)
			defer callerGone()
			hold := make(chan struct{})
			iter, done := script(ctx, step{agent: "a", hold: hold, chunks: []*schema.Message{text("still "), text("here"), finish("", "stop")}})
			turn := &fakeTurn{}
			committedAtCompletion := -1
			sink := &recordingSink{}
			sink.onEmit = func(e events.Event) {
				switch e.Type() {
				case events.TypeRunStarted:
					// The client disconnects once the run is under way,
					// before the model has produced anything.
					callerGone()
					close(hold)
				case events.TypeRunCompleted:
					turn.mu.Lock()
					committedAtCompletion = len(turn.committed)
					turn.mu.Unlock()
				}
			}
			var stopped atomic.Bool
			run := bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn, StopGeneration: func() { stopped.Store(true) }}
			res, err := tt.run(newBridge(t, sink, nil), callerCtx, run, iter)
			<-done
			if callerCtx.Err() == nil {
				t.Fatal("the caller's context did not end during the run")
			}
			if err != nil || res.Status != events.StatusComplete || res.Answer != "still here" {
				t.Fatalf("got %+v, %v; want the complete answer persisted", res, err)
			}
			if stopped.Load() {
				t.Fatal("the caller's context ending stopped the generation")
			}
			if len(turn.committed) != 1 || turn.committed[0] != "still here" || turn.statuses[0] != events.StatusComplete {
				t.Fatalf("committed %q %v, want %q complete", turn.committed, turn.statuses, "still here")
			}
			s := summarize(t, sink.snapshot(), "run-1")
			if s.text != "still here" || !s.hasFinal || s.status != events.StatusComplete {
				t.Fatalf("streamed %+v, want the whole answer and run.completed complete", s)
			}
			if committedAtCompletion != 1 {
				t.Fatalf("run.completed emitted with %d turns committed, want 1", committedAtCompletion)
			}
		})
	}
}

// A token is streamed as soon as the model produced it, not held until
// the model produces the next: here the model waits, after its first
// chunk, until that chunk is on the stream.
func TestATokenIsStreamedBeforeTheModelProducesTheNext(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	onStream := make(chan struct{})
	var once sync.Once
	sink := &recordingSink{onEmit: func(e events.Event) {
		if e.Type() == events.TypeToken {
			once.Do(func() { close(onStream) })
		}
	}}
	iter, done := script(ctx, step{agent: "a", afterFirst: onStream, chunks: []*schema.Message{text("first "), text("second"), finish("", "stop")}})
	turn := &fakeTurn{}
	res, err := newBridge(t, sink, nil).Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter)
	<-done
	if err != nil || res.Status != events.StatusComplete || res.Answer != "first second" {
		t.Fatalf("got %+v, %v; want the whole answer complete", res, err)
	}
	if first, ok := sink.snapshot()[1].(*events.TokenEvent); !ok || first.Delta != "first " {
		t.Fatalf("the first event after run.started is %+v, want the first chunk's token alone", sink.snapshot()[1])
	}
}

// The text of a message that turns out to call a tool is not persisted,
// also when the agent's earlier text is already in the answer: the answer
// is taken back to where that message began, not further.
func TestTheTextOfAToolCallMessageAfterEarlierTextIsNotPersisted(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	iter, done := script(ctx,
		step{agent: "a", chunks: []*schema.Message{text("Let me check. ")}},
		step{agent: "a", chunks: []*schema.Message{text("I will ask the clock."), toolCall()}},
		step{agent: "a", chunks: []*schema.Message{text("It is noon."), finish("", "stop")}},
	)
	turn := &fakeTurn{}
	res, err := newBridge(t, &recordingSink{}, nil).Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter)
	<-done
	const want = "Let me check. It is noon."
	if err != nil || res.Status != events.StatusComplete || res.Answer != want {
		t.Fatalf("got %+v, %v; want %q complete", res, err, want)
	}
	if len(turn.committed) != 1 || turn.committed[0] != want {
		t.Fatalf("committed %q, want %q", turn.committed, want)
	}
}

// A run stopped (Handle.Cancel or Handle.Abort) before any assistant
// content persists nothing, not even the user message.
func TestARunStoppedBeforeAnyContentPersistsNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		abort bool // Abort instead of Cancel
		store bool // a history.Pending over a MemoryStore instead of a fakeTurn
	}{
		{name: "A cancel before any content commits nothing and completes cancelled."},
		{name: "A cancel before any content leaves the store without the user message.", store: true},
		{name: "An abort before any content commits nothing and emits no completion.", abort: true},
		{name: "An abort before any content leaves the store without the user message.", abort: true, store: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			genCtx, stopGen := context.WithCancel(ctx)
			defer stopGen()
			hold := make(chan struct{})
			// The model is generating (its stream is open) but has produced
			// nothing when the run is stopped.
			iter, done := script(genCtx, step{agent: "a", hold: hold, chunks: []*schema.Message{text("never")}})
			fake := &fakeTurn{}
			store := history.NewMemoryStore()
			var turn bridge.Turn = fake
			if tt.store {
				turn = history.Begin(store, testID, "req-1", "a question", time.Now())
			}
			sink := &recordingSink{}
			h := newBridge(t, sink, nil).Start(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn, StopGeneration: stopGen}, iter)
			sink.waitEvents(t, ctx, 1) // run.started: the run is under way
			if tt.abort {
				h.Abort()
			} else {
				h.Cancel()
			}
			res, err := h.Wait()
			<-done
			evs := sink.snapshot()
			if tt.abort {
				if !errors.Is(err, bridge.ErrAborted) {
					t.Fatalf("Wait: %v, want ErrAborted", err)
				}
				for _, e := range evs {
					if e.Type() == events.TypeRunCompleted {
						t.Fatal("run.completed emitted after Abort")
					}
				}
			} else {
				if err != nil {
					t.Fatalf("Wait: %v", err)
				}
				if s := summarize(t, evs, "run-1"); !s.hasFinal || s.status != events.StatusCancelled || s.text != "" {
					t.Fatalf("streamed %+v, want run.completed cancelled and no text", s)
				}
				if res.Status != events.StatusCancelled {
					t.Fatalf("result status %s, want cancelled", res.Status)
				}
			}
			if res.Answer != "" || res.Committed.N != 0 {
				t.Fatalf("result %+v: nothing may be committed", res)
			}
			if tt.store {
				if page, err := store.List(ctx, testID, 0, 10); !errors.Is(err, history.ErrNotFound) {
					t.Fatalf("the store holds %+v (%v), want no message at all", page.Messages, err)
				}
				return
			}
			if len(fake.committed) != 0 || fake.discarded != 1 {
				t.Fatalf("committed %q, discarded %d; want the turn discarded once and nothing committed", fake.committed, fake.discarded)
			}
		})
	}
}

// An answer the model cut off (finish reason length or content_filter) is
// persisted as incomplete, with one notice; a normal finish is complete.
// Both the streamed and the whole-message paths read the finish reason.
func TestAnAnswerCutOffByTheModelIsPersistedIncomplete(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		reason      string
		whole       bool // a non-streamed message
		before      bool // text before the message that carries the finish reason
		wantStatus  events.Status
		wantNotices int
		wantPersist string // "" means discarded
	}{
		{name: "A stream cut at the length limit is incomplete.", reason: "length", before: true,
			wantStatus: events.StatusIncomplete, wantNotices: 1, wantPersist: "so far, cut"},
		{name: "A stream cut by the content filter is incomplete.", reason: "content_filter", before: true,
			wantStatus: events.StatusIncomplete, wantNotices: 1, wantPersist: "so far, cut"},
		{name: "A whole message cut at the length limit is incomplete.", reason: "length", whole: true,
			wantStatus: events.StatusIncomplete, wantNotices: 1, wantPersist: "cut"},
		{name: "A whole message cut by the content filter is incomplete.", reason: "content_filter", whole: true,
			wantStatus: events.StatusIncomplete, wantNotices: 1, wantPersist: "cut"},
		{name: "A stream finished normally is complete.", reason: "stop", before: true,
			wantStatus: events.StatusComplete, wantPersist: "so far, cut"},
		{name: "A whole message finished normally is complete.", reason: "stop", whole: true,
			wantStatus: events.StatusComplete, wantPersist: "cut"},
		{name: "A stream without a finish reason is complete.", reason: "", before: true,
			wantStatus: events.StatusComplete, wantPersist: "so far, cut"},
		{name: "A content filter before any text persists nothing.", reason: "content_filter",
			wantStatus: events.StatusDiscarded, wantNotices: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			last := finish("cut", tt.reason)
			if tt.wantPersist == "" {
				last = finish("", tt.reason)
			}
			st := step{agent: "a", chunks: []*schema.Message{last}}
			if tt.before {
				st.chunks = []*schema.Message{text("so far, "), last}
			}
			if tt.whole {
				st = step{agent: "a", whole: last}
			}
			sink := &recordingSink{}
			turn := &fakeTurn{}
			iter, done := script(ctx, st)
			res, err := newBridge(t, sink, nil).Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter)
			<-done
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			s := summarize(t, sink.snapshot(), "run-1")
			if res.Status != tt.wantStatus || s.status != tt.wantStatus || s.notices != tt.wantNotices {
				t.Fatalf("result %s, streamed %+v; want %s with %d notices", res.Status, s, tt.wantStatus, tt.wantNotices)
			}
			if (res.ModelErr != nil) != (tt.wantNotices > 0) {
				t.Fatalf("ModelErr %v", res.ModelErr)
			}
			if tt.wantPersist == "" {
				if len(turn.committed) != 0 || turn.discarded != 1 {
					t.Fatalf("committed %q, discarded %d; want nothing persisted", turn.committed, turn.discarded)
				}
				return
			}
			if len(turn.committed) != 1 || turn.committed[0] != tt.wantPersist || turn.statuses[0] != tt.wantStatus {
				t.Fatalf("committed %q %v, want %q %s", turn.committed, turn.statuses, tt.wantPersist, tt.wantStatus)
			}
		})
	}
}

func TestCancelPersistsThePartialAnswerAsCancelled(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		before     []*schema.Message
		wantStatus events.Status
		wantAnswer string
	}{
		{name: "with content the partial answer is persisted as cancelled", before: []*schema.Message{text("so far")}, wantStatus: events.StatusCancelled, wantAnswer: "so far"},
		{name: "without content nothing is persisted, and the run is still cancelled", wantStatus: events.StatusCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			genCtx, stopGen := context.WithCancel(ctx)
			hold := make(chan struct{})
			steps := []step{}
			if tt.before != nil {
				steps = append(steps, step{agent: "a", chunks: tt.before})
			}
			steps = append(steps, step{agent: "a", hold: hold, chunks: []*schema.Message{text(" never")}})
			iter, done := script(genCtx, steps...)
			sink := &recordingSink{}
			turn := &fakeTurn{}
			var stopped atomic.Bool
			h := newBridge(t, sink, nil).Start(ctx, bridge.Run{
				Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn,
				StopGeneration: func() { stopped.Store(true); stopGen() },
			}, iter)
			// Wait until the content before the hold has been streamed.
			sink.waitEvents(t, ctx, 1+len(tt.before))
			h.Cancel()
			res, err := h.Wait()
			<-done // the script saw the generation context end
			if err != nil {
				t.Fatal(err)
			}
			if !stopped.Load() {
				t.Fatal("Cancel did not stop the generation")
			}
			s := summarize(t, sink.snapshot(), "run-1")
			if res.Status != tt.wantStatus || s.status != tt.wantStatus || res.Answer != tt.wantAnswer {
				t.Fatalf("result %+v stream %+v, want %s %q", res, s, tt.wantStatus, tt.wantAnswer)
			}
			if strings.Contains(s.text, "never") {
				t.Fatal("text after the cancel was streamed")
			}
		})
	}
}

// A stopped model reports the stop as an error ("context canceled"). When
// that error is already buffered as the run looks again, the cancel or
// abort that caused it still decides how the run ends: cancelled, or
// aborted with nothing persisted; never incomplete. The stop is made from
// the sink while it emits the first token, and the sink returns only once
// the reader has handed the error over (it has gone on to the next event,
// an action, which OnSkip sees); each case runs 20 times, as the order in
// which one select sees two ready channels is Go's to choose.
func TestACancelOrAbortWinsOverTheErrorOfTheGenerationItStopped(t *testing.T) {
	t.Parallel()
	for _, abort := range []bool{false, true} {
		name := "A cancel ends the run cancelled with its partial answer."
		if abort {
			name = "An abort ends the run aborted, with nothing persisted."
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for i := range 20 {
				ctx := testCtx(t)
				genCtx, stopGen := context.WithCancel(ctx)
				iter, done := script(genCtx, step{agent: "a", chunks: []*schema.Message{text("so far")}},
					step{agent: "a", hold: make(chan struct{}), chunks: []*schema.Message{text(" never")}},
					step{agent: "a", action: &adk.AgentAction{Exit: true}})
				handle := make(chan *bridge.Handle, 1)
				readerPast := make(chan struct{})
				var skipOnce sync.Once
				sink := &recordingSink{}
				var once sync.Once
				sink.onEmit = func(e events.Event) {
					if e.Type() != events.TypeToken {
						return
					}
					once.Do(func() {
						h := <-handle
						if abort {
							h.Abort()
						} else {
							h.Cancel()
						}
						<-readerPast // the reader handed the stopped stream's error over
					})
				}
				turn := &fakeTurn{}
				b := newBridge(t, sink, func(c *bridge.Config) {
					c.OnSkip = func(s bridge.Skip) {
						if s.Reason == "action" {
							skipOnce.Do(func() { close(readerPast) })
						}
					}
				})
				h := b.Start(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn, StopGeneration: stopGen}, iter)
				handle <- h
				res, err := h.Wait()
				<-done
				if abort {
					if !errors.Is(err, bridge.ErrAborted) || len(turn.committed) != 0 {
						t.Fatalf("run %d: Wait = %+v, %v, committed %q; want ErrAborted and nothing committed", i, res, err, turn.committed)
					}
					continue
				}
				if err != nil || res.Status != events.StatusCancelled || res.Answer != "so far" {
					t.Fatalf("run %d: Wait = status %s answer %q, %v; want cancelled with \"so far\"", i, res.Status, res.Answer, err)
				}
			}
		})
	}
}

func TestAbortPersistsAndEmitsNothingMore(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	genCtx, stopGen := context.WithCancel(ctx)
	hold := make(chan struct{})
	iter, done := script(genCtx, step{agent: "a", chunks: []*schema.Message{text("partial")}}, step{agent: "a", hold: hold, chunks: []*schema.Message{text("x")}})
	sink := &recordingSink{}
	turn := &fakeTurn{}
	var stopped atomic.Bool
	h := newBridge(t, sink, nil).Start(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn,
		StopGeneration: func() { stopped.Store(true); stopGen() }}, iter)
	sink.waitEvents(t, ctx, 2) // run.started and the first token
	h.Abort()
	if !stopped.Load() { // Abort calls StopGeneration before it returns
		t.Fatal("Abort did not stop the generation")
	}
	_, err := h.Wait()
	<-done // the script saw the generation context end
	if !errors.Is(err, bridge.ErrAborted) {
		t.Fatalf("Wait: %v, want ErrAborted", err)
	}
	if len(turn.committed) != 0 || turn.discarded != 1 {
		t.Fatalf("committed %q discarded %d", turn.committed, turn.discarded)
	}
	for _, e := range sink.snapshot() {
		if e.Type() == events.TypeRunCompleted {
			t.Fatal("run.completed emitted after Abort")
		}
	}
}

func TestASinkThatStopsEarlyStillLetsTheTurnPersist(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	sink := &recordingSink{failAfter: 3}
	turn := &fakeTurn{}
	chunks := []*schema.Message{}
	for i := 0; i < 50; i++ {
		chunks = append(chunks, text("w "))
	}
	iter, done := script(ctx, step{agent: "a", chunks: chunks})
	// A tiny delta cap keeps coalescing from folding everything into one event.
	b := newBridge(t, sink, func(c *bridge.Config) { c.MaxDeltaBytes = 2 })
	res, err := b.Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter)
	<-done
	if !errors.Is(err, errSink) {
		t.Fatalf("Wait: %v, want the sink error", err)
	}
	if res.Status != events.StatusComplete || len(turn.committed) != 1 || turn.committed[0] != strings.Repeat("w ", 50) {
		t.Fatalf("result %+v committed %q: the answer must persist whole", res, turn.committed)
	}
	if n := len(sink.snapshot()); n != 2 {
		t.Fatalf("sink accepted %d events, want 2", n)
	}
}

func TestACommitFailureEmitsNoCompletion(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	sink := &recordingSink{}
	storeDown := errors.New("store down")
	iter, done := script(ctx, step{agent: "a", whole: text("hi")})
	_, err := newBridge(t, sink, nil).Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: &fakeTurn{err: storeDown}}, iter)
	<-done
	if !errors.Is(err, storeDown) {
		t.Fatalf("Wait: %v", err)
	}
	for _, e := range sink.snapshot() {
		if e.Type() == events.TypeRunCompleted {
			t.Fatal("run.completed emitted for a turn that was not committed")
		}
	}
}

func TestTheBufferIsBoundedAndDeltasCoalesceBehindASlowSink(t *testing.T) {
	t.Parallel()
	// In a synctest bubble, synctest.Wait returns once every goroutine of
	// the run is blocked: if the agent could get past the buffer, it would
	// have finished by then.
	synctest.Test(t, testTheBufferIsBounded)
}

func testTheBufferIsBounded(t *testing.T) {
	ctx := testCtx(t)
	block := make(chan struct{})
	sink := &recordingSink{block: block}
	chunks := []*schema.Message{}
	for i := 0; i < 200; i++ {
		chunks = append(chunks, text("t "))
	}
	iter, done := script(ctx, step{agent: "a", chunks: chunks})
	h := newBridge(t, sink, func(c *bridge.Config) { c.BufferSize = 4 }).Start(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: &fakeTurn{}}, iter)
	// The sink holds the first event; with a 4-item buffer the agent cannot
	// get through 200 chunks.
	synctest.Wait()
	select {
	case <-done:
		close(block)
		_, _ = h.Wait() // leave no goroutine behind in the bubble
		t.Fatal("the agent ran ahead of a blocked sink: the buffer is not bounded")
	default:
	}
	close(block)
	res, err := h.Wait()
	<-done
	if err != nil || res.Status != events.StatusComplete {
		t.Fatal(res, err)
	}
	s := summarize(t, sink.snapshot(), "run-1")
	if s.text != strings.Repeat("t ", 200) {
		t.Fatalf("streamed text lost or reordered: %d bytes", len(s.text))
	}
	if s.tokens >= 200 {
		t.Fatalf("%d token events for 200 deltas: no coalescing", s.tokens)
	}
}

// Deltas that pile up behind a busy sink leave as token events of up to
// MaxDeltaBytes each: a coalesced event may reach the cap exactly.
func TestCoalescedTokenEventsFillUpToMaxDeltaBytes(t *testing.T) {
	t.Parallel()
	// In a synctest bubble, synctest.Wait returns once the reader has put
	// every delta in the buffer and the sink still holds run.started: the
	// coordinator then takes them all at once.
	synctest.Test(t, func(t *testing.T) {
		ctx := testCtx(t)
		block := make(chan struct{})
		sink := &recordingSink{block: block}
		iter, done := script(ctx, step{agent: "a", chunks: []*schema.Message{text("ab"), text("cd"), text("ef"), text("gh"), text("i")}})
		h := newBridge(t, sink, func(c *bridge.Config) { c.MaxDeltaBytes = 4 }).Start(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: &fakeTurn{}}, iter)
		synctest.Wait()
		close(block)
		res, err := h.Wait()
		<-done
		if err != nil || res.Status != events.StatusComplete {
			t.Fatal(res, err)
		}
		var deltas []string
		for _, e := range sink.snapshot() {
			if e, ok := e.(*events.TokenEvent); ok {
				deltas = append(deltas, e.Delta)
			}
		}
		if want := []string{"abcd", "efgh", "i"}; !slices.Equal(deltas, want) {
			t.Fatalf("token events %q, want %q (coalesced up to 4 bytes)", deltas, want)
		}
	})
}

// No token event's delta is longer than MaxDeltaBytes: a delta longer than
// the cap (a whole message, a large chunk) leaves in pieces cut at rune
// boundaries, so every token event stays valid on the wire.
func TestADeltaLongerThanMaxDeltaBytesLeavesInPiecesCutAtRuneBoundaries(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", events.MaxDeltaBytes+1000)
	tests := []struct {
		name string
		max  int // 0: the default
		step step
		want []string
	}{
		{name: "A whole message over the event limit leaves in pieces of the default cap.", step: step{agent: "a", whole: text(big)},
			want: []string{big[:4096], big[4096:8192], big[8192:]}},
		{name: "A streamed chunk over the cap leaves in pieces of the cap.", max: events.MaxDeltaBytes, step: step{agent: "a", chunks: []*schema.Message{text(big)}},
			want: []string{big[:events.MaxDeltaBytes], big[events.MaxDeltaBytes:]}},
		{name: "A piece ends before a rune that would cross the cap.", max: 4, step: step{agent: "a", whole: text("ab€€")},
			want: []string{"ab", "€", "€"}},
		{name: "A rune longer than the cap leaves whole, on its own.", max: 2, step: step{agent: "a", whole: text("€x")},
			want: []string{"€", "x"}},
		{name: "Stray continuation bytes (no rune start to cut at) leave one byte at a time until the rest fits.", max: 2, step: step{agent: "a", whole: text("\x80\x80\x80")},
			want: []string{"\x80", "\x80\x80"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			sink := &recordingSink{}
			turn := &fakeTurn{}
			iter, done := script(ctx, tt.step)
			b := newBridge(t, sink, func(c *bridge.Config) { c.MaxDeltaBytes = tt.max })
			res, err := b.Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter)
			<-done
			if err != nil || res.Status != events.StatusComplete {
				t.Fatal(res, err)
			}
			summarize(t, sink.snapshot(), "run-1") // every event survives the wire
			var deltas []string
			for _, e := range sink.snapshot() {
				if e, ok := e.(*events.TokenEvent); ok {
					deltas = append(deltas, e.Delta)
				}
			}
			if !slices.Equal(deltas, tt.want) {
				t.Fatalf("token events of %d bytes, want %d", lens(deltas), lens(tt.want))
			}
			if whole := strings.Join(tt.want, ""); len(turn.committed) != 1 || turn.committed[0] != whole || res.Tokens != 1 {
				t.Fatalf("committed %d answers, %d tokens read; want the whole delta, read as one", len(turn.committed), res.Tokens)
			}
		})
	}
}

func lens(ss []string) []int {
	n := make([]int, len(ss))
	for i, s := range ss {
		n[i] = len(s)
	}
	return n
}

func TestConfigValidateJoinsProblems(t *testing.T) {
	t.Parallel()
	err := bridge.Config{BufferSize: -1, MaxDeltaBytes: -1}.Validate()
	if err == nil || !strings.Contains(err.Error(), "BufferSize") || !strings.Contains(err.Error(), "MaxDeltaBytes") {
		t.Fatalf("Validate: %v", err)
	}
}

// MaxDeltaBytes may go up to the wire's limit for a token event, and no
// further: New accepts exactly what Validate accepts.
func TestConfigValidateAcceptsMaxDeltaBytesUpToTheEventLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		max     int
		wantErr bool
	}{
		{name: "Zero (the default) is valid.", max: 0},
		{name: "The event limit itself is valid.", max: events.MaxDeltaBytes},
		{name: "One byte over the event limit is refused.", max: events.MaxDeltaBytes + 1, wantErr: true},
		{name: "A negative cap is refused.", max: -1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := bridge.Config{Sink: &recordingSink{}, MaxDeltaBytes: tt.max}
			err := cfg.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate with MaxDeltaBytes %d: %v, want an error: %v", tt.max, err, tt.wantErr)
			}
			if _, nerr := bridge.New(cfg); (nerr != nil) != tt.wantErr {
				t.Fatalf("New with MaxDeltaBytes %d: %v, want an error: %v", tt.max, nerr, tt.wantErr)
			}
		})
	}
}

func TestATransientModelErrorBeforeAnyContentAsksForARetry(t *testing.T) {
	t.Parallel()
	transient := errors.New("429 too many requests")
	tests := []struct {
		name      string
		steps     []step
		wantRetry bool
		want      events.Status
	}{
		{name: "an error the hook deems transient, before content, is a retry", steps: []step{{agent: "a", err: transient}}, wantRetry: true},
		{name: "an error the hook deems permanent completes discarded", steps: []step{{agent: "a", err: errors.New("bad request")}}, want: events.StatusDiscarded},
		{name: "a transient error after content persists the answer as incomplete", steps: []step{{agent: "a", chunks: []*schema.Message{text("so far")}}, {agent: "a", err: transient}}, want: events.StatusIncomplete},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			sink := &recordingSink{}
			turn := &fakeTurn{}
			b := newBridge(t, sink, func(c *bridge.Config) {
				c.RetryModelError = func(err error) bool { return errors.Is(err, transient) }
			})
			iter, done := script(ctx, tt.steps...)
			res, err := b.Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter)
			<-done
			if tt.wantRetry {
				if !errors.Is(err, bridge.ErrModelRetry) || !errors.Is(err, transient) {
					t.Fatalf("Wait: %v, want ErrModelRetry wrapping the model error", err)
				}
				for _, e := range sink.snapshot() {
					if e.Type() == events.TypeRunCompleted || e.Type() == events.TypeNotice {
						t.Fatalf("a run to be retried emitted %s", e.Type())
					}
				}
				if turn.discarded != 1 || len(turn.committed) != 0 {
					t.Fatal("a run to be retried must persist nothing")
				}
				return
			}
			if err != nil || res.Status != tt.want {
				t.Fatalf("got %s, %v; want %s", res.Status, err, tt.want)
			}
		})
	}
}

// stateTurn is an answerTurn whose commit changed the keys conv and user
// (what the worker's turn reports); duplicate makes its commit report an
// earlier run's turn. committedAt records how many commits it had when
// each event was emitted (set as the sink's onEmit).
type stateTurn struct {
	answerTurn
	conv, user []string
	duplicate  bool
}

func (t *stateTurn) CommitAnswer(ctx context.Context, a history.Answer) (history.Committed, error) {
	c, err := t.answerTurn.CommitAnswer(ctx, a)
	c.Duplicate = t.duplicate
	return c, err
}

func (t *stateTurn) StateChanged() (conv, user []string) { return t.conv, t.user }

func (t *stateTurn) commits() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.committed)
}

func TestStateChangedFollowsTheCommitOfATurnThatChangedState(t *testing.T) {
	t.Parallel()
	answer := []step{{agent: "a", chunks: []*schema.Message{text("Noted, "), text("in French.")}}}
	tests := []struct {
		name      string
		steps     []step
		conv      []string
		user      []string
		duplicate bool
		cancel    bool
		want      []events.Type
	}{
		{name: "A committed turn that changed keys is followed by state.changed naming exactly them, right before run.completed.",
			steps: answer, conv: []string{"cart", "step"}, user: []string{"language"},
			want: []events.Type{events.TypeRunStarted, events.TypeToken, events.TypeStateChanged, events.TypeRunCompleted}},
		{name: "Keys of one scope only are listed with the other scope empty.",
			steps: answer, user: []string{"language"},
			want: []events.Type{events.TypeRunStarted, events.TypeToken, events.TypeStateChanged, events.TypeRunCompleted}},
		{name: "A committed turn that changed no key emits no state.changed.",
			steps: answer,
			want:  []events.Type{events.TypeRunStarted, events.TypeToken, events.TypeRunCompleted}},
		{name: "A run that persisted nothing (no content: discarded) emits no state.changed whatever its turn reports.",
			steps: []step{{agent: "a", chunks: []*schema.Message{text("")}}}, conv: []string{"cart"}, user: []string{"language"},
			want: []events.Type{events.TypeRunStarted, events.TypeRunCompleted}},
		{name: "A run cancelled before any content persisted nothing and emits no state.changed.",
			steps: []step{{agent: "a", hold: make(chan struct{}), chunks: []*schema.Message{text("never")}}}, cancel: true, conv: []string{"cart"},
			want: []events.Type{events.TypeRunStarted, events.TypeRunCompleted}},
		{name: "A commit that found the request already committed by an earlier run emits no state.changed: that run's changes are kept.",
			steps: answer, conv: []string{"cart"}, duplicate: true,
			want: []events.Type{events.TypeRunStarted, events.TypeToken, events.TypeRunCompleted}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			genCtx, stopGen := context.WithCancel(ctx)
			defer stopGen()
			iter, done := script(genCtx, tt.steps...)
			turn := &stateTurn{conv: tt.conv, user: tt.user, duplicate: tt.duplicate}
			var commitsAtEvent []int
			sink := &recordingSink{onEmit: func(events.Event) { commitsAtEvent = append(commitsAtEvent, turn.commits()) }}
			h := newBridge(t, sink, nil).Start(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn, StopGeneration: stopGen}, iter)
			if tt.cancel {
				sink.waitEvents(t, ctx, 1)
				h.Cancel()
			}
			if _, err := h.Wait(); err != nil {
				t.Fatalf("Wait: %v", err)
			}
			<-done
			evs := sink.snapshot()
			var types []events.Type
			for i, e := range evs {
				types = append(types, e.Type())
				sc, ok := e.(*events.StateChangedEvent)
				if !ok {
					continue
				}
				if !slices.Equal(sc.Conversation, tt.conv) || !slices.Equal(sc.User, tt.user) || sc.Truncated {
					t.Errorf("state.changed lists %q and %q (truncated %v), want %q and %q", sc.Conversation, sc.User, sc.Truncated, tt.conv, tt.user)
				}
				if commitsAtEvent[i] != 1 {
					t.Errorf("state.changed emitted with %d commits made, want it after the one commit", commitsAtEvent[i])
				}
			}
			if !slices.Equal(types, tt.want) {
				t.Fatalf("events %v, want %v", types, tt.want)
			}
		})
	}
}
