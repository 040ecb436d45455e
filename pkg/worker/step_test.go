package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/adk/prebuilt/supervisor"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"
	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// recordingSink keeps the events a step emits; the first token of a run
// is signalled on tokens.
type recordingSink struct {
	mu     sync.Mutex
	evs    []events.Event
	tokens chan struct{}
}

func newRecordingSink() *recordingSink { return &recordingSink{tokens: make(chan struct{}, 1)} }

func (s *recordingSink) Emit(_ context.Context, _ events.Identity, e events.Event) error {
	s.mu.Lock()
	s.evs = append(s.evs, e)
	s.mu.Unlock()
	if e.Type() == events.TypeToken {
		select {
		case s.tokens <- struct{}{}:
		default:
		}
	}
	return nil
}

func (s *recordingSink) types() []events.Type {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []events.Type
	for _, e := range s.evs {
		out = append(out, e.Type())
	}
	return out
}

// stepConfig is the configuration of the steps of these tests: the echo
// model without delay.
func stepConfig() worker.Config {
	c := worker.DefaultConfig()
	c.EchoDelay = 0
	return c
}

// newStep is worker.NewStep, failing the test on an error.
func newStep(t testing.TB, c worker.Config, opts ...worker.Option) *worker.Step {
	t.Helper()
	st, err := worker.NewStep(c, append(opts, worker.WithLogger(slog.New(slog.DiscardHandler)))...)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func stepRequest(id events.Identity, requestID, content string) events.Request {
	return events.Request{V: events.Version, Tenant: id.Tenant, User: id.User, Conversation: id.Conversation, RequestID: requestID,
		Content: content, Strategy: events.StrategyEnqueue, CreatedAt: time.Now().UTC()}
}

// chatAgent is the agent cmd/worker builds, on m (no tools: safe to share
// between runs).
func chatAgent(t *testing.T, m model.ToolCallingChatModel) adk.Agent {
	t.Helper()
	a, err := adk.NewChatModelAgent(context.Background(), &adk.ChatModelAgentConfig{Name: "assistant", Description: "test agent", Model: m})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A step runs a request from the store to its answer: it streams the
// run's events to the sink, from run.started to run.completed, commits the
// turn and returns what it persisted.
func TestAStepRunsARequestAndCommitsItsTurn(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	st := newStep(t, stepConfig())
	store, sink := history.NewMemoryStore(), newRecordingSink()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "c1"}
	res, err := st.Run(ctx, stepRequest(id, "r1", "hello there"), store, sink)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != events.StatusComplete || res.Answer == "" || res.Committed.N != 1 || res.Committed.Duplicate {
		t.Fatalf("Result %+v", res)
	}
	types := sink.types()
	if len(types) < 3 || types[0] != events.TypeRunStarted || types[len(types)-1] != events.TypeRunCompleted {
		t.Errorf("events %v, want run.started … run.completed", types)
	}
	w, err := store.Window(ctx, id, 10)
	if err != nil || len(w) != 2 || w[0].Content != "hello there" || w[1].Content != res.Answer {
		t.Errorf("stored %+v, %v; want the turn", w, err)
	}
}

// A request the store has decided already (a redelivery, a duplicate
// record) completes as it did, without running the agent again.
func TestAStepCompletesADecidedRequestWithoutRunningIt(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	var runs sync.Map
	st := newStep(t, stepConfig(), worker.WithAgentFactory(func(ctx context.Context, r worker.Request) (adk.Agent, error) {
		n, _ := runs.LoadOrStore(r.RequestID, new(int))
		*n.(*int)++
		return chatAgent(t, &scripted{reply: func([]*schema.Message) *schema.Message { return schema.AssistantMessage("the answer", nil) }}), nil
	}))
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "dup"}
	first, err := st.Run(ctx, stepRequest(id, "r1", "q"), store, newRecordingSink())
	if err != nil || first.Status != events.StatusComplete {
		t.Fatalf("first run: %+v, %v", first, err)
	}
	sink := newRecordingSink()
	again, err := st.Run(ctx, stepRequest(id, "r1", "q"), store, sink)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := runs.Load("r1"); *n.(*int) != 1 {
		t.Errorf("the agent was built %d times for r1, want once", *n.(*int))
	}
	if again.Status != events.StatusComplete || !again.Committed.Duplicate || again.Committed.N != first.Committed.N {
		t.Errorf("the duplicate's Result %+v, want the first run's turn %d, complete, Duplicate", again, first.Committed.N)
	}
	if types := sink.types(); len(types) != 1 || types[0] != events.TypeRunCompleted {
		t.Errorf("the duplicate's events %v, want run.completed alone", types)
	}
}

