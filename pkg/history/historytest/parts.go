package historytest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// Answers of several agents: one assistant message per part.

// multi is turn i whose answer has one part per agent named in agents (in
// order), each saying "<agent> <j> of r<i>".
func multi(i int, agents ...string) history.Turn {
	tr := turn(i)
	tr.Answer, tr.Agent = "", ""
	for j, a := range agents {
		tr.Parts = append(tr.Parts, history.Part{Agent: a, Text: fmt.Sprintf("%s %d of r%d", a, j+1, i)})
	}
	return tr
}

// expected returns the messages turns make, committed in order as turns
// 1, 2, 3 … of a new conversation: seqs 1, 2, 3 … with no gap.
func expected(turns []history.Turn) []history.Message {
	var out []history.Message
	seq := int64(1)
	for _, tr := range turns {
		parts := tr.Parts
		if len(parts) == 0 {
			parts = []history.Part{{Agent: tr.Agent, Text: tr.Answer}}
		}
		out = append(out, history.Message{Seq: seq, Role: history.RoleUser, Content: tr.User, RequestID: tr.RequestID, CreatedAt: tr.UserAt})
		seq++
		for j, p := range parts {
			m := history.Message{Seq: seq, Role: history.RoleAssistant, Content: p.Text, RequestID: tr.RequestID,
				Agent: p.Agent, CreatedAt: tr.CommittedAt, Status: tr.Status}
			if j == len(parts)-1 {
				m.Usage, m.Interrupt = tr.Usage, tr.Interrupt
			}
			out = append(out, m)
			seq++
		}
	}
	return out
}

// mixedTurns is a conversation of one-part and several-part turns: 22
// messages.
func mixedTurns() []history.Turn {
	return []history.Turn{
		turn(1),
		multi(2, "desk", "orders"),
		multi(3, "desk", "orders", "desk"),
		turn(4),
		multi(5, "a", "b", "c", "d", "e"),
		turn(6),
		multi(7, "orders", "desk"),
	}
}

func commitAll(t *testing.T, ctx context.Context, s history.Store, id events.Identity, turns []history.Turn) {
	t.Helper()
	for i, tr := range turns {
		if c := commit(t, ctx, s, id, tr); c.N != int64(i+1) || c.Duplicate {
			t.Fatalf("Commit(%s) = %+v, want turn %d", tr.RequestID, c, i+1)
		}
	}
}

// pageAllMessages pages the whole conversation newest to oldest with
// limit, checking NextBefore, and returns the messages oldest first.
func pageAllMessages(t *testing.T, ctx context.Context, s history.Store, id events.Identity, limit int) []history.Message {
	t.Helper()
	var pages [][]history.Message
	before := int64(0)
	for range 1000 {
		p := list(t, ctx, s, id, before, limit)
		if len(p.Messages) > limit {
			t.Fatalf("List(before %d, limit %d) returned %d messages", before, limit, len(p.Messages))
		}
		pages = append(pages, p.Messages)
		if p.NextBefore == 0 {
			break
		}
		if len(p.Messages) == 0 || p.NextBefore != p.Messages[0].Seq {
			t.Fatalf("List(before %d, limit %d) = %s: NextBefore %d, want the lowest seq of the page", before, limit, summary(p.Messages), p.NextBefore)
		}
		before = p.NextBefore
	}
	var all []history.Message
	for i := len(pages) - 1; i >= 0; i-- {
		all = append(all, pages[i]...)
	}
	return all
}

