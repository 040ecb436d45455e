package historytest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// commitAt commits turn i of conversation id, committed at at.
func commitAt(t *testing.T, ctx context.Context, s history.Store, id events.Identity, i int, at time.Time) {
	t.Helper()
	tr := turn(i)
	tr.UserAt, tr.CommittedAt = at.Add(-time.Second), at
	commit(t, ctx, s, id, tr)
}

func conversations(t *testing.T, ctx context.Context, s history.Store, tenant, user string, before history.ConversationCursor, limit int) history.ConversationPage {
	t.Helper()
	p, err := s.Conversations(ctx, tenant, user, before, limit)
	if err != nil {
		t.Fatalf("Conversations(%s/%s, %+v, %d): %v", tenant, user, before, limit, err)
	}
	if p.Conversations == nil {
		t.Fatalf("Conversations(%s/%s) returned a nil slice", tenant, user)
	}
	return p
}

// names is "name:messages@unix ms" of each conversation.
func names(cs []history.Conversation) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s:%d@%d", c.Conversation, c.Messages, c.UpdatedAt.UnixMilli())
	}
	return strings.Join(parts, " ")
}

func testConversationsList(t *testing.T, ctx context.Context, s history.Store) {
	alice := newIdentity(t, "x")
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }

	// c-old has 2 turns; c-new 1; c-mid 3, its newest turn committed
	// between the others'.
	for i, c := range []struct {
		conv string
		at   int
	}{{"c-old", 1}, {"c-mid", 2}, {"c-old", 3}, {"c-mid", 4}, {"c-new", 6}, {"c-mid", 5}} {
		id := alice
		id.Conversation = c.conv
		commitAt(t, ctx, s, id, i+1, at(c.at))
	}
	// Same names under another user and another tenant, and an outcome
	// without a turn for Alice: none of them is hers to list.
	bob, other := alice, alice
	bob.User, other.Tenant = "bob", alice.Tenant+"-2"
	for _, id := range []events.Identity{bob, other} {
		id.Conversation = "c-new"
		commitAt(t, ctx, s, id, 1, at(9))
	}
	outcome := alice
	outcome.Conversation = "c-outcome-only"
	if _, err := s.RecordOutcome(ctx, outcome, "r1", events.StatusRejected); err != nil {
		t.Fatalf("RecordOutcome: %v", err)
	}

	p := conversations(t, ctx, s, alice.Tenant, alice.User, history.ConversationCursor{}, 50)
	want := fmt.Sprintf("c-new:2@%d c-mid:6@%d c-old:4@%d", at(6).UnixMilli(), at(5).UnixMilli(), at(3).UnixMilli())
	if got := names(p.Conversations); got != want {
		t.Errorf("Conversations = %s\nwant %s", got, want)
	}
	if !p.Next.IsZero() {
		t.Errorf("Next = %+v, want zero: there is no further page", p.Next)
	}
	for _, c := range p.Conversations {
		if c.UpdatedAt.Location() != time.UTC {
			t.Errorf("%s: updated_at %v, want UTC", c.Conversation, c.UpdatedAt)
		}
	}
	if got := names(conversations(t, ctx, s, bob.Tenant, bob.User, history.ConversationCursor{}, 50).Conversations); got != fmt.Sprintf("c-new:2@%d", at(9).UnixMilli()) {
		t.Errorf("Bob's conversations = %s, want only his own", got)
	}
}

