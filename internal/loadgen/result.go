package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is everything a run measured and found.
type Result struct {
	RunID   string    `json:"run_id"`
	Started time.Time `json:"started"`
	Config  Config    `json:"config"`
	// Floor and Pipeline are set for the modes that ran.
	Floor    *FloorResult    `json:"floor,omitempty"`
	Pipeline *PipelineResult `json:"pipeline,omitempty"`
	// LoadedFloor is the floor that ran during the pipeline
	// (Config.LoadedFloor).
	LoadedFloor *FloorResult `json:"loaded_floor,omitempty"`
	// Ratios compare the pipeline's token latency with the floor's, when
	// both ran.
	Ratios *Ratios `json:"ratios,omitempty"`
	RSS    RSS     `json:"rss"`
	// Violations are broken promises of docs/api.md; Errors are failed calls,
	// closed connections and timeouts.
	Violations Problems `json:"violations"`
	Errors     Problems `json:"errors"`
	// Notes are things worth knowing that are neither (e.g. RSS not available).
	Notes []string `json:"notes,omitempty"`
}

// FloorResult is the raw broker floor: kafka-go produce → fetch.
type FloorResult struct {
	Topic      string `json:"topic"`
	Partitions int    `json:"partitions"`
	Producers  int    `json:"producers"`
	// RecordsExpected is Producers × Messages × Tokens; Records were fetched.
	RecordsExpected int64         `json:"records_expected"`
	Records         int64         `json:"records"`
	Elapsed         time.Duration `json:"elapsed_ns"`
	RecordsPerSec   float64       `json:"records_per_sec"`
	// Latency is fetch time − the send time the record carries.
	Latency Latency `json:"latency"`
}

// PipelineResult is the stack measured through its public API.
type PipelineResult struct {
	Conversations int `json:"conversations"`
	Connections   int `json:"connections"`
	Users         int `json:"users"`
	// TurnsExpected is Conversations × Messages; Turns completed.
	TurnsExpected int64 `json:"turns_expected"`
	Turns         int64 `json:"turns"`
	// Tokens are words streamed in deltas; TokenEvents the token events
	// carrying them (several tokens coalesce into one event under load).
	Tokens      int64 `json:"tokens"`
	TokenEvents int64 `json:"token_events"`
	// Reruns counts requests that ran more than once (new run_id).
	Reruns int64 `json:"reruns"`
	// Elapsed runs from the first POST to the last run.completed.
	Elapsed           time.Duration `json:"elapsed_ns"`
	TokensPerSec      float64       `json:"tokens_per_sec"`
	TokenEventsPerSec float64       `json:"token_events_per_sec"`
	TurnsPerSec       float64       `json:"turns_per_sec"`
	// TokenLatency is receive time − the event's ts, per token event.
	TokenLatency Latency `json:"token_latency"`
	// PostLatency is POST → 202; TurnLatency POST → run.completed.
	PostLatency Latency `json:"post_latency"`
	TurnLatency Latency `json:"turn_latency"`
	// FirstTokenLatency is POST sent → the turn's first token event
	// received: what a chat user waits before the first word.
	FirstTokenLatency Latency `json:"first_token_latency"`
	// FirstTokenSlow counts turns whose first token took more than
	// SlowFactor × the floor's p50 (set when the floor ran too).
	FirstTokenSlow int64 `json:"first_token_slow"`
	// firstToken is the histogram behind FirstTokenLatency.
	firstToken *Histogram
	// HistoryChecked conversations had their history read back and checked.
	HistoryChecked int `json:"history_checked"`
}

// Ratios are pipeline token latency over floor latency.
type Ratios struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	// FirstTokenP99 is the pipeline's POST → first token p99 over the
	// floor's p99.
	FirstTokenP99 float64 `json:"first_token_p99"`
	// LoadedP50 and LoadedP99 are the pipeline's token latency over the
	// loaded floor's (when it ran).
	LoadedP50 float64 `json:"loaded_p50,omitempty"`
	LoadedP99 float64 `json:"loaded_p99,omitempty"`
}

// SlowFactor: a turn whose first token took more than SlowFactor × the
// floor's p50 counts as slow (issue 25's stall measure).
const SlowFactor = 10

// RSS is the stack's resident memory, from its metrics endpoint.
type RSS struct {
	URL string `json:"url,omitempty"`
	// IdleBytes is sampled before any load; the peaks every second during
	// each phase. Zero: not sampled.
	IdleBytes         int64 `json:"idle_bytes"`
	FloorPeakBytes    int64 `json:"floor_peak_bytes"`
	PipelinePeakBytes int64 `json:"pipeline_peak_bytes"`
	Samples           int   `json:"samples"`
}

// OK reports whether the run found no violation and no error.
func (r *Result) OK() bool { return r.Violations.Total == 0 && r.Errors.Total == 0 }

// ExitCode is 0 when OK, 1 otherwise.
func (r *Result) ExitCode() int {
	if r.OK() {
		return 0
	}
	return 1
}

// WriteJSONFile writes r, indented, to path.
func (r *Result) WriteJSONFile(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}

