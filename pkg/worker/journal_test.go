package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/adk/prebuilt/supervisor"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// The journal's test agent: a model whose answer is a function of how many
// tool results its input holds (0: call charge, 1: call mail, 2: the final
// answer), and the two tools, each counting its side effects.

// Where a run can be stopped (a crash: the run is aborted, nothing more is
// written, and the request runs again).
type crashPoint int

const (
	noCrash           crashPoint = iota
	firstModel                   // as the first model call starts
	beforeCharge                 // as the charge tool starts: the model's first output is recorded
	beforeSecondModel            // as the second model call starts: charge's result is recorded
	beforeMail                   // as the mail tool starts: the second output is recorded
	beforeFinalModel             // as the final model call starts: mail's result is recorded
	afterChargeEffect            // between charge's side effect and its result's record
	midFinalAnswer               // after the final answer's first chunk
)

// journalAgent is the test agent and its counts.
type journalAgent struct {
	mu      sync.Mutex
	crashAt crashPoint
	crash   func() // stops the run (cancels Step.Run's context)
	models  [3]int // model calls that generated output, by step
	effects map[string]int
	steps   map[string][]worker.ToolStep
	// onStart, if set, is called at each point a run passes.
	onStart func(ctx context.Context, p crashPoint)
	// block, if set, is called at each point a run passes, after onStart
	// (it may wait).
	block func(ctx context.Context, p crashPoint)
	// instruction is the agent's (a change makes a re-run diverge).
	instruction string
}

func newJournalAgent() *journalAgent {
	return &journalAgent{effects: map[string]int{}, steps: map[string][]worker.ToolStep{}}
}

// at stops the run if p is where it crashes: it waits until the abort
// reached ctx and returns ctx's error.
func (a *journalAgent) at(ctx context.Context, p crashPoint) error {
	if a.onStart != nil {
		a.onStart(ctx, p)
	}
	if a.block != nil {
		a.block(ctx, p)
	}
	a.mu.Lock()
	crash := p != noCrash && a.crashAt == p && a.crash != nil
	if crash {
		a.crashAt = noCrash
	}
	a.mu.Unlock()
	if !crash {
		return nil
	}
	a.crash()
	<-ctx.Done()
	return ctx.Err()
}

func (a *journalAgent) counts() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return fmt.Sprintf("models %d %d %d, charge %d, mail %d", a.models[0], a.models[1], a.models[2], a.effects["charge"], a.effects["mail"])
}

func (a *journalAgent) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	return a, nil
}

func (a *journalAgent) Generate(ctx context.Context, in []*schema.Message, opts ...model.Option) (*schema.Message, error) {
	s, err := a.Stream(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	var chunks []*schema.Message
	for {
		c, err := s.Recv()
		if err != nil {
			if strings.Contains(err.Error(), "EOF") {
				return schema.ConcatMessages(chunks)
			}
			return nil, err
		}
		chunks = append(chunks, c)
	}
}

func (a *journalAgent) Stream(ctx context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	step := 0
	for _, m := range in {
		if m.Role == schema.Tool {
			step++
		}
	}
	if err := a.at(ctx, [...]crashPoint{firstModel, beforeSecondModel, beforeFinalModel}[step]); err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.models[step]++
	a.mu.Unlock()
	usage := &schema.ResponseMeta{FinishReason: "stop", Usage: &schema.TokenUsage{PromptTokens: 10, CompletionTokens: 2, TotalTokens: 12}}
	callOf := func(text, name string) []*schema.Message {
		c := schema.AssistantMessage("", []schema.ToolCall{{ID: "call-" + name, Type: "function", Function: schema.FunctionCall{Name: name, Arguments: `{"order":"o-1"}`}}})
		c.ResponseMeta = usage
		return []*schema.Message{schema.AssistantMessage(text, nil), c}
	}
	switch step {
	case 0:
		return schema.StreamReaderFromArray(callOf("Charging. ", "charge")), nil
	case 1:
		return schema.StreamReaderFromArray(callOf("Mailing. ", "mail")), nil
	}
	var results []string
	for _, m := range in {
		if m.Role == schema.Tool {
			results = append(results, m.Content)
		}
	}
	r, w := schema.Pipe[*schema.Message](1)
	go func() {
		defer w.Close()
		w.Send(schema.AssistantMessage("done: ", nil), nil)
		if err := a.at(ctx, midFinalAnswer); err != nil {
			w.Send(nil, err)
			return
		}
		last := schema.AssistantMessage(strings.Join(results, ", "), nil)
		last.ResponseMeta = usage
		w.Send(last, nil)
	}()
	return r, nil
}

// sideEffect is a tool that counts its side effects.
type sideEffect struct {
	a      *journalAgent
	name   string
	before crashPoint // stop as it starts
	after  crashPoint // stop after the side effect, before it returns
}

func (t sideEffect) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{Name: t.name, Desc: t.name + " the order"}, nil
}

func (t sideEffect) InvokableRun(ctx context.Context, _ string, _ ...tool.Option) (string, error) {
	if err := t.a.at(ctx, t.before); err != nil {
		return "", err
	}
	t.a.mu.Lock()
	t.a.effects[t.name]++
	if s, ok := worker.ToolStepFromContext(ctx); ok {
		t.a.steps[t.name] = append(t.a.steps[t.name], s)
	}
	t.a.mu.Unlock()
	if err := t.a.at(ctx, t.after); err != nil {
		return t.name + "d", nil // done, but the process dies before anyone records it
	}
	return t.name + "d", nil
}