func testConversationsPaging(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "x")
	// Ten conversations over four milliseconds: ties of 3, 1, 4 and 2.
	groups := [][]string{{"b", "c", "a"}, {"d"}, {"g", "e", "h", "f"}, {"i", "j"}}
	var want []string
	n := 0
	for g, convs := range groups {
		at := base.Add(time.Duration(g) * time.Millisecond)
		for _, c := range convs {
			n++
			id.Conversation = "conv-" + c
			commitAt(t, ctx, s, id, n, at)
		}
	}
	// Newest first; within a millisecond, names descending.
	for _, c := range []string{"j", "i", "h", "g", "f", "e", "d", "c", "b", "a"} {
		want = append(want, "conv-"+c)
	}

	for _, limit := range []int{1, 2, 3, 4, 7, 10, 11} {
		var got []string
		var cursor history.ConversationCursor
		pages := 0
		for {
			p := conversations(t, ctx, s, id.Tenant, id.User, cursor, limit)
			pages++
			if len(p.Conversations) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(p.Conversations))
			}
			for _, c := range p.Conversations {
				got = append(got, c.Conversation)
			}
			if p.Next.IsZero() {
				break
			}
			if last := p.Conversations[len(p.Conversations)-1]; p.Next.Conversation != last.Conversation || !p.Next.UpdatedAt.Equal(last.UpdatedAt) {
				t.Fatalf("limit %d: Next %+v is not the page's last conversation %+v", limit, p.Next, last)
			}
			if pages > len(want)+1 {
				t.Fatalf("limit %d: paging does not end; so far %v", limit, got)
			}
			cursor = p.Next
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("limit %d: paged %v\nwant %v", limit, got, want)
		}
		if wantPages := max(1, (len(want)+limit-1)/limit); pages != wantPages {
			t.Errorf("limit %d: %d pages, want %d (no trailing empty page)", limit, pages, wantPages)
		}
	}

	// A cursor needs no conversation behind it: a time and a name between
	// two of them start the page right after that position.
	p := conversations(t, ctx, s, id.Tenant, id.User, history.ConversationCursor{UpdatedAt: base.Add(2 * time.Millisecond), Conversation: "conv-f0"}, 3)
	if got := names(p.Conversations); !strings.HasPrefix(got, "conv-f:") || len(p.Conversations) != 3 || p.Conversations[2].Conversation != "conv-d" {
		t.Errorf("page after (2 ms, conv-f0) = %s, want conv-f, conv-e, conv-d", got)
	}
}

func testConversationsReorder(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "x")
	for i, c := range []string{"first", "second", "third"} {
		id.Conversation = c
		commitAt(t, ctx, s, id, i+1, base.Add(time.Duration(i)*time.Second))
	}
	id.Conversation = "first"
	commitAt(t, ctx, s, id, 9, base.Add(time.Minute))
	p := conversations(t, ctx, s, id.Tenant, id.User, history.ConversationCursor{}, 2)
	want := fmt.Sprintf("first:4@%d third:2@%d", base.Add(time.Minute).UnixMilli(), base.Add(2*time.Second).UnixMilli())
	if got := names(p.Conversations); got != want {
		t.Errorf("Conversations = %s, want %s", got, want)
	}
	if p.Next.Conversation != "third" {
		t.Errorf("Next = %+v, want the position of third", p.Next)
	}
}

func testConversationsEmpty(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "x")
	for _, before := range []history.ConversationCursor{{}, {UpdatedAt: base, Conversation: "c1"}} {
		p := conversations(t, ctx, s, id.Tenant, id.User, before, 10)
		if len(p.Conversations) != 0 || !p.Next.IsZero() {
			t.Errorf("Conversations(before %+v) = %+v, want an empty last page", before, p)
		}
	}
}

func testConversationsInvalid(t *testing.T, ctx context.Context, s history.Store) {
	tests := []struct {
		name         string
		tenant, user string
		before       history.ConversationCursor
	}{
		{"an empty tenant", "", "alice", history.ConversationCursor{}},
		{"a user breaking the ID rule", "acme", "al/ice", history.ConversationCursor{}},
		{"a cursor without a time", "acme", "alice", history.ConversationCursor{Conversation: "c1"}},
		{"a cursor without a conversation", "acme", "alice", history.ConversationCursor{UpdatedAt: base}},
		{"a cursor breaking the ID rule", "acme", "alice", history.ConversationCursor{UpdatedAt: base, Conversation: "c 1"}},
	}
	for _, tt := range tests {
		if _, err := s.Conversations(ctx, tt.tenant, tt.user, tt.before, 10); !errors.Is(err, events.ErrInvalid) {
			t.Errorf("%s: error %v, want ErrInvalid", tt.name, err)
		}
	}
}

// pageAll pages through a user's listing limit at a time and returns
// names of everything it visited, in order, failing when paging does not
// end.
func pageAll(t *testing.T, ctx context.Context, s history.Store, tenant, user string, before history.ConversationCursor, limit int) string {
	t.Helper()
	var got []history.Conversation
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatalf("limit %d: paging does not end; so far %s", limit, names(got))
		}
		p := conversations(t, ctx, s, tenant, user, before, limit)
		if len(p.Conversations) > limit {
			t.Fatalf("limit %d: page of %d", limit, len(p.Conversations))
		}
		got = append(got, p.Conversations...)
		if p.Next.IsZero() {
			return names(got)
		}
		before = p.Next
	}
}

