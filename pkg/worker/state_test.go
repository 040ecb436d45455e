package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// stateTool is a tool whose body works on the run's session state
// (worker.StateFromContext); its result is what body returns.
type stateTool struct {
	name string
	body func(ctx context.Context, st *worker.State) (string, error)
}

func (s stateTool) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{Name: s.name, Desc: "works on the session state"}, nil
}

func (s stateTool) InvokableRun(ctx context.Context, _ string, _ ...tool.Option) (string, error) {
	return s.body(ctx, worker.StateFromContext(ctx))
}

// toolThenSay is a model that calls tool name once, then answers with
// say(the tool's result).
func toolThenSay(name string, say func(result string) string) *scripted {
	return &scripted{reply: func(in []*schema.Message) *schema.Message {
		if last := lastOf(in); last.Role == schema.Tool {
			return schema.AssistantMessage(say(last.Content), nil)
		}
		return call(name, `{}`)
	}}
}

// stateStep is a step whose agent, built per run, calls tool t and
// answers with say(its result).
func stateStep(t *testing.T, st stateTool, say func(string) string) *worker.Step {
	t.Helper()
	return newStep(t, stepConfig(), worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		return toolAgent(ctx, toolThenSay(st.name, say), st)
	}))
}

func echoResult(s string) string { return "said " + s }

// countTool increments the conversation's "count", sets a temp: key (after
// checking no earlier run left one) and reports the count.
var countTool = stateTool{name: "count", body: func(ctx context.Context, st *worker.State) (string, error) {
	var n int
	if _, err := st.Get(ctx, "count", &n); err != nil {
		return "", err
	}
	var tmp string
	if found, err := st.Get(ctx, "temp:scratch", &tmp); err != nil || found {
		return "", fmt.Errorf("temp:scratch of an earlier run found (%v, %v)", found, err)
	}
	if err := st.Set("temp:scratch", "x"); err != nil {
		return "", err
	}
	n++
	return fmt.Sprint(n), st.Set("count", n)
}}

// The conversation's state a run sets is what its next run reads; temp:
// keys are gone by then.
func TestStateIsRestoredInTheConversationsNextTurn(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	step := stateStep(t, countTool, echoResult)
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "count"}
	other := events.Identity{Tenant: "acme", User: "ann", Conversation: "count-2"}
	for i, want := range []string{"said 1", "said 2", "said 3"} {
		res, err := step.Run(ctx, stepRequest(id, fmt.Sprintf("r%d", i+1), "count"), store, newRecordingSink())
		if err != nil || res.Answer != want {
			t.Fatalf("turn %d: %+v, %v; want the answer %q", i+1, res, err, want)
		}
	}
	// Another conversation of the user has its own.
	res, err := step.Run(ctx, stepRequest(other, "r1", "count"), store, newRecordingSink())
	if err != nil || res.Answer != "said 1" {
		t.Fatalf("another conversation: %+v, %v; want said 1", res, err)
	}
}

// A run that persists nothing changes no state, of any scope: a run
// discarded (an empty answer) and a run aborted after its tool set state.
func TestStateOfARunThatPersistedNothingIsNotKept(t *testing.T) {
	t.Parallel()
	setAll := stateTool{name: "set", body: func(ctx context.Context, st *worker.State) (string, error) {
		return "set", errors.Join(st.Set("k", "lost"), st.Set("user:k", "lost"), st.Set("tenant:k", "lost"))
	}}
	read := stateTool{name: "read", body: func(ctx context.Context, st *worker.State) (string, error) {
		var got []string
		for _, k := range []string{"k", "user:k", "tenant:k"} {
			var v string
			found, err := st.Get(ctx, k, &v)
			if err != nil {
				return "", err
			}
			if found {
				got = append(got, k+"="+v)
			}
		}
		return strings.Join(got, ","), nil
	}}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, ctx context.Context, store history.Store, id events.Identity)
	}{
		{"A run whose answer is empty is discarded and keeps no state", func(t *testing.T, ctx context.Context, store history.Store, id events.Identity) {
			step := stateStep(t, setAll, func(string) string { return "" })
			res, err := step.Run(ctx, stepRequest(id, "r1", "set"), store, newRecordingSink())
			if err != nil || res.Status != events.StatusDiscarded {
				t.Fatalf("run: %+v, %v; want discarded", res, err)
			}
		}},
		{"A run aborted after its tool set state keeps none", func(t *testing.T, ctx context.Context, store history.Store, id events.Identity) {
			reached := make(chan struct{})
			m := &blockAfterTool{reached: reached}
			step := newStep(t, stepConfig(), worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
				return toolAgent(ctx, m, setAll)
			}))
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := step.Run(runCtx, stepRequest(id, "r1", "set"), store, newRecordingSink())
				done <- err
			}()
			select {
			case <-reached: // the tool ran: the state is set in the run
			case <-ctx.Done():
				t.Fatal("the tool never ran")
			}
			cancel()
			if err := <-done; !errors.Is(err, bridge.ErrAborted) {
				t.Fatalf("Run = %v, want bridge.ErrAborted", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 30*time.Second)
			store := history.NewMemoryStore()
			id := events.Identity{Tenant: "acme", User: "ann", Conversation: "nothing"}
			tc.run(t, ctx, store, id)
			res, err := stateStep(t, read, echoResult).Run(ctx, stepRequest(id, "r2", "read"), store, newRecordingSink())
			if err != nil || res.Answer != "said " {
				t.Fatalf("the next run read %+v, %v; want no state (said )", res, err)
			}
		})
	}
}