// durableFactory builds the durable agent of a (a ChatModelAgent with
// tools: one per run).
func (a *journalAgent) factory() worker.AgentFactory {
	return func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		return adk.NewChatModelAgent(ctx, worker.Durable(&adk.ChatModelAgentConfig{
			Name: "assistant", Description: "orders", Model: a, Instruction: a.instruction,
			ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{
				sideEffect{a: a, name: "charge", before: beforeCharge, after: afterChargeEffect},
				sideEffect{a: a, name: "mail", before: beforeMail},
			}}},
		}))
	}
}

// The crash-point table: a run is stopped at each point of a turn with two
// tool rounds, then the request runs again on the same store. With the
// journal, every model call and tool ran once but for the step cut by the
// crash (a tool between its side effect and its record, a final answer);
// without it, the re-run repeats everything before the crash.
func TestARequestRunAgainReplaysItsJournalAndRunsEachStepOnce(t *testing.T) {
	t.Parallel()
	rows := []struct {
		name          string
		at            crashPoint
		want, wantOff string
	}{
		{"Stopped as its first tool starts, the model's output that asked for it is replayed.", beforeCharge,
			"models 1 1 1, charge 1, mail 1", "models 2 1 1, charge 1, mail 1"},
		{"Stopped as the second model call starts, the first tool's result is replayed.", beforeSecondModel,
			"models 1 1 1, charge 1, mail 1", "models 2 1 1, charge 2, mail 1"},
		{"Stopped as the second tool starts, both outputs and the first result are replayed.", beforeMail,
			"models 1 1 1, charge 1, mail 1", "models 2 2 1, charge 2, mail 1"},
		{"Stopped as the final model call starts, every tool round is replayed.", beforeFinalModel,
			"models 1 1 1, charge 1, mail 1", "models 2 2 1, charge 2, mail 2"},
		{"Stopped between a tool's side effect and its record, that tool runs again, and only it.", afterChargeEffect,
			"models 1 1 1, charge 2, mail 1", "models 2 1 1, charge 2, mail 1"},
		{"Stopped in the middle of the final answer, only the final answer is generated again.", midFinalAnswer,
			"models 1 1 2, charge 1, mail 1", "models 2 2 2, charge 2, mail 2"},
	}
	for _, row := range rows {
		for _, off := range []bool{false, true} {
			name := row.name
			want := row.want
			if off {
				name, want = "Without the journal: "+row.name, row.wantOff
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := testenv.Context(t, 60*time.Second)
				a := newJournalAgent()
				c := stepConfig()
				c.JournalOff = off
				st := newStep(t, c, worker.WithAgentFactory(a.factory()))
				store := history.NewMemoryStore()
				id := events.Identity{Tenant: "acme", User: "ann", Conversation: "orders"}
				req := stepRequest(id, "r1", "charge and mail order o-1")

				firstCtx, crash := context.WithCancel(ctx)
				a.mu.Lock()
				a.crashAt, a.crash = row.at, crash
				a.mu.Unlock()
				if _, err := st.Run(firstCtx, req, store, newRecordingSink()); !errors.Is(err, bridge.ErrAborted) {
					t.Fatalf("the first run = %v, want aborted by the crash", err)
				}
				sink := newRecordingSink()
				res, err := st.Run(ctx, req, store, sink)
				if err != nil || res.Status != events.StatusComplete || res.Answer != "done: charged, maild" {
					t.Fatalf("the re-run: %+v, %v; want complete with both results", res, err)
				}
				if got := a.counts(); got != want {
					t.Errorf("executions %q, want %q", got, want)
				}
				if off {
					return
				}
				// Usage counts each model call the answer is built from
				// once: a replayed output brings its recorded usage.
				if res.Usage == nil || res.Usage.TotalTokens != 3*12 {
					t.Errorf("the turn's usage %+v, want 3 model calls of 12 tokens", res.Usage)
				}
				if _, found, err := store.Steps(ctx, id, "r1"); found || err != nil {
					t.Errorf("the journal of a committed request is still there (%v)", err)
				}
			})
		}
	}
}

// A tool cut between its side effect and its record runs again with the
// same key and a higher attempt, so it can deduplicate at its service.
func TestAToolThatRunsAgainGetsTheSameKeyAndTheNextAttempt(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	a := newJournalAgent()
	st := newStep(t, stepConfig(), worker.WithAgentFactory(a.factory()))
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "keys"}
	req := stepRequest(id, "r1", "charge and mail")
	firstCtx, crash := context.WithCancel(ctx)
	a.crashAt, a.crash = afterChargeEffect, crash
	if _, err := st.Run(firstCtx, req, store, newRecordingSink()); !errors.Is(err, bridge.ErrAborted) {
		t.Fatalf("the first run = %v, want aborted", err)
	}
	if _, err := st.Run(ctx, req, store, newRecordingSink()); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	charges, mails := a.steps["charge"], a.steps["mail"]
	if len(charges) != 2 || charges[0].Key != charges[1].Key || charges[0].Key != "r1/t/assistant/1/call-charge" ||
		charges[0].Attempt != 1 || charges[1].Attempt != 2 {
		t.Fatalf("the charge's steps %+v, want one key, attempts 1 then 2", charges)
	}
	if len(mails) != 1 || mails[0].Key != "r1/t/assistant/2/call-mail" || mails[0].Attempt != 2 {
		t.Fatalf("the mail's steps %+v, want its key in the second run", mails)
	}
}

// slowJournal is a MemoryStore whose journal writes wait until the run
// takes its next step (or a second has passed): a step that uses an
// output or a result before it is recorded goes ahead of the write and is
// caught. The wait only makes a correct run slower, it decides nothing.
// The catch needs the next step to start within that second of the write
// it did not wait for: on a machine so loaded that it does not, the bug
// goes unseen (the test still passes on correct code). A bubble of
// testing/synctest would take the second out, but eino's stream readers
// wait on a sync.Once's mutex, which a bubble does not count as durably
// blocked: its clock never moves.
type slowJournal struct {
	*history.MemoryStore

	mu   sync.Mutex    // guards next
	next chan struct{} // closed (and replaced) when the run takes a step
}