// A run that persisted nothing (an empty answer: discarded) has its
// outcome recorded, so that a redelivery completes discarded without
// running the model again.
func TestAStepRecordsTheOutcomeOfARunThatPersistedNothing(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	st := newStep(t, stepConfig())
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "empty"}
	res, err := st.Run(ctx, stepRequest(id, "r1", "[[empty]]"), store, newRecordingSink())
	if err != nil || res.Status != events.StatusDiscarded || res.Committed.N != 0 {
		t.Fatalf("Result %+v, %v; want discarded, nothing committed", res, err)
	}
	c, ok, err := store.Lookup(ctx, id, "r1")
	if err != nil || !ok || c.Status != events.StatusDiscarded {
		t.Errorf("the store's decision: %+v, %v, %v; want discarded", c, ok, err)
	}
}

// The window the agent sees is the worker's: an interrupted answer ends
// with the question it asked (the user's next message answers it), and
// past the compaction budget the older turns are condensed into a stored
// summary, which the next runs find.
func TestAStepShowsTheAgentTheInterruptQuestionAndCompacts(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "window"}
	old := history.Turn{RequestID: "r0", User: strings.Repeat("long question ", 20), UserAt: time.Now(), Answer: strings.Repeat("long answer ", 20),
		Agent: "assistant", Status: events.StatusComplete}
	asked := history.Turn{RequestID: "r1", User: "book a table", UserAt: time.Now(), Agent: "assistant", Status: events.StatusInterrupted,
		Interrupt: &history.Interrupt{Agent: "assistant", Tool: "ask_user", Question: "For how many?", Targets: []string{"t1"}}}
	for _, turn := range []history.Turn{old, asked} {
		if _, err := store.Commit(ctx, id, turn); err != nil {
			t.Fatal(err)
		}
	}
	m := &scripted{reply: func([]*schema.Message) *schema.Message { return schema.AssistantMessage("done", nil) }}
	summarizer := &scripted{reply: func([]*schema.Message) *schema.Message { return schema.AssistantMessage("they talked at length", nil) }}
	c := stepConfig()
	c.CompactTokens, c.CompactKeep = 60, 2
	st := newStep(t, c, worker.WithAgent(chatAgent(t, m)), worker.WithSummarizer(summarizer))
	if _, err := st.Run(ctx, stepRequest(id, "r2", "four"), store, newRecordingSink()); err != nil {
		t.Fatal(err)
	}
	seen := m.seen()
	if len(seen) != 1 {
		t.Fatalf("the model ran %d times, want once", len(seen))
	}
	var input []string
	for _, msg := range seen[0] {
		input = append(input, string(msg.Role)+": "+msg.Content)
	}
	want := []string{"system: Summary of the earlier conversation:\nthey talked at length", "user: book a table", "assistant: For how many?", "user: four"}
	if strings.Join(input, "|") != strings.Join(want, "|") {
		t.Errorf("the model's input\n %q\nwant\n %q", input, want)
	}
	if sum, found, err := store.Summary(ctx, id); err != nil || !found || sum.Text != "they talked at length" {
		t.Errorf("stored summary %+v, %v, %v", sum, found, err)
	}
}

// askingModel asks the user once (ask_user) and then answers with what
// the tool returned.
func askingModel() *scripted {
	return &scripted{reply: func(in []*schema.Message) *schema.Message {
		if last := lastOf(in); last.Role == schema.Tool {
			return schema.AssistantMessage("booked for "+last.Content, nil)
		}
		return call("ask_user", `{"question":"For how many?"}`)
	}}
}

// toolAgent is a ChatModelAgent with tools: built per run.
func toolAgent(ctx context.Context, m model.ToolCallingChatModel, tools ...tool.BaseTool) (adk.Agent, error) {
	return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "assistant", Description: "test agent", Model: m,
		ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: tools}}})
}

