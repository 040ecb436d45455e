package loadgen

import (
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/testenv/stacktest"
	"github.com/turnpike-dev/turnpike/pkg/devstack"
)

// testStack is a running in-process devstack.
type testStack struct {
	*devstack.Stack
	topicPrefix string
}

// startStack runs the devstack in-process on random ports (stacktest's),
// and returns once it is ready.
func startStack(t *testing.T) testStack {
	t.Helper()
	cfg := stacktest.Config(t, "lg")
	cfg.Worker.Partitions = 4
	cfg.Worker.SessionTimeout = 6 * time.Second
	cfg.Worker.DrainTimeout = 5 * time.Second
	return testStack{Stack: stacktest.Start(t, cfg), topicPrefix: cfg.Worker.TopicPrefix}
}

func TestRunAgainstTheDevstack(t *testing.T) {
	t.Parallel()
	st := startStack(t)
	const conversations, messages, tokens = 4, 3, 5
	base := Config{
		Mode: ModeBoth, IngestURL: st.IngestURL, StreamURL: st.StreamURL, AuthSecret: st.AuthSecret, Users: 2,
		Conversations: conversations, Messages: messages, Tokens: tokens, Delay: 0, SubsPerConn: 1,
		ConversationPrefix: "lg", TurnTimeout: 30 * time.Second, HistoryConcurrency: 4,
		Brokers: st.Brokers, TopicPrefix: st.topicPrefix, StreamBatchTimeout: DefaultStreamBatchTimeout,
	}
	log := stacktest.Logger(t)

	t.Run("A clean run of both modes, given only the ingest URL, reports plausible figures and no problem.", func(t *testing.T) {
		ctx := testenv.Context(t, 60*time.Second)
		progressOut := &syncWriter{b: &strings.Builder{}}
		cfg := base
		cfg.StreamURL = "" // found from the ingest API
		cfg.Progress, cfg.ProgressInterval = progressOut, 100*time.Millisecond
		cfg.LoadedFloor = 2
		res, err := Run(ctx, cfg, log)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if res.Config.StreamURL != st.StreamURL {
			t.Errorf("stream URL %q; want the devstack's %q, which its ingest API names", res.Config.StreamURL, st.StreamURL)
		}
		var summary strings.Builder
		if err := res.WriteSummary(&summary); err != nil {
			t.Fatal(err)
		}
		t.Logf("summary:\n%s", summary.String())
		if !res.OK() || res.ExitCode() != 0 {
			t.Errorf("violations %+v, errors %+v", res.Violations, res.Errors)
		}
		const want = conversations * messages * tokens
		f := res.Floor
		switch {
		case f == nil:
			t.Fatal("no floor result")
		case f.Records != want || f.RecordsExpected != want || f.Latency.Count != want:
			t.Errorf("floor: %d of %d records, %d latencies; want %d", f.Records, f.RecordsExpected, f.Latency.Count, want)
		case f.Latency.P50 <= 0 || f.Latency.P99 < f.Latency.P50 || f.Latency.Max < f.Latency.P99 || f.Latency.Max > 30*time.Second:
			t.Errorf("floor latency implausible: %+v", f.Latency)
		case f.RecordsPerSec <= 0 || f.Partitions < 1:
			t.Errorf("floor: %+v", f)
		}
		p := res.Pipeline
		switch {
		case p == nil:
			t.Fatal("no pipeline result")
		case p.Turns != conversations*messages || p.TurnsExpected != p.Turns:
			t.Errorf("pipeline: %d of %d turns", p.Turns, p.TurnsExpected)
		case p.Tokens != want:
			t.Errorf("pipeline: %d tokens, want %d", p.Tokens, want)
		case p.TokenEvents < 1 || p.TokenEvents > want || p.TokenLatency.Count != p.TokenEvents:
			t.Errorf("pipeline: %d token events, %d latencies", p.TokenEvents, p.TokenLatency.Count)
		case p.TokenLatency.P50 <= 0 || p.TokenLatency.Max > 30*time.Second || p.PostLatency.Count != p.Turns || p.TurnLatency.Count != p.Turns:
			t.Errorf("pipeline latencies implausible: token %+v post %+v turn %+v", p.TokenLatency, p.PostLatency, p.TurnLatency)
		case p.FirstTokenLatency.Count != p.Turns || p.FirstTokenLatency.P50 <= 0 || p.FirstTokenSlow > p.Turns:
			t.Errorf("pipeline: first token of %d turns (%+v, %d slow), want one per turn", p.Turns, p.FirstTokenLatency, p.FirstTokenSlow)
		case p.TokensPerSec <= 0 || p.TurnsPerSec <= 0 || p.Elapsed <= 0:
			t.Errorf("pipeline rates: %+v", p)
		case p.HistoryChecked != conversations || p.Connections != conversations || p.Users != 2:
			t.Errorf("pipeline: history checked %d, connections %d, users %d", p.HistoryChecked, p.Connections, p.Users)
		}
		const wantLoaded = 2 * messages * tokens
		if lf := res.LoadedFloor; lf == nil || lf.Producers != 2 || lf.Records != wantLoaded || lf.Latency.Count != wantLoaded || lf.Latency.P50 <= 0 {
			t.Errorf("loaded floor %+v: want 2 producers' %d records, each timed", lf, wantLoaded)
		}
		if res.Ratios == nil || res.Ratios.P50 <= 0 || res.Ratios.P99 <= 0 || res.Ratios.FirstTokenP99 <= 0 || res.Ratios.LoadedP50 <= 0 || res.Ratios.LoadedP99 <= 0 {
			t.Errorf("ratios %+v", res.Ratios)
		}
		if res.RSS.IdleBytes <= 0 || res.RSS.PipelinePeakBytes <= 0 || res.RSS.Samples < 3 {
			t.Errorf("RSS %+v, notes %v", res.RSS, res.Notes)
		}
		for _, w := range []string{"floor ", "pipeline "} {
			if !strings.Contains(progressOut.String(), w) {
				t.Errorf("progress lacks %q:\n%s", w, progressOut.String())
			}
		}
	})

	t.Run("A run whose oracle expects another reply length reports violations.", func(t *testing.T) {
		ctx := testenv.Context(t, 60*time.Second)
		cfg := base
		cfg.Mode, cfg.AuthSecret, cfg.Token, cfg.SubsPerConn, cfg.MetricsURL = ModePipeline, "", st.DevToken, 3, MetricsOff
		cfg.oracleTokens = tokens + 1
		res, err := Run(ctx, cfg, log)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if res.OK() || res.ExitCode() != 1 {
			t.Fatalf("OK with the wrong expectation: %+v", res.Violations)
		}
		want := map[string]int64{KindText: conversations * messages, KindHistoryMessage: conversations * messages}
		if got := res.Violations.ByKind; !maps.Equal(got, want) {
			t.Errorf("violations %v, want %v", got, want)
		}
		if res.Errors.Total != 0 {
			t.Errorf("errors %+v", res.Errors)
		}
		if p := res.Pipeline; p == nil || p.Connections != 2 || p.Users != 1 || p.Tokens != conversations*messages*tokens {
			t.Errorf("pipeline %+v", p)
		}
		if res.Floor != nil || res.Ratios != nil {
			t.Errorf("floor ran in pipeline mode: %+v", res.Floor)
		}
	})
}

// syncWriter lets the progress goroutine and the test share a builder.
type syncWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