// acted says the run took a step.
func (s *slowJournal) acted() {
	s.mu.Lock()
	close(s.next)
	s.next = make(chan struct{})
	s.mu.Unlock()
}

func (s *slowJournal) RecordStep(ctx context.Context, id events.Identity, rid string, owner int64, st history.Step, l history.JournalLimits) (history.Step, error) {
	s.mu.Lock()
	next := s.next
	s.mu.Unlock()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-next:
	case <-t.C:
	case <-ctx.Done():
	}
	return s.MemoryStore.RecordStep(ctx, id, rid, owner, st, l)
}

// No tool starts before the model output that asked for it is durable,
// and no model call starts before the tool results it reads are durable.
func TestEveryStepIsRecordedBeforeTheNextStepUsesIt(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store := &slowJournal{MemoryStore: history.NewMemoryStore(), next: make(chan struct{})}
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "order"}
	needs := map[crashPoint]string{
		beforeCharge:      "m/assistant/1",
		beforeSecondModel: "t/assistant/1/call-charge",
		beforeMail:        "m/assistant/2",
		beforeFinalModel:  "t/assistant/2/call-mail",
	}
	a := newJournalAgent()
	var mu sync.Mutex
	var missing []string
	a.onStart = func(ctx context.Context, p crashPoint) {
		key, ok := needs[p]
		if !ok {
			return
		}
		js, _, err := store.Steps(ctx, id, "r1")
		recorded := err == nil && slices.ContainsFunc(js.Steps, func(s history.Step) bool { return s.Key == key })
		if !recorded {
			mu.Lock()
			missing = append(missing, key)
			mu.Unlock()
		}
		store.acted()
	}
	st := newStep(t, stepConfig(), worker.WithAgentFactory(a.factory()))
	res, err := st.Run(ctx, stepRequest(id, "r1", "charge and mail"), store, newRecordingSink())
	if err != nil || res.Status != events.StatusComplete {
		t.Fatalf("run: %+v, %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(missing) > 0 {
		t.Fatalf("steps used before they were recorded: %v", missing)
	}
}

// A zombie (an older run of the request, still running) cannot add to the
// journal once a newer run claimed it: its late write is refused, it stops
// (fenced: the worker drops it), and the newer run completes the request.
func TestAZombiesLateJournalWriteIsRefusedAndItStops(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	a := newJournalAgent()
	st := newStep(t, stepConfig(), worker.WithAgentFactory(a.factory()))
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "zombie"}
	req := stepRequest(id, "r1", "charge and mail")

	zombieAtCharge, releaseZombie := make(chan struct{}), make(chan struct{})
	ownerAtCharge, releaseOwner := make(chan struct{}), make(chan struct{})
	var chargeCalls int
	a.block = func(ctx context.Context, p crashPoint) {
		if p != beforeCharge {
			return
		}
		a.mu.Lock()
		var wait, signal chan struct{}
		switch chargeCalls++; chargeCalls {
		case 1: // the zombie's
			signal, wait = zombieAtCharge, releaseZombie
		case 2: // the new owner's, which has written nothing yet
			signal, wait = ownerAtCharge, releaseOwner
		}
		a.mu.Unlock()
		if wait != nil {
			close(signal)
			select {
			case <-wait:
			case <-ctx.Done():
			}
		}
	}
	zombie := make(chan error, 1)
	go func() {
		_, err := st.Run(ctx, req, store, newRecordingSink())
		zombie <- err
	}()
	<-zombieAtCharge // the zombie recorded the model's first output
	owner := make(chan bridge.Result, 1)
	ownerErr := make(chan error, 1)
	go func() {
		res, err := st.Run(ctx, req, store, newRecordingSink())
		owner <- res
		ownerErr <- err
	}()
	<-ownerAtCharge // the new owner found the journal and replayed its first step
	close(releaseZombie)
	if err := <-zombie; !errors.Is(err, history.ErrFenced) {
		t.Fatalf("the zombie's run = %v, want fenced", err)
	}
	js, _, err := store.Steps(ctx, id, "r1")
	if err != nil || len(js.Steps) != 1 || js.Steps[0].Key != "m/assistant/1" || js.Runs != 2 {
		t.Fatalf("journal %+v (%v): want the first step alone, claimed by the second run, without the zombie's charge", js, err)
	}
	close(releaseOwner)
	res, err := <-owner, <-ownerErr
	if err != nil || res.Status != events.StatusComplete || res.Answer != "done: charged, maild" {
		t.Fatalf("the new owner's run: %+v, %v", res, err)
	}
	if got := a.counts(); got != "models 1 1 1, charge 2, mail 1" {
		t.Errorf("executions %q: want the first output replayed, the charge of both runs (the zombie's window), the rest once", got)
	}
	if w, err := store.Window(ctx, id, 10); err != nil || len(w) != 2 {
		t.Errorf("the conversation holds %d messages (%v), want one turn", len(w), err)
	}
}

