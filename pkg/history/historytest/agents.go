package historytest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// interrupted is turn i of a fixture conversation, interrupted by the
// ask_user tool before any text.
func interrupted(i int) history.Turn {
	tr := turn(i)
	tr.Answer, tr.Status = "", events.StatusInterrupted
	tr.Interrupt = &history.Interrupt{Agent: "assistant", Tool: "ask_user", Question: "Which city?",
		Targets: []string{"agent:assistant;node:ToolNode;tool:ask_user:call-1"}}
	return tr
}

func testUsageAndInterrupt(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	first := turn(1)
	first.Usage = &events.Usage{PromptTokens: 12, CompletionTokens: 5, TotalTokens: 17}
	commit(t, ctx, s, id, first)
	second := interrupted(2)
	second.Answer = "Let me ask you first."
	commit(t, ctx, s, id, second)
	third := interrupted(3)
	commit(t, ctx, s, id, third)

	// The store keeps its own copies: changing what was committed changes
	// nothing stored.
	first.Usage.TotalTokens = 999
	second.Interrupt.Targets[0] = "changed"

	want := fixtureMessages(1, 6)
	want[1].Usage = &events.Usage{PromptTokens: 12, CompletionTokens: 5, TotalTokens: 17}
	for _, m := range []*history.Message{&want[3], &want[5]} {
		m.Status = events.StatusInterrupted
		m.Interrupt = interrupted(1).Interrupt
	}
	want[3].Content, want[5].Content = "Let me ask you first.", ""
	got := window(t, ctx, s, id, 6)
	if err := equalMessages(got, want); err != nil {
		t.Fatalf("Window: %v", err)
	}
	if err := equalMessages(list(t, ctx, s, id, 0, 10).Messages, want); err != nil {
		t.Fatalf("List: %v", err)
	}
	if !got[5].Incomplete() {
		t.Errorf("an interrupted answer does not report Incomplete")
	}
	got[1].Usage.TotalTokens = 1
	if again := window(t, ctx, s, id, 6); again[1].Usage.TotalTokens != 17 {
		t.Errorf("changing a message read changed the store: usage %+v", again[1].Usage)
	}
	if c, found, err := s.Lookup(ctx, id, "r3"); err != nil || !found || c.Status != events.StatusInterrupted || c.N != 3 {
		t.Errorf("Lookup(r3) = %+v, %v, %v; want turn 3, interrupted", c, found, err)
	}
}

func testInterruptRules(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	tests := []struct {
		name string
		mod  func(*history.Turn)
	}{
		{"Status interrupted without an interrupt is rejected.", func(tr *history.Turn) { tr.Interrupt = nil }},
		{"An interrupt with status complete is rejected.", func(tr *history.Turn) { tr.Status = events.StatusComplete; tr.Answer = "a" }},
		{"An interrupt without targets is rejected.", func(tr *history.Turn) { tr.Interrupt.Targets = nil }},
		{"An interrupt with an empty target is rejected.", func(tr *history.Turn) { tr.Interrupt.Targets = []string{""} }},
		{"An interrupt question over the limit is rejected.", func(tr *history.Turn) {
			tr.Interrupt.Question = strings.Repeat("q", events.MaxQuestionBytes+1)
		}},
		{"Negative token usage is rejected.", func(tr *history.Turn) { tr.Usage = &events.Usage{PromptTokens: -1} }},
	}
	for _, tc := range tests {
		tr := interrupted(1)
		tc.mod(&tr)
		if _, err := s.Commit(ctx, id, tr); !errors.Is(err, events.ErrInvalid) {
			t.Errorf("%s Commit error = %v, want ErrInvalid", tc.name, err)
		}
	}
	expectNotFound(t, ctx, s, id)
	// A pending request commits an interrupted answer without text, and
	// still refuses an empty answer that is not interrupted.
	p := history.Begin(s, id, "r1", "question 1", base)
	if _, err := p.CommitAnswer(ctx, history.Answer{Agent: "assistant", Status: events.StatusComplete}); !errors.Is(err, history.ErrEmptyAnswer) {
		t.Errorf("CommitAnswer without text or interrupt: %v, want ErrEmptyAnswer", err)
	}
	in := interrupted(1)
	c, err := p.CommitAnswer(ctx, history.Answer{Agent: "assistant", Status: events.StatusInterrupted, At: base, Interrupt: in.Interrupt,
		Usage: &events.Usage{PromptTokens: 3, CompletionTokens: 0, TotalTokens: 3}})
	if err != nil || c.N != 1 || c.Status != events.StatusInterrupted {
		t.Fatalf("CommitAnswer(interrupted) = %+v, %v", c, err)
	}
	msgs := window(t, ctx, s, id, 2)
	if len(msgs) != 2 || msgs[1].Interrupt == nil || msgs[1].Interrupt.Question != "Which city?" || msgs[1].Usage == nil || msgs[1].Usage.TotalTokens != 3 {
		t.Fatalf("window after CommitAnswer: %+v", msgs)
	}
}