// blockAfterTool calls tool "set", then blocks its next call until its
// context ends (closing reached first).
type blockAfterTool struct{ reached chan struct{} }

func (m *blockAfterTool) Generate(ctx context.Context, in []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	return nil, errors.New("not used")
}

func (m *blockAfterTool) Stream(ctx context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	if lastOf(in).Role != schema.Tool {
		return schema.StreamReaderFromArray([]*schema.Message{call("set", `{}`)}), nil
	}
	close(m.reached)
	<-ctx.Done()
	return nil, ctx.Err()
}

func (m *blockAfterTool) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	return m, nil
}

// readKey is a tool that reports key's value ("-" when not set).
func readKey(key string) stateTool {
	return stateTool{name: "read", body: func(ctx context.Context, st *worker.State) (string, error) {
		var v string
		found, err := st.Get(ctx, key, &v)
		if err != nil || !found {
			return "-", err
		}
		return v, nil
	}}
}

// user: state is shared by the user's conversations, tenant: state by the
// tenant's; another user or tenant never reads either.
func TestUserAndTenantStateAreSharedByTheirConversationsOnly(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	store := history.NewMemoryStore()
	set := stateTool{name: "set", body: func(ctx context.Context, st *worker.State) (string, error) {
		return "ok", errors.Join(st.Set("user:lang", "fr"), st.Set("tenant:banner", "sale"), st.Set("lang", "conversation's"))
	}}
	ann1 := events.Identity{Tenant: "acme", User: "ann", Conversation: "c1"}
	if res, err := stateStep(t, set, echoResult).Run(ctx, stepRequest(ann1, "r1", "set"), store, newRecordingSink()); err != nil || res.Status != events.StatusComplete {
		t.Fatalf("setting run: %+v, %v", res, err)
	}
	for _, tc := range []struct {
		name string
		id   events.Identity
		key  string
		want string
	}{
		{"another conversation of the user reads its user: key", events.Identity{Tenant: "acme", User: "ann", Conversation: "c2"}, "user:lang", "said fr"},
		{"another conversation of the user does not read the first one's conversation key", events.Identity{Tenant: "acme", User: "ann", Conversation: "c2"}, "lang", "said -"},
		{"another user of the tenant reads its tenant: key", events.Identity{Tenant: "acme", User: "bob", Conversation: "c1"}, "tenant:banner", "said sale"},
		{"another user of the tenant does not read the user: key", events.Identity{Tenant: "acme", User: "bob", Conversation: "c1"}, "user:lang", "said -"},
		{"the same user name in another tenant does not read the user: key", events.Identity{Tenant: "other", User: "ann", Conversation: "c1"}, "user:lang", "said -"},
		{"another tenant does not read the tenant: key", events.Identity{Tenant: "other", User: "ann", Conversation: "c1"}, "tenant:banner", "said -"},
	} {
		res, err := stateStep(t, readKey(tc.key), echoResult).Run(ctx, stepRequest(tc.id, "read-"+strings.ReplaceAll(tc.key, ":", "-"), "read"), store, newRecordingSink())
		if err != nil || res.Answer != tc.want {
			t.Errorf("%s: %+v, %v; want %q", tc.name, res.Answer, err, tc.want)
		}
	}
}