// A step two runs race to record is recorded once: the first write wins,
// and a run whose own output lost the race stops (with an error the worker
// retries: its next attempt replays the recorded step).
func TestAStepTwoRunsRaceToRecordIsRecordedOnceAndTheLoserStops(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	a := newJournalAgent()
	st := newStep(t, stepConfig(), worker.WithAgentFactory(a.factory()))
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "race"}
	req := stepRequest(id, "r1", "charge and mail")

	started := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	release := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	firstAtCharge, releaseCharge := make(chan struct{}), make(chan struct{})
	var models, charges int
	a.block = func(ctx context.Context, p crashPoint) {
		a.mu.Lock()
		var signal, wait chan struct{}
		switch p {
		case firstModel:
			if models < 2 {
				signal, wait = started[models], release[models]
			}
			models++
		case beforeCharge:
			if charges++; charges == 1 {
				signal, wait = firstAtCharge, releaseCharge
			}
		}
		a.mu.Unlock()
		if wait != nil {
			close(signal)
			select {
			case <-wait:
			case <-ctx.Done():
			}
		}
	}
	type result struct {
		res bridge.Result
		err error
	}
	older, newer := make(chan result, 1), make(chan result, 1)
	go func() {
		res, err := st.Run(ctx, req, store, newRecordingSink())
		older <- result{res, err}
	}()
	<-started[0]
	go func() {
		res, err := st.Run(ctx, req, store, newRecordingSink())
		newer <- result{res, err}
	}()
	<-started[1] // both runs are in their first model call; neither recorded it
	close(release[0])
	<-firstAtCharge // the older run recorded its output and runs its tool
	close(release[1])
	lost := <-newer
	if lost.err == nil || errors.Is(lost.err, history.ErrFenced) || !strings.Contains(lost.err.Error(), "recorded first by another run") {
		t.Fatalf("the run that lost the race: %+v, %v; want it stopped by the recorded step, retryable", lost.res, lost.err)
	}
	js, _, err := store.Steps(ctx, id, "r1")
	if err != nil || len(js.Steps) != 1 || js.Steps[0].Key != "m/assistant/1" || js.Steps[0].Owner != js.Owner {
		t.Fatalf("journal %+v (%v): want the first run's step, once", js, err)
	}
	close(releaseCharge)
	won := <-older
	if won.err != nil || won.res.Status != events.StatusComplete {
		t.Fatalf("the run that won: %+v, %v", won.res, won.err)
	}
	again, err := st.Run(ctx, req, store, newRecordingSink())
	if err != nil || !again.Committed.Duplicate {
		t.Fatalf("the loser's next attempt: %+v, %v; want the request found decided", again, err)
	}
}

// crashAndRerun runs req on a fresh step of c until it crashes at p, then
// changes what change changes and runs it again on the same store and a
// step with registry reg; it returns the second run's result.
func crashAndRerun(t *testing.T, ctx context.Context, a *journalAgent, c worker.Config, reg *prometheus.Registry, p crashPoint, change func()) (bridge.Result, error) {
	t.Helper()
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "rerun"}
	req := stepRequest(id, "r1", "charge and mail")
	firstCtx, crash := context.WithCancel(ctx)
	a.mu.Lock()
	a.crashAt, a.crash = p, crash
	a.mu.Unlock()
	if _, err := newStep(t, c, worker.WithAgentFactory(a.factory())).Run(firstCtx, req, store, newRecordingSink()); !errors.Is(err, bridge.ErrAborted) {
		t.Fatalf("the first run = %v, want aborted", err)
	}
	change()
	return newStep(t, c, worker.WithAgentFactory(a.factory()), worker.WithRegistry(reg)).Run(ctx, req, store, newRecordingSink())
}

// A re-run whose input differs from its journal's (here the instruction
// changed) is counted, and by default goes live from the divergent step;
// with JournalDivergence "fail" the request fails permanently
// (dead-lettered by the worker).
func TestARerunThatDivergesFromItsJournalIsCountedAndGoesLiveOrFails(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{worker.DivergenceLive, worker.DivergenceFail} {
		t.Run("With policy "+policy+".", func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 60*time.Second)
			a := newJournalAgent()
			a.instruction = "Take orders."
			c := stepConfig()
			c.JournalDivergence = policy
			reg := prometheus.NewRegistry()
			res, err := crashAndRerun(t, ctx, a, c, reg, beforeMail, func() { a.instruction = "Take orders politely." })
			if n := counterValue(t, reg, "turnpike_worker_journal_divergences_total"); n != 1 {
				t.Errorf("divergences counted: %v, want 1", n)
			}
			if policy == worker.DivergenceFail {
				if !errors.Is(err, events.ErrInvalid) {
					t.Fatalf("the diverged re-run: %+v, %v; want a permanent failure", res, err)
				}
				return
			}
			if err != nil || res.Status != events.StatusComplete {
				t.Fatalf("the diverged re-run: %+v, %v", res, err)
			}
			// The journal held the first output, the charge and the second
			// output: all recorded for the old instruction, all done again.
			if got, want := a.counts(), "models 2 2 1, charge 2, mail 1"; got != want {
				t.Errorf("executions %q, want %q", got, want)
			}
		})
	}
}

// A step over JournalStepBytes is not recorded: it runs again on a
// re-run (at least once), and it is counted; the steps recorded and
// replayed are counted too.
func TestAStepOverTheSizeLimitIsNotRecordedAndIsCounted(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	a := newJournalAgent()
	c := stepConfig()
	c.JournalStepBytes = 8 // "charged" fits; no model output does
	reg := prometheus.NewRegistry()
	res, err := crashAndRerun(t, ctx, a, c, reg, beforeMail, func() {})
	if err != nil || res.Status != events.StatusComplete {
		t.Fatalf("the re-run: %+v, %v", res, err)
	}
	if got, want := a.counts(), "models 2 2 1, charge 1, mail 1"; got != want {
		t.Errorf("executions %q, want %q: the outputs over the limit again, the charge's result replayed", got, want)
	}
	if n := counterValue(t, reg, "turnpike_worker_journal_skipped_total", "kind", "model"); n != 2 {
		t.Errorf("model steps skipped in the re-run: %v, want 2", n)
	}
	for _, c := range []struct {
		result string
		want   float64
	}{{"replayed", 1}, {"recorded", 1}} { // the charge's result; the mail's
		if n := counterValue(t, reg, "turnpike_worker_journal_steps_total", "kind", "tool", "result", c.result); n != c.want {
			t.Errorf("tool steps %s in the re-run: %v, want %v", c.result, n, c.want)
		}
	}
}

