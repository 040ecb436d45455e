package worker

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/pkg/events"
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