// An interrupted run is checkpointed in the step's store and resumed from
// it by a request with ResumeOf; a resume of anything else is rejected
// with a notice, and persists nothing. turnpike_worker_interrupts_total
// counts the interrupted run once: not its redelivery, not the resume.
func TestAStepResumesAnInterruptFromItsStore(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	m := askingModel()
	reg := prometheus.NewRegistry()
	st := newStep(t, stepConfig(), worker.WithRegistry(reg), worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		return toolAgent(ctx, m, worker.AskUser())
	}))
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "resume"}
	// Run returns after its metrics are counted.
	interrupts := func(when string) {
		t.Helper()
		if got := counterValue(t, reg, "turnpike_worker_interrupts_total"); got != 1 {
			t.Errorf("turnpike_worker_interrupts_total after %s = %v, want 1", when, got)
		}
	}
	first, err := st.Run(ctx, stepRequest(id, "r1", "book a table"), store, newRecordingSink())
	if err != nil || first.Status != events.StatusInterrupted || first.Interrupt == nil || first.Interrupt.Question != "For how many?" {
		t.Fatalf("first run: %+v, %v; want interrupted by the question", first, err)
	}
	interrupts("the interrupted run")
	if dup, err := st.Run(ctx, stepRequest(id, "r1", "book a table"), store, newRecordingSink()); err != nil || !dup.Committed.Duplicate {
		t.Fatalf("the interrupted request redelivered: %+v, %v; want a duplicate", dup, err)
	}
	interrupts("its redelivery")
	resume := stepRequest(id, "r2", "four")
	resume.ResumeOf = "r1"
	res, err := st.Run(ctx, resume, store, newRecordingSink())
	if err != nil || res.Status != events.StatusComplete || res.Answer != "booked for four" {
		t.Fatalf("resume: %+v, %v; want complete with the answer", res, err)
	}
	interrupts("the resume")
	again := stepRequest(id, "r3", "five")
	again.ResumeOf = "r1" // answered already
	sink := newRecordingSink()
	res, err = st.Run(ctx, again, store, sink)
	if err != nil || res.Status != events.StatusRejected || res.Committed.N != 0 {
		t.Fatalf("a second resume: %+v, %v; want rejected, nothing committed", res, err)
	}
	if types := sink.types(); len(types) != 2 || types[0] != events.TypeNotice || types[1] != events.TypeRunCompleted {
		t.Fatalf("the rejected resume's events %v, want a notice and run.completed", types)
	}
	if n := sink.evs[0].(*events.NoticeEvent); !strings.HasPrefix(n.Message, "Nothing to resume: ") {
		t.Errorf("the rejected resume's notice %q, want it to start %q", n.Message, "Nothing to resume: ")
	}
}

// When the context of Run ends, the run is aborted: nothing more is
// persisted, and Run says so with bridge.ErrAborted (the request is not
// done: a shadow replay leaves it for its next run).
func TestAStepIsAbortedWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	m := newGatedModel("slow")
	c := stepConfig()
	c.RunTimeout = 10 * time.Second // an abort that never comes ends the run here, and the test fails
	st := newStep(t, c, worker.WithAgent(chatAgent(t, m)))
	store, sink := history.NewMemoryStore(), newRecordingSink()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "abort"}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := st.Run(runCtx, stepRequest(id, "r1", "slow"), store, sink)
		done <- err
	}()
	select {
	case <-sink.tokens: // the model is answering
	case <-ctx.Done():
		t.Fatal("the run never started")
	}
	cancel()
	if err := <-done; !errors.Is(err, bridge.ErrAborted) {
		t.Fatalf("Run = %v, want bridge.ErrAborted", err)
	}
	if _, ok, err := store.Lookup(ctx, id, "r1"); ok || err != nil {
		t.Errorf("the aborted request is decided in the store (%v, %v)", ok, err)
	}
}