// A journal a crash left behind after the commit (before its delete) is
// deleted when a redelivery finds the request decided.
func TestAJournalLeftBehindIsDeletedWhenTheRequestIsFoundDecided(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	a := newJournalAgent()
	st := newStep(t, stepConfig(), worker.WithAgentFactory(a.factory()))
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "left"}
	req := stepRequest(id, "r1", "charge and mail")
	if _, err := st.Run(ctx, req, store, newRecordingSink()); err != nil {
		t.Fatal(err)
	}
	if _, err := store.RecordStep(ctx, id, "r1", 1, history.Step{Key: "m/assistant/1", Data: []byte("{}")}, history.JournalLimits{}); err != nil {
		t.Fatal(err)
	}
	res, err := st.Run(ctx, req, store, newRecordingSink())
	if err != nil || !res.Committed.Duplicate {
		t.Fatalf("the redelivery: %+v, %v; want a duplicate", res, err)
	}
	if _, found, err := store.Steps(ctx, id, "r1"); found || err != nil {
		t.Fatalf("the journal left behind is still there (%v)", err)
	}
}

// crashingTool counts its side effects; its first call stops the run (a
// crash) before the side effect.
type crashingTool struct {
	mu      sync.Mutex
	calls   int
	effects int
	crash   func()
}

func (t *crashingTool) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{Name: "charge", Desc: "charges the order"}, nil
}

func (t *crashingTool) InvokableRun(ctx context.Context, _ string, _ ...tool.Option) (string, error) {
	t.mu.Lock()
	t.calls++
	first := t.calls == 1
	if !first {
		t.effects++
	}
	t.mu.Unlock()
	if first {
		t.crash()
		<-ctx.Done()
		return "", ctx.Err()
	}
	return "charged", nil
}

// transfer_to_agent always runs: a re-run of a supervisor's request
// replays the supervisor's output that asked for the transfer, transfers
// again (the transfer acts on eino's run, a recorded result would not),
// and replays the sub-agent's steps.
func TestARerunOfASupervisorTransfersAgainAndReplaysTheSubAgent(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	desk := &scripted{reply: func(in []*schema.Message) *schema.Message {
		for _, m := range in {
			if strings.Contains(m.Content, "[orders] said:") {
				return schema.AssistantMessage("It is on its way.", nil)
			}
		}
		return call("transfer_to_agent", `{"agent_name":"orders"}`)
	}}
	orders := &scripted{reply: func(in []*schema.Message) *schema.Message {
		if lastOf(in).Role == schema.Tool {
			return schema.AssistantMessage("ORD-7 "+lastOf(in).Content+". ", nil)
		}
		return call("charge", `{"order":"ORD-7"}`)
	}}
	charge := &crashingTool{}
	factory := func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		root, err := adk.NewChatModelAgent(ctx, worker.Durable(&adk.ChatModelAgentConfig{Name: "desk", Description: "Routes.", Instruction: "Route.", Model: desk}))
		if err != nil {
			return nil, err
		}
		sub, err := adk.NewChatModelAgent(ctx, worker.Durable(&adk.ChatModelAgentConfig{Name: "orders", Description: "Knows orders.", Instruction: "Answer.", Model: orders,
			ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{charge}}}}))
		if err != nil {
			return nil, err
		}
		return supervisor.New(ctx, &supervisor.Config{Supervisor: root, SubAgents: []adk.Agent{sub}})
	}
	st := newStep(t, stepConfig(), worker.WithAgentFactory(factory))
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "desk"}
	req := stepRequest(id, "r1", "charge ORD-7")
	firstCtx, crash := context.WithCancel(ctx)
	charge.crash = crash
	if _, err := st.Run(firstCtx, req, store, newRecordingSink()); !errors.Is(err, bridge.ErrAborted) {
		t.Fatalf("the first run = %v, want aborted", err)
	}
	res, err := st.Run(ctx, req, store, newRecordingSink())
	if err != nil || res.Status != events.StatusComplete || len(res.Parts) != 2 || res.Parts[0].Agent != "orders" || res.Parts[1].Text != "It is on its way." {
		t.Fatalf("the re-run: %+v, %v; want the sub-agent's answer, then the supervisor's", res, err)
	}
	if d, o := len(desk.seen()), len(orders.seen()); d != 2 || o != 2 || charge.effects != 1 {
		t.Errorf("desk's model ran %d times, orders' %d, the charge %d: want each model call once (2 and 2) and one charge", d, o, charge.effects)
	}
}

// askingDurable is the durable agent of the lifecycle tests: its model
// calls charge, then asks the user (ask_user: an interrupt), then calls
// mail, then answers; mail stops the run (a crash) the first time it is
// called while crashMail is set. It counts the charges and the mails.
type askingDurable struct {
	model *scripted

	mu        sync.Mutex
	charges   int
	mails     int
	crashMail func() // set: the next mail call stops the run
}

func newAskingDurable() *askingDurable {
	a := &askingDurable{}
	a.model = &scripted{reply: func(in []*schema.Message) *schema.Message {
		results := 0
		for _, m := range in {
			if m.Role == schema.Tool {
				results++
			}
		}
		switch results {
		case 0:
			return call("charge", `{"order":"o-1"}`)
		case 1:
			return call(worker.ToolAskUser, `{"question":"Mail the receipt to which address?"}`)
		case 2:
			return call("mail", `{"to":"`+lastOf(in).Content+`"}`)
		}
		return schema.AssistantMessage("Charged and mailed.", nil)
	}}
	return a
}

