package replay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	base := func() config {
		c := config{Mode: modeShadow, StartOffset: -1, EndOffset: -1}
		c.Brokers, c.MongoDB = []string{"127.0.0.1:9"}, "turnpike"
		return c
	}
	tests := []struct {
		name  string
		tweak func(*config)
		want  []string // substrings of the error; none: valid
	}{
		{"A plain shadow replay is valid.", func(*config) {}, nil},
		{"A start offset after the end offset is a bad range.", func(c *config) { c.StartOffset, c.EndOffset = 10, 5 },
			[]string{"start 10 is after end 5"}},
		{"Since after until is a bad time range.", func(c *config) { c.Since, c.Until = "2026-11-30T10:00:00Z", "2026-11-30T09:00:00Z" },
			[]string{"since 2026-11-30T10:00:00Z is after until"}},
		{"A time that is neither RFC 3339 nor a duration is refused.", func(c *config) { c.Since = "yesterday" },
			[]string{`since: "yesterday"`}},
		{"A missing mode and missing brokers are both reported.", func(c *config) { c.Mode, c.Brokers = "", nil },
			[]string{"mode: required", "no Kafka brokers"}},
		{"The shadow database may not be the live one.", func(c *config) { c.MongoURI, c.ShadowMongoDB = "mongodb://x", "turnpike" },
			[]string{"is the live database"}},
		{"Rerun-failed belongs to redrive.", func(c *config) { c.RerunFailed = true }, []string{"rerun-failed applies to redrive only"}},
		{"A filter must follow the ID rule.", func(c *config) { c.Tenant = "a/b" }, []string{"tenant"}},
		{"A negative offset other than -1 is refused.", func(c *config) { c.StartOffset = -5 }, []string{"start offset -5"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := base()
			tc.tweak(&c)
			err := c.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: nil, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %v, want it to mention %q", err, w)
				}
			}
		})
	}
}

