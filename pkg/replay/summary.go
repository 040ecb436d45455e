package replay

import (
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// summary is what a replay did. It is plain data.
type summary struct {
	Mode     string `json:"mode"`
	ReplayID string `json:"replay_id"`
	Topic    string `json:"topic"`
	Report   string `json:"report,omitempty"`
	// DryRun is set for a dry run: nothing was changed.
	DryRun bool `json:"dry_run,omitempty"`
	// Resumed is set when the replay continued a checkpoint.
	Resumed bool `json:"resumed,omitempty"`
	// Interrupted is set when the replay stopped before the end of its plan
	// (resume it with Resume).
	Interrupted bool `json:"interrupted,omitempty"`

	// Scanned counts the records read in this run; Selected those that
	// passed the filter; AlreadyDone those skipped because the report of
	// the resumed replay has them.
	Scanned     int64 `json:"scanned"`
	Selected    int64 `json:"selected"`
	AlreadyDone int64 `json:"already_done,omitempty"`

	// Redrive.
	Published int64 `json:"published,omitempty"`
	Skipped   int64 `json:"skipped,omitempty"`
	// Derived counts records published with a request id derived from
	// their origin; Reruns those re-run under a fresh id; Invalid those
	// that did not decode (republished byte for byte, or reported invalid
	// in shadow mode).
	Derived int64 `json:"derived,omitempty"`
	Reruns  int64 `json:"reruns,omitempty"`
	Invalid int64 `json:"invalid,omitempty"`

	// Shadow: runs by status (complete, incomplete, discarded, error …),
	// and the headline groups: Completed (complete), Incomplete (an answer
	// cut short), Failed (no answer: discarded, error, invalid).
	Statuses   map[string]int64 `json:"statuses,omitempty"`
	Completed  int64            `json:"completed,omitempty"`
	Incomplete int64            `json:"incomplete,omitempty"`
	Failed     int64            `json:"failed,omitempty"`
	Tokens     int64            `json:"tokens,omitempty"`
	Latency    *latency         `json:"latency,omitempty"`

	Elapsed       time.Duration `json:"elapsed_ns"`
	RecordsPerSec float64       `json:"records_per_sec"`
	// Raw is the plain read of the same selection (MeasureRaw).
	Raw *rawResult `json:"raw,omitempty"`
	// RatioToRaw is RecordsPerSec ÷ Raw.RecordsPerSec.
	RatioToRaw float64 `json:"ratio_to_raw,omitempty"`

	// Partitions are the per-partition counts of a dry run.
	Partitions []partitionCount `json:"partitions,omitempty"`
	// Sample holds the first records of a dry run.
	Sample []reportLine `json:"sample,omitempty"`
}

// partitionCount is one partition of a dry run.
type partitionCount struct {
	partitionRange
	Scanned  int64 `json:"scanned"`
	Selected int64 `json:"selected"`
}

// latency summarises the run times of shadow requests.
type latency struct {
	P50 time.Duration `json:"p50_ns"`
	P90 time.Duration `json:"p90_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
}

// maxLatencySamples bounds the run times kept for the percentiles: past it,
// a uniform sample of them (reservoir sampling) is kept.
const maxLatencySamples = 1 << 17

// latencies collects run times, in bounded memory. Safe for concurrent use.
type latencies struct {
	mu    sync.Mutex // guards every field
	d     []time.Duration
	seen  int64
	max   time.Duration
	rng   *rand.Rand
	limit int // maxLatencySamples; tests lower it
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen++
	l.max = max(l.max, d)
	limit := l.limit
	if limit == 0 {
		limit = maxLatencySamples
	}
	if len(l.d) < limit {
		l.d = append(l.d, d)
		return
	}
	if l.rng == nil {
		l.rng = rand.New(rand.NewPCG(1, 2))
	}
	if i := l.rng.Int64N(l.seen); i < int64(limit) {
		l.d[i] = d
	}
}

func (l *latencies) summary() *latency {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return nil
	}
	sort.Slice(l.d, func(i, j int) bool { return l.d[i] < l.d[j] })
	q := func(p float64) time.Duration { return l.d[min(len(l.d)-1, int(p*float64(len(l.d))))] }
	return &latency{P50: q(0.50), P90: q(0.90), P99: q(0.99), Max: l.max}
}

// WriteText writes the summary for people.
func (s *summary) WriteText(w io.Writer) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	switch {
	case s.DryRun:
		p("dry run of a %s replay of %s: nothing changed\n", s.Mode, s.Topic)
	case s.Interrupted:
		p("replay %s (%s) of %s: INTERRUPTED, continue it with -resume\n", s.ReplayID, s.Mode, s.Topic)
	default:
		p("replay %s (%s) of %s: done\n", s.ReplayID, s.Mode, s.Topic)
	}
	if len(s.Partitions) > 0 {
		p("  %-9s %-25s %10s %10s\n", "partition", "offsets [start, end)", "records", "selected")
		for _, pc := range s.Partitions {
			p("  %-9d %-25s %10d %10d\n", pc.Partition, fmt.Sprintf("%d..%d", pc.Start, pc.End), pc.Scanned, pc.Selected)
		}
	}
	p("  records read %d, selected %d", s.Scanned, s.Selected)
	if s.AlreadyDone > 0 {
		p(", already done before the resume %d", s.AlreadyDone)
	}
	p("\n")
	switch {
	case s.DryRun:
	case s.Mode == modeRedrive:
		p("  published %d (derived ids %d, re-runs under a fresh id %d, undecodable byte for byte %d), skipped as already decided %d\n",
			s.Published, s.Derived, s.Reruns, s.Invalid, s.Skipped)
	case s.Mode == modeShadow:
		p("  completed %d, incomplete %d, failed %d; tokens %d\n", s.Completed, s.Incomplete, s.Failed, s.Tokens)
		if len(s.Statuses) > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(s.Statuses)) {
				parts = append(parts, fmt.Sprintf("%s %d", k, s.Statuses[k]))
			}
			p("  by status: %s\n", strings.Join(parts, ", "))
		}
		if l := s.Latency; l != nil {
			p("  latency p50 %v, p90 %v, p99 %v, max %v\n", round(l.P50), round(l.P90), round(l.P99), round(l.Max))
		}
	}
	for _, l := range s.Sample {
		p("  sample %d/%d %s key=%s request_id=%s %q\n", l.Source.Partition, l.Source.Offset, l.Source.Time.UTC().Format(time.RFC3339),
			l.Key, l.RequestID, truncate(l.Content, 60))
	}
	if !s.DryRun {
		p("  elapsed %v, %.0f records/s\n", round(s.Elapsed), s.RecordsPerSec)
	}
	if s.Raw != nil {
		p("  raw read of the same selection: %d records in %v, %.0f records/s; replay/raw %.3f\n",
			s.Raw.Records, round(s.Raw.Elapsed), s.Raw.RecordsPerSec, s.RatioToRaw)
	}
	if s.Report != "" {
		p("  report %s\n", s.Report)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