func (a *askingDurable) counts() (charges, mails int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.charges, a.mails
}

func (a *askingDurable) factory() worker.AgentFactory {
	charge := toolFunc{name: "charge", run: func(context.Context) (string, error) {
		a.mu.Lock()
		a.charges++
		a.mu.Unlock()
		return "charged", nil
	}}
	mail := toolFunc{name: "mail", run: func(ctx context.Context) (string, error) {
		a.mu.Lock()
		crash := a.crashMail
		a.crashMail = nil
		if crash == nil {
			a.mails++
		}
		a.mu.Unlock()
		if crash != nil {
			crash()
			<-ctx.Done()
			return "", ctx.Err()
		}
		return "mailed", nil
	}}
	return func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		return adk.NewChatModelAgent(ctx, worker.Durable(&adk.ChatModelAgentConfig{
			Name: "assistant", Description: "orders", Model: a.model,
			ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{charge, worker.AskUser(), mail}}},
		}))
	}
}

// toolFunc is a tool of name that runs run.
type toolFunc struct {
	name string
	run  func(ctx context.Context) (string, error)
}

func (t toolFunc) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{Name: t.name, Desc: t.name + " the order"}, nil
}

func (t toolFunc) InvokableRun(ctx context.Context, _ string, _ ...tool.Option) (string, error) {
	return t.run(ctx)
}

// A run that ends interrupted (ask_user) after a journaled step deletes
// its journal: the resume continues from eino's checkpoint, not from the
// journal, and still works: the charge made before the question is not
// made again, and the resumed run's own journal goes when it completes.
func TestAnInterruptedRunDeletesItsJournalAndItsResumeStillWorks(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	a := newAskingDurable()
	reg := prometheus.NewRegistry()
	st := newStep(t, stepConfig(), worker.WithAgentFactory(a.factory()), worker.WithRegistry(reg))
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "interrupted"}
	first, err := st.Run(ctx, stepRequest(id, "r1", "charge order o-1"), store, newRecordingSink())
	if err != nil || first.Status != events.StatusInterrupted {
		t.Fatalf("the first run: %+v, %v; want interrupted by the question", first, err)
	}
	if n := counterValue(t, reg, "turnpike_worker_journal_steps_total", "result", "recorded"); n < 2 {
		t.Fatalf("steps recorded before the interrupt: %v, want the charge's call and result at least", n)
	}
	if js, found, err := store.Steps(ctx, id, "r1"); found || err != nil {
		t.Fatalf("the journal of the interrupted request is still there: %d steps (%v)", len(js.Steps), err)
	}
	resume := stepRequest(id, "r2", "ann@example.com")
	resume.ResumeOf = "r1"
	res, err := st.Run(ctx, resume, store, newRecordingSink())
	if err != nil || res.Status != events.StatusComplete || res.Answer != "Charged and mailed." {
		t.Fatalf("the resume: %+v, %v; want complete", res, err)
	}
	if charges, mails := a.counts(); charges != 1 || mails != 1 {
		t.Errorf("charged %d times, mailed %d times: want once each", charges, mails)
	}
	if _, found, err := store.Steps(ctx, id, "r2"); found || err != nil {
		t.Errorf("the journal of the completed resume is still there (%v)", err)
	}
}

// A resume whose run recorded a step and stopped (a crash), and whose
// re-run is rejected (the resume hook refuses the answer now: the offer
// expired), deletes the journal the first run left: rejected is a
// durable end.
func TestARejectedResumeDeletesTheJournalItsEarlierRunLeft(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	a := newAskingDurable()
	var expired atomic.Bool
	st := newStep(t, stepConfig(), worker.WithAgentFactory(a.factory()), worker.WithResume(func(_ context.Context, r worker.Resume) (any, error) {
		if expired.Load() {
			return nil, worker.Permanent(errors.New("the offer expired"))
		}
		return r.Answer, nil
	}))
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "rejected"}
	if first, err := st.Run(ctx, stepRequest(id, "r1", "charge order o-1"), store, newRecordingSink()); err != nil || first.Status != events.StatusInterrupted {
		t.Fatalf("the first run: %+v, %v; want interrupted by the question", first, err)
	}
	resume := stepRequest(id, "r2", "ann@example.com")
	resume.ResumeOf = "r1"
	resumeCtx, crash := context.WithCancel(ctx)
	a.mu.Lock()
	a.crashMail = crash
	a.mu.Unlock()
	if _, err := st.Run(resumeCtx, resume, store, newRecordingSink()); !errors.Is(err, bridge.ErrAborted) {
		t.Fatalf("the resume's first run = %v, want aborted by the crash", err)
	}
	if js, found, err := store.Steps(ctx, id, "r2"); !found || err != nil || len(js.Steps) == 0 {
		t.Fatalf("the resume's first run left no journal (%d steps, %v): the test needs one", len(js.Steps), err)
	}
	expired.Store(true)
	res, err := st.Run(ctx, resume, store, newRecordingSink())
	if err != nil || res.Status != events.StatusRejected {
		t.Fatalf("the resume's re-run: %+v, %v; want rejected", res, err)
	}
	if js, found, err := store.Steps(ctx, id, "r2"); found || err != nil {
		t.Errorf("the journal of the rejected resume is still there: %d steps (%v)", len(js.Steps), err)
	}
}

// crashingLookup counts its side effects by query; its first call for query
// crashAt stops the run (a crash) before the side effect.
type crashingLookup struct {
	mu      sync.Mutex
	crashAt string
	crashed bool
	crash   func()
	effects map[string]int
}

func (t *crashingLookup) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{Name: "lookup", Desc: "looks a subject up"}, nil
}

