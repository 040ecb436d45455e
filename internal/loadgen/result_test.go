package loadgen

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/echo"
)

func sampleResult() *Result {
	return &Result{
		RunID:   "20260102t150405-a1b2c3",
		Started: time.Date(2026, 1, 2, 15, 4, 5, 123e6, time.UTC),
		Config: Config{
			Mode: ModeBoth, IngestURL: "http://localhost:8080", StreamURL: "ws://localhost:8081/v1/stream",
			Token: "secret-token", AuthSecret: "secret-secret", Users: 10,
			Conversations: 100, Messages: 10, Tokens: 50, Delay: 20 * time.Millisecond, SubsPerConn: 4,
			ConversationPrefix: "loadgen", TurnTimeout: 2 * time.Minute, HistoryConcurrency: 8,
			Brokers: []string{"127.0.0.1:9092"}, TopicPrefix: "turnpike.", StreamBatchTimeout: 2 * time.Millisecond, Out: "x.json",
		},
		Floor: &FloorResult{Topic: "turnpike.loadgen.floor", Partitions: 12, Producers: 100, RecordsExpected: 50000, Records: 50000,
			Elapsed: 12 * time.Second, RecordsPerSec: 4166.5,
			Latency: Latency{Count: 50000, Mean: 900 * time.Microsecond, P50: 800 * time.Microsecond, P90: time.Millisecond, P99: 3 * time.Millisecond, Max: 9 * time.Millisecond}},
		Pipeline: &PipelineResult{Conversations: 100, Connections: 25, Users: 10, TurnsExpected: 1000, Turns: 999, Tokens: 49950,
			TokenEvents: 40000, Reruns: 1, Elapsed: 13 * time.Second, TokensPerSec: 3842.3, TokenEventsPerSec: 3076.9, TurnsPerSec: 76.8,
			TokenLatency:      Latency{Count: 40000, Mean: 2 * time.Millisecond, P50: 2 * time.Millisecond, P90: 3 * time.Millisecond, P99: 6 * time.Millisecond, Max: 30 * time.Millisecond},
			PostLatency:       Latency{Count: 1000, P50: time.Millisecond},
			TurnLatency:       Latency{Count: 999, P50: time.Second},
			FirstTokenLatency: Latency{Count: 999, P50: 7 * time.Millisecond, P99: 12 * time.Millisecond}, FirstTokenSlow: 3,
			HistoryChecked: 99},
		LoadedFloor: &FloorResult{Topic: "turnpike.loadgen.floor", Partitions: 12, Producers: 10, RecordsExpected: 5000, Records: 5000,
			Elapsed: 10 * time.Second, RecordsPerSec: 500,
			Latency: Latency{Count: 5000, Mean: 2 * time.Millisecond, P50: 1600 * time.Microsecond, P90: 2 * time.Millisecond, P99: 4 * time.Millisecond, Max: 11 * time.Millisecond}},
		Ratios: &Ratios{P50: 2.5, P99: 2, FirstTokenP99: 4, LoadedP50: 1.25, LoadedP99: 1.5},
		RSS:    RSS{URL: "http://localhost:8080/metrics", IdleBytes: 100 << 20, FloorPeakBytes: 150 << 20, PipelinePeakBytes: 300 << 20, Samples: 27},
		Violations: Problems{Total: 3, ByKind: map[string]int64{KindText: 2, KindSeq: 1},
			First: []Problem{{Kind: KindText, Conversation: "c1", Detail: "message 1 streamed …"}, {Kind: KindSeq, Conversation: "c2", Detail: "seq 4 after 2"}}},
		Errors: Problems{Total: 1, ByKind: map[string]int64{"turn_timeout": 1}, First: []Problem{{Kind: "turn_timeout", Conversation: "c3", Detail: "…"}}},
		Notes:  []string{"1 conversations stopped early (see errors); their history was not checked"},
	}
}

