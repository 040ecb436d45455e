package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// summarizerFake answers each summary request with the next of its
// texts, or fails with err, and records what it was asked to condense.
type summarizerFake struct {
	err  error
	text string // the answer, if set, instead of "summary <n>"

	mu    sync.Mutex
	asked []string // the user message of each call
}

func (s *summarizerFake) Generate(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, in[len(in)-1].Content)
	if s.err != nil {
		return nil, s.err
	}
	text := fmt.Sprintf("summary %d", len(s.asked))
	if s.text != "" {
		text = s.text
	}
	out := schema.AssistantMessage(text, nil)
	out.ResponseMeta = &schema.ResponseMeta{Usage: &schema.TokenUsage{PromptTokens: 100, CompletionTokens: 7}}
	return out, nil
}

func (s *summarizerFake) Stream(context.Context, []*schema.Message, ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	return nil, errors.New("the summarizer is only asked to generate")
}

func (s *summarizerFake) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	return s, nil
}

// compactionWindow is the window Pending.Start hands the worker: stored
// messages 1..n ("m<seq>"), oldest first, then the pending one ("new").
func compactionWindow(n int64) []history.Message {
	var w []history.Message
	for seq := int64(1); seq <= n; seq++ {
		role := history.RoleUser
		if seq%2 == 0 {
			role = history.RoleAssistant
		}
		w = append(w, history.Message{Seq: seq, Role: role, Content: fmt.Sprintf("m%d", seq), RequestID: fmt.Sprintf("r%d", (seq+1)/2)})
	}
	return append(w, history.Message{Role: history.RoleUser, Content: "new", RequestID: "r-new"})
}

// modelInput is role:content of each message of the model's input.
func modelInput(msgs []*schema.Message) string {
	parts := make([]string, len(msgs))
	for i, m := range msgs {
		parts[i] = string(m.Role) + ":" + m.Content
	}
	return strings.Join(parts, " | ")
}