func testPartsMessages(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "parts")
	turns := mixedTurns()
	turns[2].Usage = &events.Usage{PromptTokens: 30, CompletionTokens: 11, TotalTokens: 41}
	commitAll(t, ctx, s, id, turns)
	want := expected(turns)
	if len(want) != 22 {
		t.Fatalf("fixture: %d messages, want 22", len(want))
	}
	got := list(t, ctx, s, id, 0, 200)
	if err := equalMessages(got.Messages, want); err != nil {
		t.Fatalf("List: %v", err)
	}
	// Turn 3 (desk, orders, desk) is seqs 6 … 9: three assistant messages,
	// each its agent's, the usage on the last only.
	for i, w := range []struct {
		agent, content string
		usage          bool
	}{{"desk", "desk 1 of r3", false}, {"orders", "orders 2 of r3", false}, {"desk", "desk 3 of r3", true}} {
		m := got.Messages[6+i]
		if m.Seq != int64(7+i) || m.Agent != w.agent || m.Content != w.content || (m.Usage != nil) != w.usage || m.Status != events.StatusComplete {
			t.Errorf("message %d = %+v, want agent %s, content %q, usage %v", 7+i, m, w.agent, w.content, w.usage)
		}
	}
	for n := 0; n <= 24; n++ {
		lo := max(0, len(want)-n)
		if err := equalMessages(window(t, ctx, s, id, n), want[lo:]); err != nil {
			t.Errorf("Window(%d): %v", n, err)
		}
	}
	// Every before, with limits that cut turns of each size anywhere (the
	// suite runs under -race on FerretDB: a few hundred reads at most).
	limits := []int{1, 2, 3, 4, 6, 9, 22, 23}
	for before := int64(1); before <= 24; before++ {
		for _, limit := range limits {
			p := list(t, ctx, s, id, before, limit)
			hi := min(before-1, int64(len(want)))
			lo := max(1, hi-int64(limit)+1)
			if err := equalMessages(p.Messages, want[lo-1:hi]); err != nil {
				t.Fatalf("List(before %d, limit %d): %v", before, limit, err)
			}
			wantNext := lo
			if lo <= 1 || hi < 1 {
				wantNext = 0
			}
			if p.NextBefore != wantNext {
				t.Fatalf("List(before %d, limit %d).NextBefore = %d, want %d", before, limit, p.NextBefore, wantNext)
			}
		}
	}
	for _, limit := range limits {
		if err := equalMessages(pageAllMessages(t, ctx, s, id, limit), want); err != nil {
			t.Errorf("paging with limit %d: %v", limit, err)
		}
	}
	page := conversations(t, ctx, s, id.Tenant, id.User, history.ConversationCursor{}, 10)
	if len(page.Conversations) != 1 || page.Conversations[0].Messages != 22 {
		t.Errorf("Conversations = %+v, want one with 22 messages", page.Conversations)
	}
}

func testPartsInterrupted(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "parts-interrupted")
	tr := multi(1, "desk", "orders")
	tr.Status, tr.Interrupt = events.StatusInterrupted, interrupted(1).Interrupt
	tr.Usage = &events.Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5}
	commit(t, ctx, s, id, tr)
	got := list(t, ctx, s, id, 0, 10).Messages
	if err := equalMessages(got, expected([]history.Turn{tr})); err != nil {
		t.Fatalf("List: %v", err)
	}
	if got[1].Interrupt != nil || got[1].Usage != nil || got[2].Interrupt == nil || got[2].Usage == nil {
		t.Errorf("interrupt and usage are on %s, want on the last assistant message only", summary(got))
	}
	for _, m := range got[1:] {
		if m.Status != events.StatusInterrupted || !m.Incomplete() {
			t.Errorf("message %d: status %s, incomplete %v; want interrupted on every assistant message", m.Seq, m.Status, m.Incomplete())
		}
	}
	// What the worker resumes from: the last message, with the question.
	if last := window(t, ctx, s, id, 1); len(last) != 1 || last[0].Interrupt == nil || last[0].Agent != "orders" {
		t.Errorf("Window(1) = %+v, want the last part with the interrupt", last)
	}
}

func testPartsIdempotent(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "parts-again")
	first := multi(1, "desk", "orders", "desk")
	commit(t, ctx, s, id, first)
	again := multi(1, "other", "text")
	c, err := s.Commit(ctx, id, again)
	if err != nil || !c.Duplicate || c.N != 1 {
		t.Fatalf("Commit of r1 again = %+v, %v; want a duplicate of turn 1", c, err)
	}
	next := multi(2, "orders", "desk")
	if c := commit(t, ctx, s, id, next); c.N != 2 || c.Duplicate {
		t.Fatalf("Commit(r2) = %+v, want turn 2", c)
	}
	if err := equalMessages(list(t, ctx, s, id, 0, 50).Messages, expected([]history.Turn{first, next})); err != nil {
		t.Fatalf("List after a redelivered commit: %v", err)
	}
	// A redelivery that comes through Pending.Start is decided there.
	p := history.Begin(s, id, "r1", first.User, first.UserAt)
	if st, err := p.Start(ctx, 20); err != nil || !st.Decided || st.Committed.N != 1 {
		t.Fatalf("Start of a redelivered r1 = %+v, %v; want decided as turn 1", st, err)
	}
}

func testPartsFenced(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "parts-fenced")
	src := func(off int64) *history.Source {
		return &history.Source{Topic: "requests", Partition: 1, Offset: off, Time: base}
	}
	first := multi(1, "desk", "orders")
	first.Source = src(10)
	commit(t, ctx, s, id, first)
	zombie := multi(2, "desk", "orders", "desk")
	zombie.Source = src(9)
	if c, err := s.Commit(ctx, id, zombie); !errors.Is(err, history.ErrFenced) {
		t.Fatalf("Commit from an older record = %+v, %v; want ErrFenced", c, err)
	}
	if err := equalMessages(list(t, ctx, s, id, 0, 50).Messages, expected([]history.Turn{first})); err != nil {
		t.Fatalf("a fenced commit wrote something: %v", err)
	}
}

