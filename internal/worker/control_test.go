package worker

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

func TestCompletionsAreDroppedPastTheBoundInsteadOfBuffered(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{cfg: Config{Brokers: []string{"127.0.0.1:1"}}, metrics: m, log: slog.New(slog.DiscardHandler), now: time.Now}
	w.cfg.setDefaults()
	c := newControlChannel(w)
	defer c.Close()
	c.pending.Store(maxPendingCompletions) // Kafka has been unreachable for a while
	id := events.Identity{Tenant: "t", User: "u", Conversation: "c"}
	for range 3 {
		c.completed(id, "r-1", events.StatusComplete)
	}
	if got := c.pending.Load(); got != maxPendingCompletions {
		t.Fatalf("pending %d: completions past the bound were handed to the writer", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "turnpike_worker_completions_dropped_total" {
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 3 {
				t.Fatalf("dropped %v, want 3", v)
			}
			return
		}
	}
	t.Fatal("no dropped-completions metric")
}

// A cancel read from the control topic stops the conversation's running
// request only when it covers it (docs/api.md "POST …/cancel"): one
// request by its id, or everything whose record precedes the end of the
// partition at the moment of the cancel, so that a request posted after
// the cancel (at or past that end) is not affected; never another
// conversation's run. The run it stops is counted in
// turnpike_worker_cancelled_runs_total (README "Observability").
func TestAControlCancelStopsOnlyTheRunItCovers(t *testing.T) {
	t.Parallel()
	names := topic.NewNames("cancel-test.")
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "c1"}
	other := events.Identity{Tenant: "acme", User: "ann", Conversation: "c2"}
	running := history.Source{Topic: names.Requests, Partition: 1, Offset: 5, Time: time.Now()}
	byID := func(id events.Identity, requestID string) events.Control {
		return events.Control{V: events.Version, Type: events.ControlCancel, Tenant: id.Tenant, User: id.User, Conversation: id.Conversation, RequestID: requestID}
	}
	all := func(id events.Identity, partition int, before int64) events.Control {
		return events.Control{V: events.Version, Type: events.ControlCancel, Tenant: id.Tenant, User: id.User, Conversation: id.Conversation, Partition: partition, Before: before}
	}
	tests := []struct {
		name string
		ctl  events.Control
		want bool
	}{
		{"A cancel of the running request by its id stops it.", byID(id, "r2"), true},
		{"A cancel of another request of the conversation by its id does not.", byID(id, "r1"), false},
		{"A cancel of the same request id in another conversation does not.", byID(other, "r2"), false},
		{"A cancel of everything below the offset after the running record's stops it.", all(id, 1, 6), true},
		{"A cancel of everything below a later offset stops it.", all(id, 1, 100), true},
		{"A cancel of everything below the running record's own offset does not: it was posted after the cancel.", all(id, 1, 5), false},
		{"A cancel of everything below an earlier offset does not.", all(id, 1, 0), false},
		{"A cancel of everything in another partition, with nothing recorded there, does not.", all(id, 2, 100), false},
		{"A cancel of everything in another conversation does not.", all(other, 1, 100), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			m, err := newMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			w := &Worker{cfg: Config{Topics: names}, store: history.NewMemoryStore(), metrics: m, log: slog.New(slog.DiscardHandler),
				now: time.Now, active: newActiveRuns()}
			c := &controlChannel{w: w}
			r := w.active.register(id.Key(), "r2", running, nil)
			c.cancel(tt.ctl)
			if got := r.isCancelled(); got != tt.want {
				t.Errorf("cancelled %v, want %v", got, tt.want)
			}
			// turnpike_worker_cancelled_runs_total counts the run it
			// stopped, once however often the cancel is read.
			c.cancel(tt.ctl)
			want := map[bool]float64{true: 1, false: 0}[tt.want]
			if got := testenv.MetricValue(t, reg, "turnpike_worker_cancelled_runs_total"); got != want {
				t.Errorf("cancelled_runs_total %v, want %v", got, want)
			}
		})
	}
}