// Set refuses, with ErrStateLimit and changing nothing, a value, key or
// scope over the limits; bad keys and values fail too. Nothing is
// truncated.
func TestStateLimitsAreClearErrors(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	var errs []string
	probe := stateTool{name: "probe", body: func(ctx context.Context, st *worker.State) (string, error) {
		check := func(what string, err error, want error) {
			if !errors.Is(err, want) {
				errs = append(errs, fmt.Sprintf("%s: %v, want %v", what, err, want))
			}
		}
		big := strings.Repeat("x", history.MaxStateValueBytes)
		check("a value over MaxStateValueBytes", st.Set("big", big), worker.ErrStateLimit)
		if found, _ := st.Get(ctx, "big", new(string)); found {
			errs = append(errs, "a refused value was kept")
		}
		for i := range history.MaxStateKeys {
			if err := st.Set(fmt.Sprintf("k%d", i), i); err != nil {
				errs = append(errs, fmt.Sprintf("key %d of %d: %v", i, history.MaxStateKeys, err))
			}
		}
		check("one key more than MaxStateKeys", st.Set("one-more", 1), worker.ErrStateLimit)
		check("a key over MaxStateKeyBytes", st.Set(strings.Repeat("k", history.MaxStateKeyBytes+1), 1), events.ErrInvalid)
		check("an ADK app: key", st.Set("app:x", 1), events.ErrInvalid)
		if err := st.Set("ch", make(chan int)); !errors.As(err, new(*json.UnsupportedTypeError)) {
			errs = append(errs, fmt.Sprintf("a value JSON cannot encode: %v, want a json.UnsupportedTypeError", err))
		}
		half := strings.Repeat("y", history.MaxStateValueBytes-100)
		var err error
		for i := 0; err == nil && i < history.MaxStateBytes/len(half)+1; i++ {
			err = st.Set(fmt.Sprintf("user:half%d", i), half)
		}
		check("user: changes over MaxStateBytes", err, worker.ErrStateLimit)
		return "probed", nil
	}}
	res, err := stateStep(t, probe, echoResult).Run(ctx, stepRequest(events.Identity{Tenant: "acme", User: "ann", Conversation: "limits"}, "r1", "probe"),
		history.NewMemoryStore(), newRecordingSink())
	if err != nil || res.Status != events.StatusComplete {
		t.Fatalf("run: %+v, %v", res, err)
	}
	for _, e := range errs {
		t.Error(e)
	}
}

// Outside a worker run there is no state: its methods say so.
func TestStateFromAContextOutsideARunIsNil(t *testing.T) {
	t.Parallel()
	st := worker.StateFromContext(context.Background())
	if st != nil {
		t.Fatal("a state outside a run")
	}
	if err := st.Set("k", 1); !errors.Is(err, worker.ErrNoState) {
		t.Fatalf("Set on no state = %v, want ErrNoState", err)
	}
}

// Conversations of one user run at once on the embedded MongoStore, each
// setting a user: key of its own and one they share: every own key lands,
// and the shared key holds the value of the turn committed last (the
// newest stamp: commit time in milliseconds, then the turn's _id).
func TestConcurrentUserStateUpdatesOnMongoStore(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store, err := history.NewMongoStore(ctx, testenv.MongoDB(t), history.MongoConfig{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	set := stateTool{name: "set", body: func(ctx context.Context, st *worker.State) (string, error) {
		r, _ := worker.RequestFromContext(ctx)
		conv := r.Conversation
		return conv, errors.Join(st.Set("user:own-"+conv, conv), st.Set("user:shared", conv))
	}}
	step := stateStep(t, set, echoResult)
	var wg sync.WaitGroup
	results := make([]bridge.Result, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := events.Identity{Tenant: "acme", User: "ann", Conversation: fmt.Sprintf("c%d", i)}
			results[i], errs[i] = step.Run(ctx, stepRequest(id, "r1", "set"), store, newRecordingSink())
		}()
	}
	wg.Wait()
	newest, newestStamp := "", ""
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("c%d: %v", i, errs[i])
		}
		id := events.Identity{Tenant: "acme", User: "ann", Conversation: fmt.Sprintf("c%d", i)}
		w, err := store.Window(ctx, id, 2)
		if err != nil || len(w) != 2 {
			t.Fatalf("c%d's turn: %v, %v", i, w, err)
		}
		stamp := fmt.Sprintf("%013d#%s#%012d", w[1].CreatedAt.UnixMilli(), id.Key(), 1)
		if stamp > newestStamp {
			newest, newestStamp = id.Conversation, stamp
		}
	}
	m, err := store.ScopeState(ctx, "acme", "ann")
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		conv := fmt.Sprintf("c%d", i)
		if got := string(m["own-"+conv]); got != `"`+conv+`"` {
			t.Errorf("user:own-%s = %s, want %q (lost to a concurrent update of another key)", conv, got, conv)
		}
	}
	if got := string(m["shared"]); got != `"`+newest+`"` {
		t.Errorf("user:shared = %s, want %q: the turn committed last", got, newest)
	}
}