func testPartsConcurrent(t *testing.T, ctx context.Context, s history.Store) {
	const writers, each = 6, 3
	id := newIdentity(t, "parts-race")
	turnOf := func(i int) history.Turn { // 1 to 4 parts
		agents := []string{"desk", "orders", "desk", "orders"}[:1+i%4]
		return multi(i+1, agents...)
	}
	errs := make([]error, writers*each)
	runConcurrently(writers, func(w int) {
		for j := range each {
			i := w*each + j
			_, errs[i] = s.Commit(ctx, id, turnOf(i))
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent commits: %v", err)
	}
	msgs := list(t, ctx, s, id, 0, 200).Messages
	total := 0
	for i := range writers * each {
		total += 2 + i%4
	}
	if len(msgs) != total {
		t.Fatalf("List holds %d messages, want %d: %s", len(msgs), total, summary(msgs))
	}
	// Seqs 1 … total with no gap, each turn whole and in its own order.
	byRequest := map[string]int{}
	for i, m := range msgs {
		if m.Seq != int64(i+1) {
			t.Fatalf("message %d has seq %d: %s", i, m.Seq, summary(msgs))
		}
		if m.Role == history.RoleUser {
			if _, seen := byRequest[m.RequestID]; seen {
				t.Fatalf("request %s has two user messages", m.RequestID)
			}
			byRequest[m.RequestID] = 0
			continue
		}
		if i == 0 || msgs[i-1].RequestID != m.RequestID {
			t.Fatalf("message %d of %s does not follow its turn: %s", m.Seq, m.RequestID, summary(msgs))
		}
		byRequest[m.RequestID]++
		if want := fmt.Sprintf(" %d of %s", byRequest[m.RequestID], m.RequestID); !strings.HasSuffix(m.Content, want) {
			t.Fatalf("message %d = %q, want part%s", m.Seq, m.Content, want)
		}
	}
	if err := equalMessages(pageAllMessages(t, ctx, s, id, 5), msgs); err != nil {
		t.Errorf("paging by 5: %v", err)
	}
	page := conversations(t, ctx, s, id.Tenant, id.User, history.ConversationCursor{}, 10)
	if len(page.Conversations) != 1 || page.Conversations[0].Messages != int64(total) {
		t.Errorf("Conversations = %+v, want one with %d messages", page.Conversations, total)
	}
}

func testPartsInvalid(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "parts-invalid")
	tooMany := make([]string, history.MaxParts+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("a%d", i%2)
	}
	tests := []struct {
		name string
		turn history.Turn
	}{
		{"More than MaxParts parts are rejected.", multi(1, tooMany...)},
		{"A part without text is rejected.", func() history.Turn {
			tr := multi(1, "desk", "orders")
			tr.Parts[1].Text = ""
			return tr
		}()},
		{"Parts together with an answer are rejected.", func() history.Turn {
			tr := multi(1, "desk", "orders")
			tr.Answer = "joined"
			return tr
		}()},
	}
	for _, tc := range tests {
		if c, err := s.Commit(ctx, id, tc.turn); !errors.Is(err, events.ErrInvalid) {
			t.Errorf("%s Commit = %+v, %v; want ErrInvalid", tc.name, c, err)
		}
	}
	expectNotFound(t, ctx, s, id)
	if c := commit(t, ctx, s, id, multi(1, tooMany[:history.MaxParts]...)); c.N != 1 {
		t.Fatalf("Commit of MaxParts parts = %+v", c)
	}
	if got := len(window(t, ctx, s, id, 1000)); got != history.MaxParts+1 {
		t.Errorf("a turn of MaxParts parts holds %d messages, want %d", got, history.MaxParts+1)
	}
	// A summary ends at a turn's last message, whatever its parity.
	if err := s.SaveSummary(ctx, id, history.Summary{Through: history.MaxParts + 1, Text: "all of it"}); err != nil {
		t.Errorf("SaveSummary through the end of a turn of %d parts: %v", history.MaxParts, err)
	}
}

// joinedV1 is tr as a version 1 turn holds it (Turn.KeepV1): one
// assistant message, the parts' text joined, under the last part's agent.
func joinedV1(tr history.Turn) history.Turn {
	if len(tr.Parts) == 0 {
		return tr
	}
	var text strings.Builder
	for _, p := range tr.Parts {
		text.WriteString(p.Text)
	}
	tr.Answer, tr.Agent, tr.Parts = text.String(), tr.Parts[len(tr.Parts)-1].Agent, nil
	return tr
}

// commitThrough commits tr as the worker does (Pending.Start, then
// CommitAnswer), with KeepV1 as tr says.
func commitThrough(t *testing.T, ctx context.Context, s history.Store, id events.Identity, tr history.Turn) history.Committed {
	t.Helper()
	p := history.Begin(s, id, tr.RequestID, tr.User, tr.UserAt)
	p.SetKeepV1(tr.KeepV1)
	if st, err := p.Start(ctx, 20); err != nil || st.Decided || st.Cancelled {
		t.Fatalf("Start(%s) = %+v, %v", tr.RequestID, st, err)
	}
	c, err := p.CommitAnswer(ctx, history.Answer{Text: tr.Answer, Agent: tr.Agent, Parts: tr.Parts, Status: tr.Status, At: tr.CommittedAt, Usage: tr.Usage})
	if err != nil {
		t.Fatalf("CommitAnswer(%s): %v", tr.RequestID, err)
	}
	return c
}

func testKeepV1(t *testing.T, ctx context.Context, s history.Store) {
	keep := func(tr history.Turn) history.Turn { tr.KeepV1 = true; return tr }
	steps := []struct {
		name    string
		turn    history.Turn
		through bool // Pending.Start, then CommitAnswer (else Commit)
		v1      bool // stored as version 1: the parts joined
	}{
		{"The first turn of a new conversation, with KeepV1, is one message.", keep(multi(1, "desk", "orders", "desk")), false, true},
		{"A turn after a version 1 one, with KeepV1 and through Start, is one message.", keep(multi(2, "orders", "desk")), true, true},
		{"A turn of one part after a version 1 one, with KeepV1, is one message.", keep(turn(3)), false, true},
		{"A turn without KeepV1 keeps its parts (the upgrade's second phase).", multi(4, "desk", "orders"), false, false},
		{"A turn after a version 2 one keeps its parts despite KeepV1, through Start.", keep(multi(5, "orders", "desk", "orders")), true, false},
		{"A turn after a version 2 one keeps its parts despite KeepV1.", keep(multi(6, "desk", "orders")), false, false},
	}
	id := newIdentity(t, "keep-v1")
	var stored []history.Turn
	for i, st := range steps {
		commitOf := commit
		if st.through {
			commitOf = commitThrough
		}
		if c := commitOf(t, ctx, s, id, st.turn); c.N != int64(i+1) || c.Duplicate {
			t.Fatalf("%s Commit = %+v, want turn %d", st.name, c, i+1)
		}
		want := st.turn
		if st.v1 {
			want = joinedV1(want)
		}
		stored = append(stored, want)
		if err := equalMessages(list(t, ctx, s, id, 0, 200).Messages, expected(stored)); err != nil {
			t.Fatalf("%s List: %v", st.name, err)
		}
	}
	// The joined message is the last part's agent's: turn 1's is seq 2.
	if m := list(t, ctx, s, id, 3, 1).Messages; len(m) != 1 || m[0].Agent != "desk" || m[0].Content != "desk 1 of r1orders 2 of r1desk 3 of r1" {
		t.Errorf("message 2 = %s, want the three parts joined under desk", summary(m))
	}
	want := expected(stored)
	for _, limit := range []int{1, 2, 3, 5} {
		if err := equalMessages(pageAllMessages(t, ctx, s, id, limit), want); err != nil {
			t.Errorf("paging with limit %d: %v", limit, err)
		}
	}
	page := conversations(t, ctx, s, id.Tenant, id.User, history.ConversationCursor{}, 10)
	if len(page.Conversations) != 1 || page.Conversations[0].Messages != int64(len(want)) {
		t.Errorf("Conversations = %+v, want one with %d messages", page.Conversations, len(want))
	}
}

func testKeepV1AfterStaleStart(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "keep-v1-stale")
	// r2 starts on the empty conversation (where it would be version 1),
	// then r1 commits turn 1 in version 2 (one part: seqs 1, 2, as a
	// version 1 turn 1 would have).
	late := multi(2, "desk", "orders")
	p := history.Begin(s, id, late.RequestID, late.User, late.UserAt)
	p.SetKeepV1(true)
	if st, err := p.Start(ctx, 20); err != nil || st.Decided || len(st.Window) != 1 {
		t.Fatalf("Start(r2) = %+v, %v", st, err)
	}
	first := turn(1)
	commit(t, ctx, s, id, first)
	if c, err := p.CommitAnswer(ctx, history.Answer{Parts: late.Parts, Status: late.Status, At: late.CommittedAt}); err != nil || c.N != 2 {
		t.Fatalf("CommitAnswer(r2) = %+v, %v; want turn 2", c, err)
	}
	want := expected([]history.Turn{first, late})
	if err := equalMessages(list(t, ctx, s, id, 0, 50).Messages, want); err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, limit := range []int{1, 2, 3} {
		if err := equalMessages(pageAllMessages(t, ctx, s, id, limit), want); err != nil {
			t.Errorf("paging with limit %d: %v", limit, err)
		}
	}
}