func TestSelectionResolvesRangesAndRefusesWhatTheTopicDoesNotHave(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	e := newEnv(t)
	// Ten records in partition 0, written with explicit timestamps a
	// minute apart.
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	w := &kafka.Writer{Addr: kafka.TCP(e.brokers...), Topic: e.names.Requests, Balancer: kafka.BalancerFunc(func(kafka.Message, ...int) int { return 0 }),
		BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	id := events.Identity{Tenant: "acme", User: "gil", Conversation: "sel"}
	for i := range 10 {
		m := testenv.Request(id, fmt.Sprintf("r%d", i), fmt.Sprintf("m%d", i))
		m.Time = t0.Add(time.Duration(i) * time.Minute)
		if err := w.WriteMessages(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()

	tests := []struct {
		name    string
		tweak   func(*config)
		want    []partitionRange // partition 0 first
		wantErr error
		errText string
	}{
		{"Every partition, whole, by default.", func(*config) {}, []partitionRange{{0, 0, 10, 0}, {1, 0, 0, 0}, {2, 0, 0, 0}}, nil, ""},
		{"An offset range is applied to each selected partition.", func(c *config) { c.Partitions, c.StartOffset, c.EndOffset = []int{0}, 3, 7 },
			[]partitionRange{{0, 3, 7, 3}}, nil, ""},
		{"An end past the partition's end stops at the end.", func(c *config) { c.Partitions, c.EndOffset = []int{0}, 100 },
			[]partitionRange{{0, 0, 10, 0}}, nil, ""},
		{"A time range becomes offsets through offset-for-time.", func(c *config) {
			c.Partitions, c.Since, c.Until = []int{0}, t0.Add(2*time.Minute).Format(time.RFC3339), t0.Add(5*time.Minute+time.Second).Format(time.RFC3339)
		}, []partitionRange{{0, 2, 6, 2}}, nil, ""},
		{"A since later than every record selects nothing.", func(c *config) { c.Partitions, c.Since = []int{0}, t0.Add(time.Hour).Format(time.RFC3339) },
			[]partitionRange{{0, 10, 10, 10}}, nil, ""},
		{"A partition the topic does not have is refused.", func(c *config) { c.Partitions = []int{0, 7} },
			nil, errBadSelection, "partition 7 out of range: topic " + e.names.Requests + " has partitions 0..2"},
		{"An unknown topic is refused, naming the topics that exist.", func(c *config) { c.Topic = e.prefix + "nope" },
			nil, errUnknownTopic, e.names.DLQ},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := e.config(modeShadow, "x")
			tc.tweak(&cfg)
			cfg.setDefaults()
			// Its own deadline, started when it runs: a parallel subtest
			// may wait for a slot long after its parent returned.
			plan, err := resolve(testenv.Context(t, 30*time.Second), cfg, time.Now())
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("resolve: %v, want %v mentioning %q", err, tc.wantErr, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(plan.Ranges) != fmt.Sprint(tc.want) {
				t.Errorf("ranges %v, want %v", plan.Ranges, tc.want)
			}
		})
	}
}

func TestDryRunCountsAndSamplesTheFilteredSelectionAndWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	e := newEnv(t)
	e.conversations(t, ctx, "hal", 4, 5)
	testenv.Produce(t, ctx, e.brokers, e.names.Requests, testenv.Request(events.Identity{Tenant: "acme", User: "ida", Conversation: "c0"}, "", "other user"))
	cfg := e.config(modeRedrive, "dry")
	cfg.DryRun, cfg.User, cfg.Sample = true, "hal", 3
	sum, err := runReplay(ctx, cfg, deps{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Scanned != 21 || sum.Selected != 20 || len(sum.Sample) != 3 || len(sum.Partitions) != testPartitions {
		t.Fatalf("dry run: scanned %d, selected %d, %d samples, %d partitions; want 21, 20, 3, %d",
			sum.Scanned, sum.Selected, len(sum.Sample), len(sum.Partitions), testPartitions)
	}
	var perPartition int64
	for _, p := range sum.Partitions {
		perPartition += p.Selected
	}
	if perPartition != 20 {
		t.Errorf("partitions count %d selected, want 20", perPartition)
	}
	for _, l := range sum.Sample {
		if !strings.HasPrefix(l.Key, "acme/hal/") || l.RequestID == "" || l.Content == "" {
			t.Errorf("sample %+v", l)
		}
	}
	var out strings.Builder
	if err := sum.WriteText(&out); err != nil || !strings.Contains(out.String(), "dry run of a redrive replay of ") {
		t.Errorf("summary text %q, %v", out.String(), err)
	}
	if _, err := os.Stat(cfg.Report); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dry run wrote its report: %v", err)
	}
	if _, err := os.Stat(cfg.Checkpoint); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dry run wrote a checkpoint: %v", err)
	}
	if got := len(e.readAll(t, ctx, e.names.Requests)); got != 21 {
		t.Errorf("requests topic holds %d records after a dry run, want 21", got)
	}
}

func TestTheTrackerResumesAtTheFirstRecordNotDone(t *testing.T) {
	t.Parallel()
	tr := newTracker(partitionRange{Partition: 0, Start: 10, End: 30, Next: 10})
	if got := tr.resumeAt(); got != 10 {
		t.Fatalf("nothing read: %d, want 10", got)
	}
	for _, off := range []int64{10, 11, 13, 14} { // 12 is a gap (a transaction marker)
		tr.read(off)
	}
	tr.done(11)
	tr.done(13)
	if got := tr.resumeAt(); got != 10 {
		t.Errorf("10 not done: %d, want 10", got)
	}
	tr.done(10)
	if got := tr.resumeAt(); got != 14 {
		t.Errorf("10, 11, 13 done: %d, want 14", got)
	}
	tr.done(14)
	if got := tr.resumeAt(); got != 15 {
		t.Errorf("all read done: %d, want 15", got)
	}
	tr.finish()
	if got := tr.resumeAt(); got != 30 {
		t.Errorf("finished: %d, want the end 30", got)
	}
}

func TestAResumedReportDropsATornLastLine(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "r.jsonl")
	good := `{"source":{"topic":"t","partition":0,"offset":1},"key":"a/b/c","status":"complete"}` + "\n"
	if err := os.WriteFile(path, []byte(good+`{"source":{"topic":"t","parti`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := openReport(path, false, nil); !errors.Is(err, errReportExists) {
		t.Fatalf("opening a report with lines without resume: %v, want ErrReportExists", err)
	}
	var seen []reportLine
	r, err := openReport(path, true, func(l reportLine) error { seen = append(seen, l); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := r.write(&reportLine{Source: coordinates{Topic: "t", Offset: 2}, Key: "a/b/c"}); err != nil {
		t.Fatal(err)
	}
	if err := r.close(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0].Source.Offset != 1 {
		t.Errorf("resume read %+v, want the one complete line", seen)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], `"offset":2`) {
		t.Errorf("report after resume:\n%s", b)
	}
}

func TestACheckpointIsReplacedAtomically(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "cp")
	for i := range 3 {
		cp := checkpoint{Version: checkpointVersion, ReplayID: "rp-1", Mode: modeShadow, Plan: plan{Topic: "t", Ranges: []partitionRange{{0, 0, 10, int64(i)}}}}
		if err := writeCheckpoint(path, cp); err != nil {
			t.Fatal(err)
		}
	}
	cp, err := readCheckpoint(path)
	if err != nil || cp.Plan.Ranges[0].Next != 2 {
		t.Fatalf("checkpoint %+v, %v; want next 2", cp, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("directory holds %d files, want only the checkpoint (no temporary left)", len(entries))
	}
	if err := os.WriteFile(path, []byte(`{"version":99}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readCheckpoint(path); err == nil {
		t.Error("a checkpoint of an unknown version was read")
	}
}

func TestARedriveReRunIDContinuesTheOriginalsChain(t *testing.T) {
	t.Parallel()
	tests := []struct{ id, base, k string }{
		{"req-1", "", ""},
		{"req-1-rd1", "req-1", "1"},
		{"d-0-5-1795-rd12", "d-0-5-1795", "12"},
		{"word-rdx", "", ""},
	}
	for _, tc := range tests {
		m := rerunSuffix.FindStringSubmatch(tc.id)
		switch {
		case tc.base == "" && m != nil:
			t.Errorf("%q parsed as a re-run of %q", tc.id, m[1])
		case tc.base != "" && (m == nil || m[1] != tc.base || m[2] != tc.k):
			t.Errorf("%q: %v, want a re-run %s of %q", tc.id, m, tc.k, tc.base)
		}
	}
}

func TestLatencyPercentilesStayCloseWithBoundedSamples(t *testing.T) {
	t.Parallel()
	exact, sampled := &latencies{}, &latencies{limit: 1000}
	for i := 1; i <= 100_000; i++ {
		d := time.Duration(i) * time.Microsecond
		exact.add(d)
		sampled.add(d)
	}
	if len(sampled.d) != 1000 {
		t.Fatalf("kept %d samples, want 1000", len(sampled.d))
	}
	e, s := exact.summary(), sampled.summary()
	if e.P50 != 50001*time.Microsecond || e.Max != 100*time.Millisecond {
		t.Errorf("exact p50 %v max %v", e.P50, e.Max)
	}
	if s.Max != e.Max {
		t.Errorf("sampled max %v, want the true max %v", s.Max, e.Max)
	}
	for name, pair := range map[string][2]time.Duration{"p50": {e.P50, s.P50}, "p90": {e.P90, s.P90}} {
		if diff := pair[0] - pair[1]; diff > 5*time.Millisecond || diff < -5*time.Millisecond {
			t.Errorf("%s: sampled %v, exact %v", name, pair[1], pair[0])
		}
	}
}