// deskAndBilling is a tree of two ChatModelAgents made with
// adk.SetSubAgents (no supervisor: the sub-agent does not hand back): the
// desk transfers to billing on "billing", and billing answers everything.
func deskAndBilling(ctx context.Context, desk, billing *scripted) (adk.Agent, error) {
	d, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "desk", Description: "front desk", Model: desk})
	if err != nil {
		return nil, err
	}
	b, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "billing", Description: "billing questions", Model: billing})
	if err != nil {
		return nil, err
	}
	return adk.SetSubAgents(ctx, d, []adk.Agent{b})
}

func startedOf(t *testing.T, sink *recordingSink) *events.RunStartedEvent {
	t.Helper()
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, e := range sink.evs {
		if s, ok := e.(*events.RunStartedEvent); ok {
			return s
		}
	}
	t.Fatal("no run.started")
	return nil
}

// An agent transferred to in turn 1 that does not hand back answers turn
// 2: the run starts from it (run.started says so) and the root's model is
// not called; when the tree no longer has it, the run starts from the root.
func TestATransferredAgentAnswersTheNextTurn(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	desk := &scripted{reply: func(in []*schema.Message) *schema.Message {
		if strings.Contains(lastOf(in).Content, "billing") {
			return call(adk.TransferToAgentToolName, `{"agent_name":"billing"}`)
		}
		return schema.AssistantMessage("desk here", nil)
	}}
	billing := &scripted{reply: func([]*schema.Message) *schema.Message { return schema.AssistantMessage("billing here", nil) }}
	step := newStep(t, stepConfig(), worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		return deskAndBilling(ctx, desk, billing)
	}))
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "transfer"}
	sink1 := newRecordingSink()
	res, err := step.Run(ctx, stepRequest(id, "r1", "a billing question"), store, sink1)
	if err != nil || res.Agent != "billing" || res.Answer != "billing here" {
		t.Fatalf("turn 1: %+v, %v; want billing's answer", res, err)
	}
	if a := startedOf(t, sink1).Agent; a != "" {
		t.Errorf("turn 1's run.started agent = %q, want none (the root)", a)
	}
	deskCalls := len(desk.seen())
	sink2 := newRecordingSink()
	res, err = step.Run(ctx, stepRequest(id, "r2", "and another thing"), store, sink2)
	if err != nil || res.Agent != "billing" || res.Answer != "billing here" {
		t.Fatalf("turn 2: %+v, %v; want billing's answer", res, err)
	}
	if got := len(desk.seen()); got != deskCalls {
		t.Errorf("the desk's model was called %d more times in turn 2, want none", got-deskCalls)
	}
	if a := startedOf(t, sink2).Agent; a != "billing" {
		t.Errorf("turn 2's run.started agent = %q, want billing", a)
	}
	// The tree changed and has no billing any more: the root answers.
	alone := newStep(t, stepConfig(), worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "desk", Description: "front desk", Model: desk})
	}))
	sink3 := newRecordingSink()
	res, err = alone.Run(ctx, stepRequest(id, "r3", "anyone?"), store, sink3)
	if err != nil || res.Agent != "desk" || res.Answer != "desk here" {
		t.Fatalf("turn 3 without billing in the tree: %+v, %v; want the desk's answer", res, err)
	}
	if a := startedOf(t, sink3).Agent; a != "" {
		t.Errorf("turn 3's run.started agent = %q, want none (the root)", a)
	}
	// And the conversation is the root's again.
	sink4 := newRecordingSink()
	if res, err = step.Run(ctx, stepRequest(id, "r4", "hello"), store, sink4); err != nil || res.Agent != "desk" {
		t.Fatalf("turn 4: %+v, %v; want the desk's answer", res, err)
	}
}