// A Step is safe for concurrent use: runs of different conversations go
// at once (under -race), each committing its own turn.
func TestAStepRunsConversationsConcurrently(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	st := newStep(t, stepConfig())
	store := history.NewMemoryStore()
	var wg sync.WaitGroup
	const n = 8
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			id := events.Identity{Tenant: "acme", User: "ann", Conversation: fmt.Sprintf("c%d", i)}
			res, err := st.Run(ctx, stepRequest(id, "r1", fmt.Sprintf("hello %d", i)), store, newRecordingSink())
			if err == nil && res.Status != events.StatusComplete {
				err = fmt.Errorf("status %s", res.Status)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// deskAndOrders is a Go agent: the supervisor "desk" hands the question
// to its sub-agent "orders", which answers; then desk answers too. Every
// run is two agents' answers: orders', then desk's.
func deskAndOrders(t *testing.T, ctx context.Context) adk.Agent {
	t.Helper()
	desk := &scripted{reply: func(in []*schema.Message) *schema.Message {
		for _, m := range in {
			if strings.Contains(m.Content, "[orders] said:") {
				return schema.AssistantMessage("It is on its way.", nil)
			}
		}
		return call("transfer_to_agent", `{"agent_name":"orders"}`)
	}}
	orders := &scripted{reply: func([]*schema.Message) *schema.Message { return schema.AssistantMessage("ORD-7 shipped. ", nil) }}
	root, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "desk", Description: "Routes questions.", Instruction: "Route.", Model: desk})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "orders", Description: "Knows orders.", Instruction: "Answer.", Model: orders})
	if err != nil {
		t.Fatal(err)
	}
	a, err := supervisor.New(ctx, &supervisor.Config{Supervisor: root, SubAgents: []adk.Agent{sub}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestHistoryV1DecidesTheFormatOfANewConversationsTurns is a rolling
// upgrade from a release before parts (docs/deploy.md): with HistoryV1
// a step stores a supervisor and sub-agent turn of a new
// conversation as that release did (a version 1 document, the answer
// joined under the last agent), and one of a conversation whose last
// turn is of version 2 in version 2; without it, in version 2.
func TestHistoryV1DecidesTheFormatOfANewConversationsTurns(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	db := testenv.MongoDB(t)
	store, err := history.NewMongoStore(ctx, db, history.MongoConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		v1   bool
		// afterV2: the conversation already has a version 2 turn.
		afterV2 bool
		// messages is what List reads; v the stored document's version.
		messages []string
		v        any
	}{
		{
			name:     "With HistoryV1, a new conversation's turn is one message, as the release before parts stored it.",
			v1:       true,
			messages: []string{"1 user : q", "2 assistant desk: ORD-7 shipped. It is on its way."},
			v:        nil,
		},
		{
			name:     "Without HistoryV1, a new conversation's turn is one message per agent.",
			messages: []string{"1 user : q", "2 assistant orders: ORD-7 shipped. ", "3 assistant desk: It is on its way."},
			v:        int32(2),
		},
		{
			name:     "With HistoryV1, a conversation whose last turn is of version 2 goes on in version 2.",
			v1:       true,
			afterV2:  true,
			messages: []string{"1 user : q0", "2 assistant a: x", "3 assistant b: y", "4 user : q", "5 assistant orders: ORD-7 shipped. ", "6 assistant desk: It is on its way."},
			v:        int32(2),
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := events.Identity{Tenant: "upgrade", User: "u", Conversation: fmt.Sprintf("c%d", i)}
			n := int64(1)
			if tc.afterV2 {
				if _, err := store.Commit(ctx, id, history.Turn{RequestID: "r0", User: "q0", Status: events.StatusComplete,
					Parts: []history.Part{{Agent: "a", Text: "x"}, {Agent: "b", Text: "y"}}}); err != nil {
					t.Fatal(err)
				}
				n = 2
			}
			c := stepConfig()
			c.HistoryV1 = tc.v1
			st := newStep(t, c, worker.WithAgent(deskAndOrders(t, ctx)))
			res, err := st.Run(ctx, stepRequest(id, "r1", "q"), store, newRecordingSink())
			if err != nil || res.Status != events.StatusComplete || res.Committed.N != n {
				t.Fatalf("Run = %+v, %v", res, err)
			}
			page, err := store.List(ctx, id, 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range page.Messages {
				got = append(got, fmt.Sprintf("%d %s %s: %s", m.Seq, m.Role, m.Agent, m.Content))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.messages) {
				t.Errorf("history %q, want %q", got, tc.messages)
			}
			var raw bson.M
			if err := db.Collection("turns").FindOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("%s#%012d", id.Key(), n)}}).Decode(&raw); err != nil {
				t.Fatal(err)
			}
			if raw["v"] != tc.v {
				t.Errorf("stored turn %d has v %v, want %v: %v", n, raw["v"], tc.v, raw)
			}
		})
	}
}

