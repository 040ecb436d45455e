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