// The model's window under compaction (README "Context compaction";
// DESIGN.md "Agents, interrupts and compaction"): a summary covering
// messages 1..k is one system message followed by exactly the messages
// after k, never k itself or anything before it; a new summary condenses
// the previous one and only the messages after it, up to the newest
// CompactKeep (rounded to start at a user message), and summaries only
// move forward.
func TestCompactionWindowHoldsTheSummaryThenOnlyTheMessagesAfterIt(t *testing.T) {
	t.Parallel()
	sys := func(text string) string { return "system:" + summaryPrefix + text }
	tests := []struct {
		name        string
		stored      int64 // messages 1..stored in the window
		skip        int   // the window leaves out its first skip messages
		summary     int64 // Through of the stored summary; 0: none
		tokens      int   // CompactTokens
		keep        int   // CompactKeep
		failSummary bool
		want        string // the model's input
		wantAsked   string // what the summarizer was asked to condense; "": not asked
		wantThrough int64  // the stored summary's Through afterwards
		// The compactions counted (turnpike_worker_compactions_total by
		// result) by the call, and by the next run's call ("": none).
		wantResult, nextResult string
	}{
		{
			name:   "Under the budget without a summary, the window is the messages themselves.",
			stored: 8, tokens: 1 << 20, keep: 2,
			want: "user:m1 | assistant:m2 | user:m3 | assistant:m4 | user:m5 | assistant:m6 | user:m7 | assistant:m8 | user:new",
		},
		{
			name:   "Under the budget, a summary through 4 replaces messages 1 to 4, and only those.",
			stored: 8, summary: 4, tokens: 1 << 20, keep: 2,
			want:        sys("stored summary") + " | user:m5 | assistant:m6 | user:m7 | assistant:m8 | user:new",
			wantThrough: 4,
		},
		{
			name:   "A summary through the newest stored message leaves only the new one.",
			stored: 8, summary: 8, tokens: 1 << 20, keep: 2,
			want:        sys("stored summary") + " | user:new",
			wantThrough: 8,
		},
		{
			name:   "Keeping one message that is an answer keeps none: every stored message is condensed.",
			stored: 8, tokens: 1, keep: 1,
			want:        sys("summary 1") + " | user:new",
			wantAsked:   "Conversation:\nuser: m1\nassistant: m2\nuser: m3\nassistant: m4\nuser: m5\nassistant: m6\nuser: m7\nassistant: m8\n",
			wantThrough: 8, wantResult: "summarized", nextResult: "kept",
		},
		{
			name:   "A window whose newest stored message is a question keeps just that question and condenses the turns before it.",
			stored: 7, tokens: 1, keep: 1,
			want:        sys("summary 1") + " | user:m7 | user:new",
			wantAsked:   "Conversation:\nuser: m1\nassistant: m2\nuser: m3\nassistant: m4\nuser: m5\nassistant: m6\n",
			wantThrough: 6, wantResult: "summarized", nextResult: "kept",
		},
		{
			name:   "A window that starts with an answer and is kept whole condenses nothing, not even that answer.",
			stored: 8, skip: 1, tokens: 1, keep: 7,
			want:       "assistant:m2 | user:m3 | assistant:m4 | user:m5 | assistant:m6 | user:m7 | assistant:m8 | user:new",
			wantResult: "kept", nextResult: "kept",
		},
		{
			name:   "With compaction off (a budget of 0), the window is the messages themselves, even with a summary stored.",
			stored: 8, summary: 4, tokens: 0, keep: 2,
			want:        "user:m1 | assistant:m2 | user:m3 | assistant:m4 | user:m5 | assistant:m6 | user:m7 | assistant:m8 | user:new",
			wantThrough: 4,
		},
		{
			// Nine messages of 2 or 3 bytes: 5 tokens each.
			name:   "A window whose estimate is exactly the budget (45) is not condensed.",
			stored: 8, tokens: 45, keep: 2,
			want: "user:m1 | assistant:m2 | user:m3 | assistant:m4 | user:m5 | assistant:m6 | user:m7 | assistant:m8 | user:new",
		},
		{
			name:   "A window one token over the budget (44) is condensed.",
			stored: 8, tokens: 44, keep: 2,
			want:        sys("summary 1") + " | user:m7 | assistant:m8 | user:new",
			wantAsked:   "Conversation:\nuser: m1\nassistant: m2\nuser: m3\nassistant: m4\nuser: m5\nassistant: m6\n",
			wantThrough: 6, wantResult: "summarized", // the next window is under the budget: nothing counted
		},
		{
			name:   "Over the budget without a summary, all but the newest two are condensed, and the window holds the new summary then messages 7 and 8.",
			stored: 8, tokens: 1, keep: 2,
			want:        sys("summary 1") + " | user:m7 | assistant:m8 | user:new",
			wantAsked:   "Conversation:\nuser: m1\nassistant: m2\nuser: m3\nassistant: m4\nuser: m5\nassistant: m6\n",
			wantThrough: 6, wantResult: "summarized", nextResult: "kept",
		},
		{
			name:   "Over the budget with a summary through 4, it and messages 5 and 6 alone are condensed.",
			stored: 8, summary: 4, tokens: 1, keep: 2,
			want:        sys("summary 1") + " | user:m7 | assistant:m8 | user:new",
			wantAsked:   "Earlier summary:\nstored summary\n\nConversation:\nuser: m5\nassistant: m6\n",
			wantThrough: 6, wantResult: "summarized", nextResult: "kept",
		},
		{
			name:   "Keeping three rounds the kept part to start at a user message: messages 7 and 8.",
			stored: 8, tokens: 1, keep: 3,
			want:        sys("summary 1") + " | user:m7 | assistant:m8 | user:new",
			wantAsked:   "Conversation:\nuser: m1\nassistant: m2\nuser: m3\nassistant: m4\nuser: m5\nassistant: m6\n",
			wantThrough: 6, wantResult: "summarized", nextResult: "kept",
		},
		{
			name:   "Over the budget with nothing after the summary older than the kept part, the summary stays as it is.",
			stored: 8, summary: 6, tokens: 1, keep: 2,
			want:        sys("stored summary") + " | user:m7 | assistant:m8 | user:new",
			wantThrough: 6, wantResult: "kept", nextResult: "kept",
		},
		{
			name:   "A summarizer failure keeps the window with the stored summary, and the summary as it was.",
			stored: 8, summary: 4, tokens: 1, keep: 2, failSummary: true,
			want:        sys("stored summary") + " | user:m5 | assistant:m6 | user:m7 | assistant:m8 | user:new",
			wantAsked:   "Earlier summary:\nstored summary\n\nConversation:\nuser: m5\nassistant: m6\n",
			wantThrough: 4, wantResult: "failed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			store := history.NewMemoryStore()
			id := events.Identity{Tenant: "acme", User: "ann", Conversation: "long"}
			if tt.summary > 0 {
				if err := store.SaveSummary(ctx, id, history.Summary{Through: tt.summary, Text: "stored summary"}); err != nil {
					t.Fatal(err)
				}
			}
			summarizer := &summarizerFake{}
			if tt.failSummary {
				summarizer.err = errors.New("summarizer unreachable")
			}
			echoModel, err := echo.New(echo.Config{})
			if err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			var logs bytes.Buffer // compactWindow logs on this goroutine
			c, err := newConsumer(Config{Brokers: []string{"unused:9092"}, CompactTokens: tt.tokens, CompactKeep: tt.keep},
				deps{Store: store, Model: echoModel, Summarizer: summarizer, Registerer: reg,
					Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if err != nil {
				t.Fatal(err)
			}
			w := c.step
			counted := map[string]float64{}
			if tt.wantResult != "" {
				counted[tt.wantResult]++
			}

			in, err := w.compactWindow(ctx, store, id, compactionWindow(tt.stored)[tt.skip:])
			if err != nil {
				t.Fatalf("compactWindow: %v", err)
			}
			if got := modelInput(in); got != tt.want {
				t.Errorf("model input\n got %q\nwant %q", got, tt.want)
			}
			var asked string
			if len(summarizer.asked) > 1 {
				t.Errorf("the summarizer was asked %d times, want at most once", len(summarizer.asked))
			} else if len(summarizer.asked) == 1 {
				asked = summarizer.asked[0]
			}
			if asked != tt.wantAsked {
				t.Errorf("the summarizer was asked to condense\n%q\nwant\n%q", asked, tt.wantAsked)
			}
			sum, found, err := store.Summary(ctx, id)
			if err != nil || found != (tt.wantThrough > 0) || sum.Through != tt.wantThrough {
				t.Errorf("stored summary %+v, %v, %v; want through %d", sum, found, err, tt.wantThrough)
			}
			if tt.wantThrough > tt.summary && sum.Text != "summary 1" {
				t.Errorf("stored summary text %q, want the new one", sum.Text)
			}
			if got := compactions(t, reg); !maps.Equal(got, counted) {
				t.Errorf("compactions counted %v, want %v", got, counted)
			}
			// The summarizer's tokens are counted under its model's name
			// (README "Token usage"), once per summary it wrote.
			var summaries float64
			if tt.wantResult == "summarized" {
				summaries = 1
			}
			for kind, per := range map[string]float64{"prompt": 100, "completion": 7} {
				if n := summarizerTokens(t, reg, kind); n != summaries*per {
					t.Errorf("summarizer %s tokens counted %v, want %v", kind, n, summaries*per)
				}
			}
			checkCompactionLog(t, logs.String(), id, tt.failSummary)

			// The next run of the conversation, with the same window, finds
			// the summary and compacts no further: the window is the same
			// and nothing is condensed again.
			if tt.failSummary {
				return
			}
			asks := len(summarizer.asked)
			again, err := w.compactWindow(ctx, store, id, compactionWindow(tt.stored)[tt.skip:])
			if err != nil {
				t.Fatalf("second compactWindow: %v", err)
			}
			if got := modelInput(again); got != tt.want {
				t.Errorf("the next run's model input\n got %q\nwant %q", got, tt.want)
			}
			if len(summarizer.asked) != asks {
				t.Errorf("the next run asked the summarizer again: %q", summarizer.asked[asks:])
			}
			if after, _, _ := store.Summary(ctx, id); after.Through != sum.Through {
				t.Errorf("the next run moved the summary from %d to %d", sum.Through, after.Through)
			}
			if tt.nextResult != "" {
				counted[tt.nextResult]++
			}
			if got := compactions(t, reg); !maps.Equal(got, counted) {
				t.Errorf("after the next run, compactions counted %v, want %v", got, counted)
			}
		})
	}
}

// compactions is turnpike_worker_compactions_total by result, leaving out
// the results never counted.
func compactions(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "turnpike_worker_compactions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && m.GetCounter().GetValue() > 0 {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// summarizerTokens is turnpike_worker_model_tokens_total of the summarizer
// model for kind (prompt or completion).
func summarizerTokens(t *testing.T, reg *prometheus.Registry, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "turnpike_worker_model_tokens_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["model"] == "summarizer" && labels["kind"] == kind {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// checkCompactionLog checks what compaction logged: when the summarizer
// failed, one warning naming the conversation's whole identity and the
// error; otherwise nothing.
func checkCompactionLog(t *testing.T, logs string, id events.Identity, failed bool) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	if !failed {
		if logs != "" {
			t.Errorf("compaction logged %s, want nothing", logs)
		}
		return
	}
	var rec map[string]any
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &rec) != nil {
		t.Fatalf("compaction logged %q, want one JSON line", logs)
	}
	if rec["level"] != "WARN" || rec["msg"] != "compaction: summarizer failed; the window is kept as it is" ||
		rec["tenant"] != id.Tenant || rec["user"] != id.User || rec["conversation"] != id.Conversation || rec["error"] != "summarizer unreachable" {
		t.Errorf("compaction logged %v, want a warning of the summarizer's failure naming the conversation", rec)
	}
}

// Compaction over turns of several parts (one assistant message per
// agent's stretch): the summary ends at a turn's last message, whatever
// its seq, and the window after it starts at the next user message.
func TestCompactionOfTurnsOfSeveralPartsEndsTheSummaryAtATurnsLastMessage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "team"}
	turns := [][]string{{"desk", "orders"}, {"desk"}, {"desk", "orders", "desk"}} // seqs 1-3, 4-5, 6-9
	for i, agents := range turns {
		tr := history.Turn{RequestID: fmt.Sprintf("r%d", i+1), User: fmt.Sprintf("q%d", i+1), Status: events.StatusComplete}
		for j, a := range agents {
			tr.Parts = append(tr.Parts, history.Part{Agent: a, Text: fmt.Sprintf("%s%d.%d", a, i+1, j+1)})
		}
		if _, err := store.Commit(ctx, id, tr); err != nil {
			t.Fatal(err)
		}
	}
	summarizer := &summarizerFake{}
	echoModel, err := echo.New(echo.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := newConsumer(Config{Brokers: []string{"unused:9092"}, CompactTokens: 1, CompactKeep: 4},
		deps{Store: store, Model: echoModel, Summarizer: summarizer, Registerer: prometheus.NewRegistry(),
			Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	window := func() []history.Message {
		w, err := store.Window(ctx, id, 20)
		if err != nil {
			t.Fatal(err)
		}
		return append(w, history.Message{Role: history.RoleUser, Content: "new", RequestID: "r-new"})
	}
	want := "system:" + summaryPrefix + "summary 1 | user:q3 | assistant:desk3.1 | assistant:orders3.2 | assistant:desk3.3 | user:new"
	for run := 1; run <= 2; run++ {
		in, err := c.step.compactWindow(ctx, store, id, window())
		if err != nil {
			t.Fatalf("run %d: compactWindow: %v", run, err)
		}
		if got := modelInput(in); got != want {
			t.Errorf("run %d: model input\n got %q\nwant %q", run, got, want)
		}
	}
	if len(summarizer.asked) != 1 || summarizer.asked[0] != "Conversation:\nuser: q1\nassistant: desk1.1\nassistant: orders1.2\nuser: q2\nassistant: desk2.1\n" {
		t.Errorf("the summarizer was asked %q, want turns 1 and 2 once", summarizer.asked)
	}
	if sum, found, err := store.Summary(ctx, id); err != nil || !found || sum.Through != 5 {
		t.Errorf("summary %+v, %v, %v; want through 5, the last message of turn 2", sum, found, err)
	}
}

// The window's token estimate (README "Context compaction", Config.
// CompactTokens): bytes/4 per message, rounded up, plus 4.
func TestCompactionWindowEstimatesAQuarterTokenPerBytePlusFourPerMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		text string
		want int
	}{
		{"An empty message costs its 4 tokens of framing.", "", 4},
		{"One byte costs a whole token.", "a", 5},
		{"Four bytes cost one token.", "abcd", 5},
		{"Five bytes cost two tokens.", "abcde", 6},
		{"Eight bytes cost two tokens.", "abcdefgh", 6},
		{"A thousand bytes cost 250 tokens.", strings.Repeat("x", 1000), 254},
	}
	for _, tt := range tests {
		if got := estimateTokens(tt.text); got != tt.want {
			t.Errorf("%s estimateTokens(%d bytes) = %d, want %d", tt.name, len(tt.text), got, tt.want)
		}
	}
}

