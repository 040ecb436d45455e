package worker

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	completionsDropped prometheus.Counter
	lag                *prometheus.GaugeVec
	streamWrite        prometheus.Histogram
	cancelled          prometheus.Counter
	fenced             prometheus.Counter
	committed          prometheus.Counter
	running            prometheus.Gauge
	peakInflight       prometheus.Gauge
	records            prometheus.Counter
	deadLettered       prometheus.Counter
	duplicates         prometheus.Counter
	retries            prometheus.Counter
	inflight           prometheus.Gauge
	runs               *prometheus.CounterVec
	runSeconds         prometheus.Histogram
	tokens             *prometheus.CounterVec
	transfers          prometheus.Counter
	interrupts         prometheus.Counter
	resumes            *prometheus.CounterVec
	compactions        *prometheus.CounterVec
	moved              prometheus.Counter
	// The stages of a turn (README.md "Observability", where a turn's time goes).
	fetchLag        prometheus.Histogram
	startDelay      prometheus.Histogram
	firstTokenWrite prometheus.Histogram
	// The time to first token: the request record's Kafka timestamp to
	// its run's first token record acknowledged.
	timeToFirstToken prometheus.Histogram
	// The step journal of durable runs.
	journalSteps       *prometheus.CounterVec
	journalSkipped     *prometheus.CounterVec
	journalDivergences prometheus.Counter
	journalSwept       prometheus.Counter
	artifactsSwept     prometheus.Counter
	artifactsLost      prometheus.Counter
	// Long-term memory (memory.go).
	memory *prometheus.CounterVec
}

// stageBuckets are the buckets of the turn-stage histograms: 0.5 ms to
// about 16 s, doubling.
var stageBuckets = prometheus.ExponentialBuckets(0.0005, 2, 16)

// ttftBuckets are the buckets of the time to first token, with bounds at
// round objectives (1, 2, 5, 10 s) for error budgets over the histogram.
var ttftBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		completionsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_worker_completions_dropped_total", Help: "Completions for ingest's queued counts dropped because too many were waiting to be written.",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turnpike_worker_consumer_lag", Help: "Records of an assigned requests-topic partition not yet fetched (high watermark minus position).",
		}, []string{"partition"}),
		streamWrite: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "turnpike_worker_stream_write_seconds", Help: "Time from a stream event's emission to the broker's acknowledgement.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		cancelled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_worker_cancelled_runs_total", Help: "Runs cancelled while running, by a cancel or an interrupting request.",
		}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_worker_fenced_total", Help: "Records dropped because a newer request of their conversation was committed (this worker had lost the partition).",
		}),
		committed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_worker_offset_commits_total", Help: "Offset commits of partitions' contiguous completed records.",
		}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "turnpike_worker_running_runs", Help: "Model runs in progress.",
		}),
		peakInflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "turnpike_worker_inflight_records_peak", Help: "The most records fetched and not yet done at once since start.",
		}),
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_worker_records_total", Help: "Request records fetched.",
		}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_worker_dlq_total", Help: "Request records sent to the dead-letter topic.",
		}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_worker_duplicates_total", Help: "Requests already committed, completed without running.",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_worker_retries_total", Help: "Attempts at a record that failed for a retriable reason.",
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "turnpike_worker_inflight_records", Help: "Records fetched and not yet done (running or queued behind their conversation); 0 when the worker is idle.",
		}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_worker_runs_total", Help: "Runs ended, by status.",
		}, []string{"status"}),
		runSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "turnpike_worker_run_duration_seconds", Help: "Duration of runs, from start to run.completed.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_worker_model_tokens_total", Help: "Tokens the models reported, by model and kind (prompt, completion); summaries included.",
		}, []string{"model", "kind"}),
		transfers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_worker_agent_transfers_total", Help: "Transfers between agents (supervisor and sub-agents).",
		}),
		interrupts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_worker_interrupts_total", Help: "Runs that stopped to ask the user something.",
		}),
		resumes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_worker_resumes_total", Help: "Resume requests, by result (resumed, rejected).",
		}, []string{"result"}),
		compactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_worker_compactions_total", Help: "Windows over the token budget, by result (summarized, failed, kept: nothing old enough to condense).",
		}, []string{"result"}),
		moved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_worker_moved_total", Help: "Misplaced request records (not in their key's Murmur2 home partition) copied to their home partition.",
		}),
		fetchLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "turnpike_worker_fetch_lag_seconds", Help: "From a request record's Kafka timestamp (its producer's clock) to its fetch by the worker (includes clock skew between hosts).",
			Buckets: stageBuckets,
		}),
		startDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "turnpike_worker_start_delay_seconds", Help: "From a request record's fetch to its agent's start: queued behind its conversation, turn begun, window loaded and compacted, agent built.",
			Buckets: stageBuckets,
		}),
		firstTokenWrite: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "turnpike_worker_first_token_write_seconds", Help: "From a run's first token event's emission to the broker's acknowledgement of its stream record.",
			Buckets: stageBuckets,
		}),
		timeToFirstToken: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "turnpike_worker_time_to_first_token_seconds", Help: "From a request record's Kafka timestamp (its producer's clock) to the broker's acknowledgement of its run's first token record (includes clock skew between hosts).",
			Buckets: ttftBuckets,
		}),
		journalSteps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_worker_journal_steps_total", Help: "Steps of durable runs, by kind (model, tool) and result (recorded: written to the journal; replayed: answered from it without calling the model or running the tool).",
		}, []string{"kind", "result"}),
		journalSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_worker_journal_skipped_total", Help: "Steps of durable runs not recorded because they passed the step or journal size limit (they run again if the request does), by kind.",
		}, []string{"kind"}),
		journalDivergences: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_worker_journal_divergences_total", Help: "Recorded steps whose run's input differed from the one they were recorded for (handled by -journal-divergence).",
		}),
		journalSwept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_worker_journal_swept_total", Help: "Expired step journals the worker deleted (requests that never reached a durable end), on stores without a TTL index.",
		}),
		artifactsSwept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_worker_artifacts_swept_total", Help: "Uncommitted artifact saves the worker's sweep dropped (staged saves no committed turn holds, content a failed save left), older than -artifact-sweep-age.",
		}),
		artifactsLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_worker_artifacts_lost_total", Help: "Saves of a committed turn's manifest that its publish found no staged save for (swept before the publish: -artifact-sweep-age too short for the runs and their re-runs; or deleted since): they never become versions (each logged at error).",
		}),
		memory: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_worker_memory_total", Help: "Long-term memory operations by result: added, add_duplicate, add_failed (the turn stays committed), injected, search_failed and search_timeout (the run goes on without memories), tool_search_failed (search_memory told the model the search failed).",
		}, []string{"result"}),
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.completionsDropped, m.lag, m.streamWrite, m.cancelled, m.fenced, m.committed, m.running, m.peakInflight, m.records, m.deadLettered, m.duplicates, m.retries, m.inflight, m.runs, m.runSeconds,
		m.tokens, m.transfers, m.interrupts, m.resumes, m.compactions, m.moved, m.fetchLag, m.startDelay, m.firstTokenWrite, m.timeToFirstToken,
		m.journalSteps, m.journalSkipped, m.journalDivergences, m.journalSwept, m.artifactsSwept, m.artifactsLost, m.memory} {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// countTokens adds a model's reported usage to the token counters.
func (m *metrics) countTokens(model string, prompt, completion int) {
	if prompt > 0 {
		m.tokens.WithLabelValues(model, "prompt").Add(float64(prompt))
	}
	if completion > 0 {
		m.tokens.WithLabelValues(model, "completion").Add(float64(completion))
	}
}