// testConversationsOlderCommitAfterNewer commits turns so that the
// conversation document of a conversation is rolled forward by an older
// turn after a newer one: a retried commit of turn 1 after turn 2 (a
// duplicate, which rolls forward again), and a second turn stamped
// earlier than the first (two workers' clocks). Its listing time and
// message count never go back. The conversations are also created in the
// reverse of their listing order, so a listing sorted or cut by anything
// but the newest commit time shows at some page size.
func testConversationsOlderCommitAfterNewer(t *testing.T, ctx context.Context, s history.Store) {
	owner := newIdentity(t, "x")
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }
	conv := func(name string) events.Identity {
		id := owner
		id.Conversation = name
		return id
	}
	// a: created first (1), its second turn the newest of all (20).
	commitAt(t, ctx, s, conv("a"), 1, at(1))
	a2 := turn(2)
	a2.UserAt, a2.CommittedAt = at(19), at(20)
	commit(t, ctx, s, conv("a"), a2)
	// b: one turn (3).
	commitAt(t, ctx, s, conv("b"), 3, at(3))
	// c: its first turn at 10, its second stamped earlier, at 2.
	commitAt(t, ctx, s, conv("c"), 4, at(10))
	commitAt(t, ctx, s, conv("c"), 5, at(2))
	// d: one turn (5).
	commitAt(t, ctx, s, conv("d"), 6, at(5))

	// a's first turn committed again: a duplicate, rolled forward to turn
	// 1 at 1 after turn 2 at 20.
	a1 := turn(1)
	a1.UserAt, a1.CommittedAt = at(1).Add(-time.Second), at(1)
	if c := commit(t, ctx, s, conv("a"), a1); c.N != 1 || !c.Duplicate {
		t.Fatalf("Commit of a's turn 1 again = %+v, want a duplicate of turn 1", c)
	}

	want := fmt.Sprintf("a:4@%d c:4@%d d:2@%d b:2@%d", at(20).UnixMilli(), at(10).UnixMilli(), at(5).UnixMilli(), at(3).UnixMilli())
	for _, limit := range []int{1, 2, 3, 4, 5} {
		if got := pageAll(t, ctx, s, owner.Tenant, owner.User, history.ConversationCursor{}, limit); got != want {
			t.Errorf("limit %d: listed %s\nwant %s", limit, got, want)
		}
	}
	// A cursor at c's position: the rest, by their newest commits.
	if got, want := pageAll(t, ctx, s, owner.Tenant, owner.User, history.ConversationCursor{UpdatedAt: at(10), Conversation: "c"}, 1),
		fmt.Sprintf("d:2@%d b:2@%d", at(5).UnixMilli(), at(3).UnixMilli()); got != want {
		t.Errorf("after c: listed %s\nwant %s", got, want)
	}
}