func TestResultJSONRoundTripKeepsEverythingButSecrets(t *testing.T) {
	t.Parallel()
	r := sampleResult()
	path := filepath.Join(t.TempDir(), "result.json")
	if err := r.WriteJSONFile(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "secret") {
		t.Errorf("the result file holds a secret:\n%s", b)
	}
	var got Result
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := *r
	want.Config.Token, want.Config.AuthSecret = "", ""
	if !reflect.DeepEqual(&got, &want) {
		t.Errorf("round trip changed the result:\ngot  %+v\nwant %+v", got, want)
	}
	for _, key := range []string{`"p99_ns"`, `"tokens_per_sec"`, `"by_kind"`, `"pipeline_peak_bytes"`, `"conversations"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("result file lacks %s", key)
		}
	}
}

func TestSummaryShowsFiguresRatiosAndProblems(t *testing.T) {
	t.Parallel()
	var sb strings.Builder
	r := sampleResult()
	if err := r.WriteSummary(&sb); err != nil {
		t.Fatal(err)
	}
	out := sb.String()
	for _, want := range []string{"floor produce→fetch", "pipeline token ts→receive", "0.80ms", "6.00ms", "3842 tokens/s",
		"p50 2.50×", "p99 2.00×", "POST→first token", "7.00ms", "12.0ms", "first token p99 4.00×",
		"3 of 999 turns over 10× the floor's p50 (8.00ms)", "idle 100 MiB", "300 MiB pipeline", "violations: 3: seq=1 text=2", "text c1: message 1 streamed",
		"errors: 1: turn_timeout=1", "FAIL: 3 violations, 1 errors",
		"floor under load", "1.60ms", "11.0ms", "5000/5000 records in 10s", "10 producers, during the pipeline", "ratio to floor under load", "p50 1.25×", "p99 1.50×"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if r.ExitCode() != 1 {
		t.Errorf("exit code %d with violations, want 1", r.ExitCode())
	}
	r.Violations, r.Errors = Problems{}, Problems{}
	if r.ExitCode() != 0 {
		t.Errorf("exit code %d without problems, want 0", r.ExitCode())
	}
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	good := Config{Mode: ModeBoth, IngestURL: "http://localhost:8080", StreamURL: "ws://localhost:8081/v1/stream",
		Token: "t", Users: 1, Conversations: 1, Messages: 1, Tokens: 1, SubsPerConn: 1, ConversationPrefix: "lg",
		TurnTimeout: time.Second, HistoryConcurrency: 1, Brokers: []string{"b:9092"}, TopicPrefix: "turnpike."}
	if err := good.Validate(); err != nil {
		t.Fatalf("a good config: %v", err)
	}
	tests := []struct {
		name   string
		change func(*Config)
		want   []string
	}{
		{"An unknown mode is refused.", func(c *Config) { c.Mode = "fast" }, []string{`mode "fast"`}},
		{"The floor needs brokers.", func(c *Config) { c.Brokers = nil }, []string{"-kafka-brokers"}},
		{"The pipeline needs an identity.", func(c *Config) { c.Token = "" }, []string{"no identity"}},
		{"A short auth secret is refused.", func(c *Config) { c.Token, c.AuthSecret = "", "short" }, []string{"auth secret: 5 bytes"}},
		{"More subscriptions per connection than the gateway allows are refused.", func(c *Config) { c.SubsPerConn = 101 }, []string{"subs per conn: 101"}},
		{"A conversation prefix outside the ID rule is refused.", func(c *Config) { c.ConversationPrefix = "a b" }, []string{"conversation prefix"}},
		{"A stream URL that is not a WebSocket is refused.", func(c *Config) { c.StreamURL = "http://x/v1/stream" }, []string{"ws:// or wss://"}},
		{"Every problem is reported at once.", func(c *Config) { c.Conversations, c.Messages, c.Tokens, c.Delay = 0, 0, 0, -1 },
			[]string{"conversations: 0", "messages: 0", "tokens: 0", "delay: -1ns"}},
		{"A negative loaded floor is refused.", func(c *Config) { c.LoadedFloor = -1 }, []string{"loaded floor: -1"}},
		{"A loaded floor needs the pipeline it runs beside.", func(c *Config) { c.Mode, c.LoadedFloor = ModeFloor, 5 }, []string{"-mode pipeline or both"}},
		{"A loaded floor needs brokers, even without the idle floor.", func(c *Config) { c.Mode, c.Brokers, c.LoadedFloor = ModePipeline, nil, 5 }, []string{"-kafka-brokers"}},
		{"The pipeline alone needs no brokers.", func(c *Config) { c.Mode, c.Brokers = ModePipeline, nil }, nil},
		{"The floor alone needs no identity nor URLs.", func(c *Config) { c.Mode, c.Token, c.StreamURL = ModeFloor, "", "" }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := good
			tc.change(&c)
			err := c.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate: nil, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestParseRSSFindsTheUnlabelledGauge(t *testing.T) {
	t.Parallel()
	const exposition = `# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes_total{x="y"} 5
process_resident_memory_bytes 1.23456789e+08
`
	sc := newScanner(exposition)
	got, err := parseRSS(sc)
	if err != nil || got != 123456789 {
		t.Errorf("parseRSS = %d, %v; want 123456789", got, err)
	}
	if _, err := parseRSS(newScanner("go_goroutines 5\n")); err == nil {
		t.Error("parseRSS without the metric: nil error")
	}
}

func newScanner(s string) *bufio.Scanner { return bufio.NewScanner(strings.NewReader(s)) }

func TestDirectiveBoundsAreTheEchoModels(t *testing.T) {
	t.Parallel()
	if maxTokens != echo.MaxTokens || maxDelay != echo.MaxDelay {
		t.Errorf("bounds %d, %v; the echo model's are %d, %v", maxTokens, maxDelay, echo.MaxTokens, echo.MaxDelay)
	}
}
