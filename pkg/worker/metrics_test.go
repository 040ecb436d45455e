package worker_test

import (
	"fmt"
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

// The worker's gauges of what it holds (README.md "Observability"): with
// MaxInflight 2, one conversation's five requests and the first held at
// its model's gate, the first runs, the second waits behind it, the third
// is fetched and waits for a slot, the last two are not fetched:
// running_runs 1, inflight_records 2 and its peak 2 (the partitions
// waiting for records hold no slot), consumer_lag 2 on the conversation's
// partition. Once the gate opens all five complete: running_runs and
// inflight_records are 0 again, the peak stays 2, the lag is 0.
func TestTheWorkersGaugesCountRunningRunsRecordsInFlightAndLag(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	s.cfg.MaxInflight = 2
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "held"}
	s.ensureTopics(t, ctx, s.cfg.Partitions)
	for i := 1; i <= 5; i++ {
		s.produce(t, ctx, id.Key(), request(id, fmt.Sprintf("req-%d", i), fmt.Sprintf("m%d", i)))
	}
	m := newGatedModel("m1")
	gate := m.gate("m1")
	reg := prometheus.NewRegistry()
	s.start(t, ctx, worker.Deps{Model: m, Registerer: reg})

	// gauge sums name's series (consumer_lag has one per partition
	// assigned, none before the first commit tick).
	gauge := func(name string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.GetMetric() {
					sum += m.GetGauge().GetValue()
				}
			}
		}
		return sum
	}
	testenv.Eventually(t, ctx, "m1 running", func() bool { return m.ran()["m1"] == 1 })
	testenv.Eventually(t, ctx, "two records in flight", func() bool { return gauge("turnpike_worker_inflight_records") == 2 })
	// The lag is reported at each commit tick (CommitInterval).
	testenv.Eventually(t, ctx, "a lag of 2", func() bool { return gauge("turnpike_worker_consumer_lag") == 2 })
	// The run is counted once its runner started, which may call the
	// model first.
	testenv.Eventually(t, ctx, "one run running", func() bool { return gauge("turnpike_worker_running_runs") == 1 })
	if got := gauge("turnpike_worker_inflight_records_peak"); got != 2 {
		t.Errorf("inflight_records_peak = %v with MaxInflight 2, want 2", got)
	}
	close(gate)
	s.stream(t).untilCompleted(t, ctx, 5)
	testenv.Eventually(t, ctx, "no record in flight", func() bool { return gauge("turnpike_worker_inflight_records") == 0 })
	testenv.Eventually(t, ctx, "no lag", func() bool { return gauge("turnpike_worker_consumer_lag") == 0 })
	testenv.Eventually(t, ctx, "no run running", func() bool { return gauge("turnpike_worker_running_runs") == 0 })
	if got := gauge("turnpike_worker_inflight_records_peak"); got != 2 {
		t.Errorf("inflight_records_peak = %v after the runs, want it kept at 2", got)
	}
}
