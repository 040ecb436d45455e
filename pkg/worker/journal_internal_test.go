package worker

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/cloudwego/eino/schema"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// gateWarn is a log handler that holds the divergence warning of one step
// until release is closed (the rest passes).
type gateWarn struct {
	step    string
	reached chan struct{}
	release chan struct{}
}

func (g gateWarn) Enabled(context.Context, slog.Level) bool { return true }
func (g gateWarn) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "step" && a.Value.String() == g.step {
			close(g.reached)
			<-g.release
			return false
		}
		return true
	})
	return nil
}
func (g gateWarn) WithAttrs([]slog.Attr) slog.Handler { return g }
func (g gateWarn) WithGroup(string) slog.Handler      { return g }

// Two lookups that diverge at once (eino runs a round's tools
// concurrently) race to truncate: when the first truncates at an earlier
// key, the second's key is gone from jr.order. The second must find the
// run already live (found in review: slices.Index returned -1 and
// jr.order[-1:] panicked).
func TestTwoConcurrentDivergencesDoNotPanic(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: testenv.Name(t, "diverge")}
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	gate := gateWarn{step: "t/a/1/c2", reached: make(chan struct{}), release: make(chan struct{})}
	jr := &journalRun{j: store, id: id, requestID: "r1", owner: 2, stepBytes: 1 << 20, metrics: m,
		log: slog.New(gate), recorded: map[string]history.Step{}, models: map[string]int{}, runs: 2}
	var found history.Steps
	for _, k := range []string{"t/a/1/c1", "t/a/1/c2"} {
		s, err := store.RecordStep(ctx, id, "r1", 1, history.Step{Key: k, Hash: "old", Data: []byte("x")}, history.JournalLimits{})
		if err != nil {
			t.Fatal(err)
		}
		found.Steps = append(found.Steps, s)
	}
	jr.load(found)

	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_, _ = jr.lookup(ctx, "tool", "t/a/1/c2", "new")
	}()
	<-gate.reached // c2's lookup has read its step and diverged
	if _, err := jr.lookup(ctx, "tool", "t/a/1/c1", "new"); err != nil {
		t.Fatal(err)
	}
	close(gate.release)
	if p := <-panicked; p != nil {
		t.Fatalf("the second divergence panicked: %v", p)
	}
}

// A model step's fingerprint is what identifies the step, not the
// conversation's history: compaction may rewrite the window before the
// request's message between two runs of it (a summary, or none after a
// summarizer failure) without anything about the request or the agent
// changing; the instruction, the tools offered, the request's message and
// the run's steps after it are in it.
func TestAModelStepsFingerprintLeavesTheWindowOut(t *testing.T) {
	t.Parallel()
	call := func(args string) *schema.Message {
		return schema.AssistantMessage("", []schema.ToolCall{{ID: "c1", Type: "function",
			Function: schema.FunctionCall{Name: "charge", Arguments: args}}})
	}
	input := func(instruction string, window []*schema.Message, request string, steps ...*schema.Message) []*schema.Message {
		in := []*schema.Message{schema.SystemMessage(instruction)}
		in = append(in, window...)
		in = append(in, schema.UserMessage(request))
		return append(in, steps...)
	}
	history := []*schema.Message{schema.UserMessage("an earlier question"), schema.AssistantMessage("an earlier answer", nil)}
	summarized := []*schema.Message{schema.SystemMessage(summaryPrefix + "They talked about orders."), history[1]}
	resummarized := []*schema.Message{schema.SystemMessage(summaryPrefix + "Orders were discussed.")}
	steps := []*schema.Message{call(`{"n":1}`), schema.ToolMessage("charged", "c1")}
	base := hashModelInput(input("Take orders.", history, "charge me", steps...), []string{"charge", "mail"})
	for _, c := range []struct {
		name  string
		in    []*schema.Message
		tools []string
		same  bool
	}{
		{"The window summarized (a summarizer that failed in the first run) is the same step.",
			input("Take orders.", summarized, "charge me", steps...), []string{"charge", "mail"}, true},
		{"The window summarized again with other text (a summary that was not saved) is the same step.",
			input("Take orders.", resummarized, "charge me", steps...), []string{"mail", "charge"}, true},
		{"A changed instruction is another step.",
			input("Take orders politely.", history, "charge me", steps...), []string{"charge", "mail"}, false},
		{"Another tool offered is another step.",
			input("Take orders.", history, "charge me", steps...), []string{"charge", "mail", "refund"}, false},
		{"Another request message is another step.",
			input("Take orders.", history, "charge me twice", steps...), []string{"charge", "mail"}, false},
		{"Another step before it in the run is another step.",
			input("Take orders.", history, "charge me", call(`{"n":2}`), schema.ToolMessage("charged", "c1")), []string{"charge", "mail"}, false},
		{"Another tool result before it in the run is another step.",
			input("Take orders.", history, "charge me", call(`{"n":1}`), schema.ToolMessage("declined", "c1")), []string{"charge", "mail"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := hashModelInput(c.in, c.tools) == base; got != c.same {
				t.Errorf("same fingerprint = %v, want %v", got, c.same)
			}
		})
	}
}

// A step key another call of the same run recorded for another input (the
// keys do not tell two calls apart) is not taken as this call's record:
// it is counted as a divergence and, under DivergenceFail, fails the run;
// under DivergenceLive the call's result is used unrecorded.
func TestAKeyTwoCallsOfOneRunRecordForDifferentInputsIsADivergence(t *testing.T) {
	t.Parallel()
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "With policy live.", true: "With policy fail."}[fail], func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 30*time.Second)
			runCtx, abort := context.WithCancel(ctx)
			defer abort()
			store := history.NewMemoryStore()
			id := events.Identity{Tenant: "acme", User: "ann", Conversation: testenv.Name(t, "collide")}
			m, err := newMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			jr := &journalRun{j: store, id: id, requestID: "r1", owner: 1, stepBytes: 1 << 20, fail: fail, metrics: m,
				log: slog.New(slog.DiscardHandler), recorded: map[string]history.Step{}, models: map[string]int{}, runs: 1, abort: abort}
			if err := jr.record(runCtx, "tool", history.Step{Key: "t/a/1/c1", Hash: "first", Data: []byte("one")}); err != nil {
				t.Fatal(err)
			}
			err = jr.record(runCtx, "tool", history.Step{Key: "t/a/1/c1", Hash: "second", Data: []byte("two")})
			if n := testutil.ToFloat64(m.journalDivergences); n != 1 {
				t.Errorf("divergences counted: %v, want 1", n)
			}
			if fail {
				if !errors.Is(err, errDiverged) || !errors.Is(jr.err(), errDiverged) {
					t.Errorf("the second record = %v, the run's end %v; want both diverged", err, jr.err())
				}
				return
			}
			if err != nil || jr.err() != nil {
				t.Errorf("the second record = %v, the run's end %v; want neither (the call goes on unrecorded)", err, jr.err())
			}
			if s := jr.recorded["t/a/1/c1"]; s.Hash != "first" {
				t.Errorf("the run's step %+v, want the first call's", s)
			}
		})
	}
}