func (t *crashingLookup) InvokableRun(ctx context.Context, args string, _ ...tool.Option) (string, error) {
	t.mu.Lock()
	crash := strings.Contains(args, t.crashAt) && !t.crashed
	if crash {
		t.crashed = true
	} else {
		t.effects[args]++
	}
	t.mu.Unlock()
	if crash {
		t.crash()
		<-ctx.Done()
		return "", ctx.Err()
	}
	return "facts", nil
}

// newResearcher is the model of the researcher sub-agent of the tests of a
// durable agent used as a tool: it looks its subject (the last user
// message) up, then reports what it found.
func newResearcher() *scripted {
	return &scripted{reply: func(in []*schema.Message) *schema.Message {
		if last := lastOf(in); last.Role == schema.Tool {
			return schema.AssistantMessage("found "+last.Content, nil)
		}
		var subject string
		for _, m := range in {
			if m.Role == schema.User {
				subject = m.Content
			}
		}
		return schema.AssistantMessage("", []schema.ToolCall{{ID: "call-lookup", Type: "function",
			Function: schema.FunctionCall{Name: "lookup", Arguments: `{"q":"` + subject + `"}`}}})
	}}
}

// crashInBetaAndRerun runs a request of content through a step of factory's
// agent under the divergence policy until lookup cuts the run in beta's
// lookup, then runs it again on the same store, and checks that the re-run
// completes without a divergence, that the researcher's first model call
// for beta ran once over both runs (it was recorded before the cut), and
// that beta's lookup had its effect once.
func crashInBetaAndRerun(t *testing.T, ctx context.Context, policy, content string, researcher *scripted, lookup *crashingLookup, factory worker.AgentFactory) {
	t.Helper()
	c := stepConfig()
	c.JournalDivergence = policy
	reg := prometheus.NewRegistry()
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: testenv.Name(t, "research")}
	req := stepRequest(id, "r1", content)
	firstCtx, crash := context.WithCancel(ctx)
	lookup.crash = crash
	if _, err := newStep(t, c, worker.WithAgentFactory(factory)).Run(firstCtx, req, store, newRecordingSink()); !errors.Is(err, bridge.ErrAborted) {
		t.Fatalf("the first run = %v, want aborted in beta's lookup", err)
	}
	betaCalls := func() int { // the researcher's model calls for beta without a tool result
		n := 0
		for _, in := range researcher.seen() {
			if lastOf(in).Role != schema.Tool && strings.Contains(fmt.Sprint(in), "beta") {
				n++
			}
		}
		return n
	}
	if n := betaCalls(); n != 1 {
		t.Fatalf("the researcher's first model call for beta ran %d times in the first run, want 1", n)
	}
	res, err := newStep(t, c, worker.WithAgentFactory(factory), worker.WithRegistry(reg)).Run(ctx, req, store, newRecordingSink())
	if err != nil || res.Status != events.StatusComplete {
		t.Fatalf("the re-run: %+v, %v; want complete (nothing changed between the runs)", res, err)
	}
	if n := counterValue(t, reg, "turnpike_worker_journal_divergences_total"); n != 0 {
		t.Errorf("divergences counted: %v, want 0 (nothing changed between the runs)", n)
	}
	if n := betaCalls(); n != 1 {
		t.Errorf("the researcher's first model call for beta ran %d times over both runs, want 1 (it was recorded)", n)
	}
	lookup.mu.Lock()
	defer lookup.mu.Unlock()
	if n := lookup.effects[`{"q":"beta"}`]; n != 1 {
		t.Errorf("beta's lookup had %d effects, want 1 (cut before its effect once, then run once)", n)
	}
}

// A durable agent used as a tool (adk.NewAgentTool, as eino's
// deep agents do) by a durable supervisor, called twice, in two rounds. The
// first run stops in the second call's tool. On the re-run the first call's
// result is replayed from the supervisor's journal, so the sub-agent's
// model calls of that first call do not happen. The second call's steps
// are keyed under its own tool call, so they replay without a divergence
// (found in review: with keys counted per agent across the run, the second
// call's first model call took the first call's key m/researcher/1 and
// diverged).
func TestARerunReplaysADurableAgentUsedAsAToolWithoutDiverging(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{worker.DivergenceLive, worker.DivergenceFail} {
		t.Run("With policy "+policy+".", func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 60*time.Second)
			researchCall := func(id, subject string) *schema.Message {
				return schema.AssistantMessage("", []schema.ToolCall{{ID: id, Type: "function",
					Function: schema.FunctionCall{Name: "researcher", Arguments: `{"request":"` + subject + `"}`}}})
			}
			desk := &scripted{reply: func(in []*schema.Message) *schema.Message {
				results := 0
				for _, m := range in {
					if m.Role == schema.Tool {
						results++
					}
				}
				switch results {
				case 0:
					return researchCall("call-a", "alpha")
				case 1:
					return researchCall("call-b", "beta")
				}
				return schema.AssistantMessage("Both researched.", nil)
			}}
			researcher, lookup := newResearcher(), &crashingLookup{crashAt: "beta", effects: map[string]int{}}
			factory := func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
				sub, err := adk.NewChatModelAgent(ctx, worker.Durable(&adk.ChatModelAgentConfig{Name: "researcher", Description: "Researches a subject.",
					Instruction: "Research.", Model: researcher,
					ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{lookup}}}}))
				if err != nil {
					return nil, err
				}
				return adk.NewChatModelAgent(ctx, worker.Durable(&adk.ChatModelAgentConfig{Name: "desk", Description: "Answers.",
					Instruction: "Answer.", Model: desk,
					ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{adk.NewAgentTool(ctx, sub)}}}}))
			}
			crashInBetaAndRerun(t, ctx, policy, "research alpha and beta", researcher, lookup, factory)
		})
	}
}