// stallOnce calls tool "count", then, the first time only, blocks its
// next call until its context ends (closing reached); afterwards it
// answers with the tool's result.
type stallOnce struct {
	reached chan struct{}
	once    sync.Once
}

func (m *stallOnce) Generate(context.Context, []*schema.Message, ...model.Option) (*schema.Message, error) {
	return nil, errors.New("not used")
}

func (m *stallOnce) Stream(ctx context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	last := lastOf(in)
	if last.Role != schema.Tool {
		return schema.StreamReaderFromArray([]*schema.Message{call("count", `{}`)}), nil
	}
	stall := false
	m.once.Do(func() { stall = true })
	if stall {
		close(m.reached)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return schema.StreamReaderFromArray([]*schema.Message{schema.AssistantMessage("said "+last.Content, nil)}), nil
}

func (m *stallOnce) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return m, nil }

// A durable run's re-run replays a recorded tool step without running
// the tool, and sets the state that tool set in the first run again: the
// turn commits it, and the conversation's next request reads it.
func TestARerunRestoresTheStateOfAReplayedToolStep(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	var mu sync.Mutex
	ran := 0
	counting := stateTool{name: "count", body: func(ctx context.Context, st *worker.State) (string, error) {
		mu.Lock()
		ran++
		mu.Unlock()
		return countTool.body(ctx, st)
	}}
	m := &stallOnce{reached: make(chan struct{})}
	step := newStep(t, stepConfig(), worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		return adk.NewChatModelAgent(ctx, worker.Durable(&adk.ChatModelAgentConfig{Name: "assistant", Description: "counts", Model: m,
			ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{counting}}}}))
	}))
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "durable-state"}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := step.Run(runCtx, stepRequest(id, "r1", "count"), store, newRecordingSink())
		done <- err
	}()
	select {
	case <-m.reached: // the tool ran and its step is recorded
	case <-ctx.Done():
		t.Fatal("the tool never ran")
	}
	cancel()
	if err := <-done; !errors.Is(err, bridge.ErrAborted) {
		t.Fatalf("first run = %v, want bridge.ErrAborted", err)
	}
	res, err := step.Run(ctx, stepRequest(id, "r1", "count"), store, newRecordingSink())
	if err != nil || res.Answer != "said 1" {
		t.Fatalf("the re-run: %+v, %v; want said 1 (replayed)", res, err)
	}
	res, err = step.Run(ctx, stepRequest(id, "r2", "count"), store, newRecordingSink())
	if err != nil || res.Answer != "said 2" {
		t.Fatalf("the next request: %+v, %v; want said 2 (the replayed step's count kept)", res.Answer, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran != 2 {
		t.Errorf("the tool ran %d times, want 2 (once per request)", ran)
	}
}

// A run that starts from the sub-agent the conversation was left with and
// interrupts is resumed from that agent, where its checkpoint was taken.
func TestAnInterruptOfATransferredAgentIsResumedFromIt(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	desk := &scripted{reply: func(in []*schema.Message) *schema.Message {
		if strings.Contains(lastOf(in).Content, "billing") {
			return call(adk.TransferToAgentToolName, `{"agent_name":"billing"}`)
		}
		return schema.AssistantMessage("desk here", nil)
	}}
	billing := &scripted{reply: func(in []*schema.Message) *schema.Message {
		switch last := lastOf(in); {
		case last.Role == schema.Tool:
			return schema.AssistantMessage("booked for "+last.Content, nil)
		case strings.Contains(last.Content, "book"):
			return call("ask_user", `{"question":"For how many?"}`)
		}
		return schema.AssistantMessage("billing here", nil)
	}}
	step := newStep(t, stepConfig(), worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		d, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "desk", Description: "front desk", Model: desk})
		if err != nil {
			return nil, err
		}
		b, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "billing", Description: "billing questions", Model: billing,
			ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{worker.AskUser()}}}})
		if err != nil {
			return nil, err
		}
		return adk.SetSubAgents(ctx, d, []adk.Agent{b})
	}))
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "transfer-resume"}
	if res, err := step.Run(ctx, stepRequest(id, "r1", "a billing question"), store, newRecordingSink()); err != nil || res.Agent != "billing" {
		t.Fatalf("turn 1: %+v, %v; want billing's answer", res, err)
	}
	res, err := step.Run(ctx, stepRequest(id, "r2", "book a table"), store, newRecordingSink())
	if err != nil || res.Status != events.StatusInterrupted {
		t.Fatalf("turn 2: %+v, %v; want interrupted by billing", res, err)
	}
	resume := stepRequest(id, "r3", "four")
	resume.ResumeOf = "r2"
	sink := newRecordingSink()
	res, err = step.Run(ctx, resume, store, sink)
	if err != nil || res.Status != events.StatusComplete || res.Answer != "booked for four" {
		t.Fatalf("the resume: %+v, %v; want billing's booked for four", res, err)
	}
	if a := startedOf(t, sink).Agent; a != "billing" {
		t.Errorf("the resume's run.started agent = %q, want billing", a)
	}
}

