package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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

// REVIEW: lookup reads the recorded step, unlocks, and only later looks
// its key up in jr.order to truncate. Two lookups that diverge at once
// (eino runs a round's tools concurrently; parallel runs of one durable
// agent used as a tool share its keys) race: when the first truncates at
// an earlier key, the second's key is gone from jr.order, slices.Index
// returns -1 and jr.order[-1:] panics.
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