// testConversationsIdentityTies lists one user's conversations where
// another user of the same tenant, and the same user name under another
// tenant, have conversations of the same millisecond as hers, with names
// in between, and of a millisecond between two of hers: no page, cursor
// or tie-break may reach theirs. Every time is explicit, so what is
// compared never depends on when the test runs.
func testConversationsIdentityTies(t *testing.T, ctx context.Context, s history.Store) {
	alice := newIdentity(t, "x")
	bob, other := alice, alice
	bob.User, other.Tenant = "bob", alice.Tenant+"-2"
	// tie: everyone's; between: only the others'; older: everyone's.
	tie, between, older := base.Add(5*time.Millisecond), base.Add(4*time.Millisecond), base.Add(3*time.Millisecond)
	n := 0
	for _, c := range []struct {
		owner events.Identity
		conv  string
		at    time.Time
	}{
		{bob, "c7", tie}, {alice, "c6", tie}, {other, "c5", tie}, {bob, "c5", tie}, {alice, "c4", tie},
		{other, "c3", tie}, {bob, "c3", tie}, {alice, "c2", tie}, {other, "c1", tie},
		{bob, "c9", between}, {other, "c8", between}, {bob, "c0", between},
		{bob, "c8", older}, {alice, "c1", older}, {other, "c0", older}, {alice, "c0", older},
	} {
		id := c.owner
		id.Conversation = c.conv
		n++
		commitAt(t, ctx, s, id, n, c.at)
	}
	list := func(convs ...string) string {
		var parts []string
		for _, c := range convs {
			name, at, _ := strings.Cut(c, "@")
			ms := map[string]time.Time{"tie": tie, "between": between, "older": older}[at].UnixMilli()
			parts = append(parts, fmt.Sprintf("%s:2@%d", name, ms))
		}
		return strings.Join(parts, " ")
	}
	wants := []struct {
		owner events.Identity
		want  string
	}{
		{alice, list("c6@tie", "c4@tie", "c2@tie", "c1@older", "c0@older")},
		{bob, list("c7@tie", "c5@tie", "c3@tie", "c9@between", "c0@between", "c8@older")},
		{other, list("c5@tie", "c3@tie", "c1@tie", "c8@between", "c0@older")},
	}
	// Every page size for Alice; for the others, one at a time and all at
	// once (on FerretDB each query scans every conversation of the
	// database).
	for i, w := range wants {
		limits := []int{1, 2, 3, 4, 7}
		if i > 0 {
			limits = []int{1, 7}
		}
		for _, limit := range limits {
			if got := pageAll(t, ctx, s, w.owner.Tenant, w.owner.User, history.ConversationCursor{}, limit); got != w.want {
				t.Errorf("%s/%s, limit %d: listed %s\nwant %s", w.owner.Tenant, w.owner.User, limit, got, w.want)
			}
		}
	}
	// Cursors inside the ties at names of the others' conversations, and
	// in the millisecond only the others have.
	for _, tc := range []struct {
		cursor history.ConversationCursor
		limit  int
		want   string
	}{
		{history.ConversationCursor{UpdatedAt: tie, Conversation: "c7"}, 1, list("c6@tie", "c4@tie", "c2@tie", "c1@older", "c0@older")},
		{history.ConversationCursor{UpdatedAt: tie, Conversation: "c5"}, 2, list("c4@tie", "c2@tie", "c1@older", "c0@older")},
		{history.ConversationCursor{UpdatedAt: tie, Conversation: "c3"}, 1, list("c2@tie", "c1@older", "c0@older")},
		{history.ConversationCursor{UpdatedAt: tie, Conversation: "c2"}, 1, list("c1@older", "c0@older")},
		{history.ConversationCursor{UpdatedAt: tie, Conversation: "c2"}, 3, list("c1@older", "c0@older")},
		{history.ConversationCursor{UpdatedAt: between, Conversation: "c9"}, 1, list("c1@older", "c0@older")},
		{history.ConversationCursor{UpdatedAt: older, Conversation: "c8"}, 1, list("c1@older", "c0@older")},
		{history.ConversationCursor{UpdatedAt: older, Conversation: "c1"}, 2, list("c0@older")},
		{history.ConversationCursor{UpdatedAt: older, Conversation: "c0"}, 1, ""},
	} {
		if got := pageAll(t, ctx, s, alice.Tenant, alice.User, tc.cursor, tc.limit); got != tc.want {
			t.Errorf("Alice after %s@%d, limit %d: listed %s\nwant %s", tc.cursor.Conversation, tc.cursor.UpdatedAt.UnixMilli(), tc.limit, got, tc.want)
		}
	}
}

// testConversationsLimitClamp lists 201 conversations with limits outside
// 1..MaxListLimit: a larger one returns MaxListLimit, a smaller one (zero
// or negative) one conversation, each page with the cursor of its last.
func testConversationsLimitClamp(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "x")
	const n = history.MaxListLimit + 1
	for i := range n {
		id.Conversation = fmt.Sprintf("c%03d", i)
		commitAt(t, ctx, s, id, 1, base.Add(time.Duration(i)*time.Millisecond))
	}
	p := conversations(t, ctx, s, id.Tenant, id.User, history.ConversationCursor{}, 1000)
	if len(p.Conversations) != history.MaxListLimit || p.Conversations[0].Conversation != "c200" || p.Next.Conversation != "c001" {
		t.Fatalf("limit 1000: %d conversations from %+v, next %+v; want %d, c200 to c001", len(p.Conversations), p.Conversations[0], p.Next, history.MaxListLimit)
	}
	if rest := conversations(t, ctx, s, id.Tenant, id.User, p.Next, 1000); names(rest.Conversations) != fmt.Sprintf("c000:2@%d", base.UnixMilli()) || !rest.Next.IsZero() {
		t.Errorf("after c001: %s, next %+v; want c000 alone, the last page", names(rest.Conversations), rest.Next)
	}
	for _, limit := range []int{0, -1} {
		p := conversations(t, ctx, s, id.Tenant, id.User, history.ConversationCursor{}, limit)
		if len(p.Conversations) != 1 || p.Conversations[0].Conversation != "c200" || p.Next.Conversation != "c200" {
			t.Errorf("limit %d: %s, next %+v; want c200 alone, then more", limit, names(p.Conversations), p.Next)
		}
	}
}