// stateChanged returns the state.changed events sink got, each as
// "conversation keys|user keys", and every event encoded.
func stateChanged(sink *recordingSink) (changed []string, encoded string) {
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var b strings.Builder
	for _, e := range sink.evs {
		b.Write(events.MarshalEvent(e))
		if sc, ok := e.(*events.StateChangedEvent); ok {
			changed = append(changed, strings.Join(sc.Conversation, ",")+"|"+strings.Join(sc.User, ","))
		}
	}
	return changed, b.String()
}

// A run whose committed turn changed state is followed by one
// state.changed naming exactly the conversation and user keys it set or
// deleted, never a value, nor a tenant: or temp: key, right before
// run.completed; a run that changed nothing, or persisted nothing, emits
// none.
func TestStateChangedNamesTheKeysTheCommittedTurnChanged(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "changed"}
	set := func(ops func(st *worker.State) error) stateTool {
		return stateTool{name: "set", body: func(_ context.Context, st *worker.State) (string, error) { return "ok", ops(st) }}
	}
	runs := []struct {
		name   string
		tool   stateTool
		say    func(string) string
		status events.Status
		want   []string
	}{
		{name: "A run that sets a conversation key names it.",
			tool: set(func(st *worker.State) error { return st.Set("old", 1) }), say: echoResult, status: events.StatusComplete, want: []string{"old|"}},
		{name: "A run that sets, deletes and writes every scope names its conversation and user keys only.",
			tool: set(func(st *worker.State) error {
				return errors.Join(st.Set("cart", []string{"apple-secret"}), st.Delete("old"), st.Set("user:language", "fr-secret"),
					st.Set("tenant:plan", "pro-secret"), st.Set("temp:scratch", "tmp-secret"))
			}), say: echoResult, status: events.StatusComplete, want: []string{"cart,old|language"}},
		{name: "A run that changes no key emits no state.changed.",
			tool: readKey("user:language"), say: func(string) string { return "read" }, status: events.StatusComplete},
		{name: "A run that changes keys but persists nothing (discarded) emits no state.changed.",
			tool: set(func(st *worker.State) error { return st.Set("lost", 1) }), say: func(string) string { return "" }, status: events.StatusDiscarded},
	}
	for i, r := range runs {
		sink := newRecordingSink()
		res, err := stateStep(t, r.tool, r.say).Run(ctx, stepRequest(id, fmt.Sprintf("r%d", i+1), "go"), store, sink)
		if err != nil || res.Status != r.status {
			t.Fatalf("%s: run %+v, %v; want %s", r.name, res, err, r.status)
		}
		got, encoded := stateChanged(sink)
		if strings.Join(got, " ") != strings.Join(r.want, " ") {
			t.Errorf("%s: state.changed %q, want %q", r.name, got, r.want)
		}
		for _, leak := range []string{"secret", "plan", "scratch"} {
			if strings.Contains(encoded, leak) {
				t.Errorf("%s: the stream holds %q: %s", r.name, leak, encoded)
			}
		}
		if types := sink.types(); len(r.want) > 0 && (len(types) < 2 || types[len(types)-2] != events.TypeStateChanged) {
			t.Errorf("%s: events %v, want state.changed right before run.completed", r.name, types)
		}
	}
}