// WriteSummary writes the human summary: the load, a latency table,
// throughput, ratios, RSS, and the problems.
func (r *Result) WriteSummary(w io.Writer) error {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "turnpike loadgen, run %s, mode %s\n", r.RunID, c.Mode)
	fmt.Fprintf(&b, "load: %d conversations × %d messages × %d tokens, delay %v/token, think %v\n",
		c.Conversations, c.Messages, c.Tokens, c.Delay, c.Think)
	if p := r.Pipeline; p != nil {
		fmt.Fprintf(&b, "      %d users, %d WebSocket connections, at most %d subscriptions each\n", p.Users, p.Connections, c.SubsPerConn)
	}
	b.WriteByte('\n')
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency\tcount\tp50\tp90\tp99\tmax\tmean\t")
	row := func(name string, l Latency) {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n", name, l.Count, ms(l.P50), ms(l.P90), ms(l.P99), ms(l.Max), ms(l.Mean))
	}
	if f := r.Floor; f != nil {
		row("floor produce→fetch", f.Latency)
	}
	if f := r.LoadedFloor; f != nil {
		row("floor under load", f.Latency)
	}
	if p := r.Pipeline; p != nil {
		row("pipeline token ts→receive", p.TokenLatency)
		row("POST→202", p.PostLatency)
		row("POST→first token", p.FirstTokenLatency)
		row("POST→run.completed", p.TurnLatency)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteByte('\n')
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	if f := r.Floor; f != nil {
		fmt.Fprintf(tw, "floor\t%d/%d records in %v\t%.0f records/s\t(topic %s, %d partitions, %d producers)\n",
			f.Records, f.RecordsExpected, f.Elapsed.Round(time.Millisecond), f.RecordsPerSec, f.Topic, f.Partitions, f.Producers)
	}
	if f := r.LoadedFloor; f != nil {
		fmt.Fprintf(tw, "floor under load\t%d/%d records in %v\t%.0f records/s\t(%d producers, during the pipeline)\n",
			f.Records, f.RecordsExpected, f.Elapsed.Round(time.Millisecond), f.RecordsPerSec, f.Producers)
	}
	if p := r.Pipeline; p != nil {
		fmt.Fprintf(tw, "pipeline\t%d/%d turns in %v\t%.0f tokens/s\t%.0f token events/s, %.1f turns/s\n",
			p.Turns, p.TurnsExpected, p.Elapsed.Round(time.Millisecond), p.TokensPerSec, p.TokenEventsPerSec, p.TurnsPerSec)
		fmt.Fprintf(tw, "\t%d tokens in %d token events\t\thistory of %d conversations checked, %d re-runs\n",
			p.Tokens, p.TokenEvents, p.HistoryChecked, p.Reruns)
	}
	if q := r.Ratios; q != nil {
		if q.P50 > 0 {
			fmt.Fprintf(tw, "ratio to floor\tp50 %.2f×\tp99 %.2f×\tfirst token p99 %.2f×\n", q.P50, q.P99, q.FirstTokenP99)
		}
		if q.LoadedP50 > 0 {
			fmt.Fprintf(tw, "ratio to floor under load\tp50 %.2f×\tp99 %.2f×\t\n", q.LoadedP50, q.LoadedP99)
		}
		if f, p := r.Floor, r.Pipeline; f != nil && p != nil {
			fmt.Fprintf(tw, "slow first tokens\t%d of %d turns over %d× the floor's p50 (%s)\t\t\n", p.FirstTokenSlow, p.FirstTokenLatency.Count, SlowFactor, ms(SlowFactor*f.Latency.P50))
		}
	}
	if r.RSS.Samples > 0 {
		fmt.Fprintf(tw, "stack RSS\tidle %s\tpeak %s floor, %s pipeline\t\n", mib(r.RSS.IdleBytes), mib(r.RSS.FloorPeakBytes), mib(r.RSS.PipelinePeakBytes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteByte('\n')
	writeProblems(&b, "violations", r.Violations)
	writeProblems(&b, "errors", r.Errors)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "%s: %d violations, %d errors\n", verdict, r.Violations.Total, r.Errors.Total)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeProblems(b *strings.Builder, name string, p Problems) {
	if p.Total == 0 {
		fmt.Fprintf(b, "%s: none\n", name)
		return
	}
	kinds := make([]string, 0, len(p.ByKind))
	for k := range p.ByKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	fmt.Fprintf(b, "%s: %d:", name, p.Total)
	for _, k := range kinds {
		fmt.Fprintf(b, " %s=%d", k, p.ByKind[k])
	}
	b.WriteByte('\n')
	for i, v := range p.First {
		if i == 5 {
			fmt.Fprintf(b, "  … %d more (the first %d in the JSON result)\n", p.Total-int64(i), len(p.First))
			break
		}
		conv := ""
		if v.Conversation != "" {
			conv = " " + v.Conversation
		}
		fmt.Fprintf(b, "  %s%s: %s\n", v.Kind, conv, v.Detail)
	}
}

// ms formats d in milliseconds with three significant decimals.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0fms", v)
	case v >= 10:
		return fmt.Sprintf("%.1fms", v)
	}
	return fmt.Sprintf("%.2fms", v)
}

func mib(n int64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}