func testSummaries(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	other := newIdentity(t, "c1")
	if _, found, err := s.Summary(ctx, id); found || err != nil {
		t.Fatalf("Summary of a new conversation = %v, %v; want none", found, err)
	}
	at := base.Add(time.Hour)
	save := func(through int64, text string) {
		t.Helper()
		if err := s.SaveSummary(ctx, id, history.Summary{Through: through, Text: text, CreatedAt: at}); err != nil {
			t.Fatalf("SaveSummary(%d): %v", through, err)
		}
	}
	expect := func(through int64, text string) {
		t.Helper()
		got, found, err := s.Summary(ctx, id)
		if err != nil || !found || got.Through != through || got.Text != text || !got.CreatedAt.Equal(at) || got.CreatedAt.Location() != time.UTC {
			t.Fatalf("Summary = %+v, %v, %v; want through %d %q at %v UTC", got, found, err, through, text, at)
		}
	}
	save(4, "turns one and two")
	expect(4, "turns one and two")
	save(2, "an older summary")
	expect(4, "turns one and two")
	save(4, "the same span again")
	expect(4, "turns one and two")
	save(8, "turns one to four")
	expect(8, "turns one to four")
	if _, found, err := s.Summary(ctx, other); found || err != nil {
		t.Errorf("another identity's summary = %v, %v; want none", found, err)
	}
	for _, bad := range []history.Summary{{Through: 1, Text: "a user message"}, {Through: 0, Text: "zero"}, {Through: 10, Text: ""},
		{Through: 10, Text: strings.Repeat("s", history.MaxSummaryBytes+1)}} {
		if err := s.SaveSummary(ctx, id, bad); !errors.Is(err, events.ErrInvalid) {
			t.Errorf("SaveSummary(through %d, %d bytes) = %v, want ErrInvalid", bad.Through, len(bad.Text), err)
		}
	}
	expect(8, "turns one to four")
	if _, _, err := s.Summary(ctx, events.Identity{Tenant: "t", User: "u", Conversation: "a/b"}); !errors.Is(err, events.ErrInvalid) {
		t.Errorf("Summary of an invalid identity: %v, want ErrInvalid", err)
	}
	// Summaries never touch the messages.
	expectNotFound(t, ctx, s, id)
}

func testCheckpoints(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	other := newIdentity(t, "c1")
	load := func(id events.Identity, name string) ([]byte, bool) {
		t.Helper()
		b, found, err := s.LoadCheckpoint(ctx, id, name)
		if err != nil {
			t.Fatalf("LoadCheckpoint(%s): %v", name, err)
		}
		return b, found
	}
	if _, found := load(id, "r1"); found {
		t.Fatal("a checkpoint found before any was saved")
	}
	first := []byte{0, 1, 2, 0xff, 'g', 'o', 'b'}
	if err := s.SaveCheckpoint(ctx, id, "r1", first); err != nil {
		t.Fatal(err)
	}
	first[0] = 9 // the store keeps its own copy
	if b, found := load(id, "r1"); !found || !bytes.Equal(b, []byte{0, 1, 2, 0xff, 'g', 'o', 'b'}) {
		t.Fatalf("LoadCheckpoint = %v, %v", b, found)
	}
	for range 2 { // a second write of the same name replaces it, however often
		if err := s.SaveCheckpoint(ctx, id, "r1", []byte("second")); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := load(id, "r1"); string(b) != "second" {
		t.Fatalf("after a rewrite: %q", b)
	}
	if err := s.SaveCheckpoint(ctx, id, "r2", []byte{}); err != nil {
		t.Fatal(err)
	}
	if b, found := load(id, "r2"); !found || len(b) != 0 {
		t.Errorf("empty checkpoint = %v, %v", b, found)
	}
	if _, found := load(other, "r1"); found {
		t.Error("a checkpoint is visible to another identity")
	}
	if err := s.SaveCheckpoint(ctx, id, "a#b", nil); !errors.Is(err, events.ErrInvalid) {
		t.Errorf("SaveCheckpoint with a bad name: %v, want ErrInvalid", err)
	}
	if err := s.SaveCheckpoint(ctx, id, "big", make([]byte, history.MaxCheckpointBytes+1)); !errors.Is(err, events.ErrInvalid) {
		t.Errorf("SaveCheckpoint over the limit: %v, want ErrInvalid", err)
	}
}
