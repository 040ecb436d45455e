package worker_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// The worker's stages of a turn (README.md "Observability", where a
// turn's time goes) are observed once each: the fetch lag for every request record
// fetched, the start delay for every record whose agent starts, the first
// token's write for every run that streams a token. Here two requests run
// and a duplicate of the first completes without running: three records
// fetched, two agents started, two first tokens acknowledged.
func TestTheWorkersTurnStagesAreObservedOncePerRecordAgentAndRun(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	reg := prometheus.NewRegistry()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "staged"}
	s.produce(t, ctx, id.Key(), request(id, "req-1", "one two three"))
	s.produce(t, ctx, id.Key(), request(id, "req-2", "four five"))
	s.produce(t, ctx, id.Key(), request(id, "req-1", "one two three")) // a duplicate
	s.start(t, ctx, worker.Deps{Registerer: reg})

	// runs_total counts a run after every one of its events is
	// acknowledged; duplicates_total a duplicate after its fetch.
	waitCounter(t, ctx, reg, 2, "turnpike_worker_runs_total", "status", string(events.StatusComplete))
	waitCounter(t, ctx, reg, 1, "turnpike_worker_duplicates_total")
	for _, c := range []struct {
		name string
		want uint64
	}{
		{"turnpike_worker_fetch_lag_seconds", 3},
		{"turnpike_worker_start_delay_seconds", 2},
		{"turnpike_worker_first_token_write_seconds", 2},
		{"turnpike_worker_time_to_first_token_seconds", 2},
	} {
		if got := histogramCount(t, reg, c.name); got != c.want {
			t.Errorf("%s counts %d samples, want %d", c.name, got, c.want)
		}
	}
}

// histogramCount is the sample count of the histogram name (its only
// series); it fails t when reg has no such histogram.
func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("histogram %s not registered", name)
	return 0
}