// NewStep refuses the journal settings the worker refuses: a Step (the
// shadow replay's, a pipeline of one's own) with a journal limit past
// history.MaxJournalBytes would fail every journal write of a durable
// agent as invalid, and a divergence policy neither live nor fail would
// silently mean live.
func TestNewStepRefusesTheJournalSettingsTheWorkerRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		set  func(*worker.Config)
	}{
		{"A journal limit past history.MaxJournalBytes is refused.", func(c *worker.Config) { c.JournalBytes = history.MaxJournalBytes + 1 }},
		{"A step limit below 1 is refused.", func(c *worker.Config) { c.JournalStepBytes = -1 }},
		{"A divergence policy that is neither live nor fail is refused.", func(c *worker.Config) { c.JournalDivergence = "Fail" }},
		{"A negative journal TTL is refused.", func(c *worker.Config) { c.JournalTTL = -time.Hour }},
	} {
		c := stepConfig()
		tt.set(&c)
		if _, err := worker.NewStep(c, worker.WithLogger(slog.New(slog.DiscardHandler))); err == nil {
			t.Errorf("%s NewStep accepted it", tt.name)
		}
	}
}

// TestTheArtifactSweepAgeIsTheConsumersSetting: the sweep's age is
// checked against the run timeout by the worker (New), which sweeps, and
// not by NewStep, which sweeps nothing: pkg/replay sets RunTimeout from
// TURNPIKE_RUN_TIMEOUT and has no sweep-age setting, so a long run
// timeout must not stop a replay from starting.
func TestTheArtifactSweepAgeIsTheConsumersSetting(t *testing.T) {
	t.Parallel()
	c := stepConfig()
	c.RunTimeout = 30 * time.Hour // past the default sweep age (24h)
	if _, err := worker.NewStep(c, worker.WithLogger(slog.New(slog.DiscardHandler))); err != nil {
		t.Errorf("NewStep with RunTimeout 30h (the default sweep age 24h) = %v, want accepted: a step sweeps nothing", err)
	}
	w := stepConfig()
	w.Brokers, w.MongoURI = []string{"kafka:9092"}, "mongodb://mongo:27017"
	if _, err := worker.New(w, worker.WithLogger(slog.New(slog.DiscardHandler))); err != nil {
		t.Fatalf("New with the defaults: %v", err)
	}
	just := w
	just.RunTimeout, just.MaxAttempts, just.RetryBackoffMax, just.ArtifactSweepAge = 2*time.Hour, 3, time.Minute, 6*time.Hour+2*time.Minute+time.Second
	if _, err := worker.New(just, worker.WithLogger(slog.New(slog.DiscardHandler))); err != nil {
		t.Errorf("New with a sweep age just past MaxAttempts × RunTimeout + the backoffs: %v", err)
	}
	for _, tt := range []struct {
		name string
		set  func(*worker.Config)
	}{
		{"RunTimeout 30h, past the sweep age", func(c *worker.Config) { c.RunTimeout = 30 * time.Hour }},
		{"a sweep age under an hour", func(c *worker.Config) { c.ArtifactSweepAge = 59 * time.Minute }},
		// Past RunTimeout but not past the durable re-runs: 5 attempts of
		// 5h (plus 4 backoffs) make a save up to 25h old at its publish.
		{"RunTimeout 5h and 5 attempts, past the sweep age (24h) together", func(c *worker.Config) { c.RunTimeout, c.MaxAttempts = 5*time.Hour, 5 }},
		{"a sweep age equal to MaxAttempts × RunTimeout + the backoffs", func(c *worker.Config) {
			c.RunTimeout, c.MaxAttempts, c.RetryBackoffMax, c.ArtifactSweepAge = 2*time.Hour, 3, time.Minute, 6*time.Hour+2*time.Minute
		}},
	} {
		c := w
		tt.set(&c)
		if _, err := worker.New(c, worker.WithLogger(slog.New(slog.DiscardHandler))); err == nil || !strings.Contains(err.Error(), "ArtifactSweepAge") {
			t.Errorf("New with %s = %v, want refused (ArtifactSweepAge)", tt.name, err)
		}
	}
}