// flakySummarizer fails its first summary request (a timeout, a 503) and
// answers the later ones.
type flakySummarizer struct {
	mu    sync.Mutex
	calls int
}

func (s *flakySummarizer) Generate(context.Context, []*schema.Message, ...model.Option) (*schema.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.calls == 1 {
		return nil, errors.New("summarizer: 503")
	}
	return schema.AssistantMessage("They talked about orders.", nil), nil
}

func (s *flakySummarizer) Stream(context.Context, []*schema.Message, ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	return nil, errors.New("the summarizer is only asked to generate")
}

// With compaction on, the window of a request's re-run is not the window
// of its first run when the first run's summarizer call failed (the window
// is then kept as it is, compact.go) and the re-run's succeeds (or the
// first run's SaveSummary failed and the re-run summarizes again: an LLM's
// summary differs). Nothing about the request or the agent changed, so the
// re-run replays its journal: the window is not part of a step's
// fingerprint (found in review: it was, and the re-run diverged).
func TestARerunAfterATransientSummarizerFailureReplaysItsJournal(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{worker.DivergenceLive, worker.DivergenceFail} {
		t.Run("With policy "+policy+".", func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 60*time.Second)
			store := history.NewMemoryStore()
			id := events.Identity{Tenant: "acme", User: "ann", Conversation: testenv.Name(t, "compact")}
			seed := newStep(t, stepConfig())
			for i := range 4 {
				req := stepRequest(id, fmt.Sprintf("seed-%d", i), strings.Repeat("an earlier question about orders ", 20))
				if _, err := seed.Run(ctx, req, store, newRecordingSink()); err != nil {
					t.Fatal(err)
				}
			}
			a := newJournalAgent()
			c := stepConfig()
			c.JournalDivergence = policy
			c.CompactTokens, c.CompactKeep = 100, 1
			sum := &flakySummarizer{}
			req := stepRequest(id, "r1", "charge and mail")
			firstCtx, crash := context.WithCancel(ctx)
			a.mu.Lock()
			a.crashAt, a.crash = beforeMail, crash
			a.mu.Unlock()
			st := newStep(t, c, worker.WithAgentFactory(a.factory()), worker.WithSummarizer(sum))
			if _, err := st.Run(firstCtx, req, store, newRecordingSink()); !errors.Is(err, bridge.ErrAborted) {
				t.Fatalf("the first run = %v, want aborted", err)
			}
			res, err := st.Run(ctx, req, store, newRecordingSink())
			if err != nil || res.Status != events.StatusComplete {
				t.Fatalf("the re-run: %+v, %v; want complete", res, err)
			}
			if got, want := a.counts(), "models 1 1 1, charge 1, mail 1"; got != want {
				t.Errorf("executions %q, want %q: the journal's steps replayed", got, want)
			}
		})
	}
}

// perCallAgentTool is adk.NewAgentTool over a sub-agent built for each
// call: eino v0.9.21's ChatModelAgent writes its run configuration on each
// Run, so one instance run by two parallel calls races with itself (-race).
type perCallAgentTool struct {
	info  *schema.ToolInfo
	build func(context.Context) (adk.Agent, error)
}

func (t *perCallAgentTool) Info(context.Context) (*schema.ToolInfo, error) { return t.info, nil }

func (t *perCallAgentTool) InvokableRun(ctx context.Context, args string, opts ...tool.Option) (string, error) {
	a, err := t.build(ctx)
	if err != nil {
		return "", err
	}
	return adk.NewAgentTool(ctx, a).(tool.InvokableTool).InvokableRun(ctx, args, opts...)
}

// Two parallel calls of one durable agent used as a tool (one model output
// asking for both) key their steps apart: each call's steps are scoped by
// the call's own journal key. Sharing keys, one call's first model output
// would be recorded and the other's found different: a divergence on the
// re-run (or in the first run already, under "fail").
func TestARerunReplaysParallelCallsOfADurableAgentUsedAsAToolWithoutDiverging(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{worker.DivergenceLive, worker.DivergenceFail} {
		t.Run("With policy "+policy+".", func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 60*time.Second)
			researchCall := func(id, subject string) schema.ToolCall {
				return schema.ToolCall{ID: id, Type: "function",
					Function: schema.FunctionCall{Name: "researcher", Arguments: `{"request":"` + subject + `"}`}}
			}
			desk := &scripted{reply: func(in []*schema.Message) *schema.Message {
				if lastOf(in).Role == schema.Tool {
					return schema.AssistantMessage("Both researched.", nil)
				}
				return schema.AssistantMessage("", []schema.ToolCall{researchCall("call-a", "alpha"), researchCall("call-b", "beta")})
			}}
			researcher, lookup := newResearcher(), &crashingLookup{crashAt: "beta", effects: map[string]int{}}
			factory := func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
				sub := func(ctx context.Context) (adk.Agent, error) {
					return adk.NewChatModelAgent(ctx, worker.Durable(&adk.ChatModelAgentConfig{Name: "researcher", Description: "Researches a subject.",
						Instruction: "Research.", Model: researcher,
						ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{lookup}}}}))
				}
				proto, err := sub(ctx)
				if err != nil {
					return nil, err
				}
				info, err := adk.NewAgentTool(ctx, proto).Info(ctx)
				if err != nil {
					return nil, err
				}
				return adk.NewChatModelAgent(ctx, worker.Durable(&adk.ChatModelAgentConfig{Name: "desk", Description: "Answers.",
					Instruction: "Answer.", Model: desk,
					ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{&perCallAgentTool{info: info, build: sub}}}}}))
			}
			crashInBetaAndRerun(t, ctx, policy, "research alpha and beta at once", researcher, lookup, factory)
		})
	}
}