// A summary is cut to history.MaxSummaryBytes, at a rune boundary, so that
// the store accepts it; one within the bound is kept whole.
func TestCompactionWindowSummaryIsCutToTheStoresBound(t *testing.T) {
	t.Parallel()
	const max = history.MaxSummaryBytes
	tests := []struct {
		name string
		text string
		want string
	}{
		{"A summary of exactly the bound is kept whole.", strings.Repeat("a", max), strings.Repeat("a", max)},
		{"A summary one byte over the bound loses that byte.", strings.Repeat("a", max+1), strings.Repeat("a", max)},
		{"A summary whose last rune straddles the bound loses the whole rune.", strings.Repeat("a", max-1) + "é", strings.Repeat("a", max-1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			echoModel, err := echo.New(echo.Config{})
			if err != nil {
				t.Fatal(err)
			}
			c, err := newConsumer(Config{Brokers: []string{"unused:9092"}, CompactTokens: 1, CompactKeep: 2},
				deps{Store: history.NewMemoryStore(), Model: echoModel, Summarizer: &summarizerFake{text: tt.text},
					Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.step.summarize(ctx, history.Summary{}, false, compactionWindow(2)[:2])
			if err != nil {
				t.Fatalf("summarize: %v", err)
			}
			if len(got) != len(tt.want) || got != tt.want {
				t.Fatalf("summary of %d bytes, want %d", len(got), len(tt.want))
			}
		})
	}
}
