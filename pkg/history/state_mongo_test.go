package history_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// TestMongoStoreReappliesUserStateTheCommitDidNotRollForward: a worker
// that crashed between the turn's insert and the roll-forward of its
// user and tenant keys left them only in the turn; the conversation's
// next Start applies them.
func TestMongoStoreReappliesUserStateTheCommitDidNotRollForward(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	db := testenv.MongoDB(t)
	s := newMongoStore(t, ctx, db)
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "c1"}
	tr := testTurn(1)
	tr.State = &history.StateChange{User: []history.StateOp{{Key: "lang", Value: []byte(`"fr"`)}},
		Tenant: []history.StateOp{{Key: "plan", Value: []byte(`"pro"`)}}}
	if _, err := s.Commit(ctx, id, tr); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	// The crash: the keys' documents were never written.
	if _, err := db.Collection("state").DeleteMany(ctx, bson.D{}); err != nil {
		t.Fatalf("delete state: %v", err)
	}
	if m, err := s.ScopeState(ctx, "acme", "alice"); err != nil || len(m) != 0 {
		t.Fatalf("ScopeState after the crash = %v, %v; want empty", m, err)
	}
	p := history.Begin(s, id, "r2", "q2", time.Now())
	if _, err := p.Start(ctx, 20); err != nil {
		t.Fatalf("Start: %v", err)
	}
	user, err := s.ScopeState(ctx, "acme", "alice")
	if err != nil || string(user["lang"]) != `"fr"` {
		t.Fatalf("user state after the next Start = %q, %v; want lang=\"fr\"", user, err)
	}
	tenant, err := s.ScopeState(ctx, "acme", "")
	if err != nil || string(tenant["plan"]) != `"pro"` {
		t.Fatalf("tenant state after the next Start = %q, %v; want plan=\"pro\"", tenant, err)
	}
}

// TestMongoStoreConversationStateLaysTheNewestTurnOverAMissedRollForward:
// a commit's user key whose roll-forward a crash lost is read from the
// conversation's newest turn, and a key a newer commit of another
// conversation wrote keeps that newer value.
func TestMongoStoreConversationStateLaysTheNewestTurnOverAMissedRollForward(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	db := testenv.MongoDB(t)
	s := newMongoStore(t, ctx, db)
	c1 := events.Identity{Tenant: "acme-overlay", User: "alice", Conversation: "c1"}
	c2 := events.Identity{Tenant: "acme-overlay", User: "alice", Conversation: "c2"}
	newer := testTurn(1)
	newer.CommittedAt = newer.CommittedAt.Add(time.Hour)
	newer.State = &history.StateChange{User: []history.StateOp{{Key: "lang", Value: []byte(`"de"`)}}}
	if _, err := s.Commit(ctx, c2, newer); err != nil {
		t.Fatalf("Commit(c2): %v", err)
	}
	older := testTurn(1)
	older.State = &history.StateChange{User: []history.StateOp{{Key: "lang", Value: []byte(`"fr"`)}, {Key: "tz", Value: []byte(`"CET"`)}}}
	if _, err := s.Commit(ctx, c1, older); err != nil {
		t.Fatalf("Commit(c1): %v", err)
	}
	// The crash: c1's roll-forward of tz was never written.
	if _, err := db.Collection("state").DeleteOne(ctx, bson.D{{Key: "_id", Value: "acme-overlay/alice#u#tz"}}); err != nil {
		t.Fatalf("delete tz: %v", err)
	}
	cs, err := s.ConversationState(ctx, c1)
	if err != nil {
		t.Fatalf("ConversationState: %v", err)
	}
	if got := fmt.Sprintf("lang=%s tz=%s", cs.User["lang"], cs.User["tz"]); got != `lang="de" tz="CET"` {
		t.Fatalf("user state = %s, want lang=\"de\" (the newer commit's) tz=\"CET\" (the newest turn's, not rolled forward)", got)
	}
}

// TestMongoStoreConcurrentUserStateUpdates: conversations of one user
// commit at once, each setting a key of its own and the one key they
// share. Every key of its own lands (different keys never interfere),
// and the shared key holds the value of the commit with the newest stamp
// (the latest CommittedAt), whatever order the writes took.
func TestMongoStoreConcurrentUserStateUpdates(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	db := testenv.MongoDB(t)
	s := newMongoStore(t, ctx, db)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := events.Identity{Tenant: "acme", User: "alice", Conversation: fmt.Sprintf("c%d", i)}
			tr := testTurn(1)
			// The newest commit is the one that starts last.
			tr.CommittedAt = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(i) * time.Second)
			tr.State = &history.StateChange{User: []history.StateOp{
				{Key: fmt.Sprintf("own%d", i), Value: []byte(fmt.Sprint(i))},
				{Key: "shared", Value: []byte(fmt.Sprint(i))},
			}}
			_, errs[i] = s.Commit(ctx, id, tr)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Commit(c%d): %v", i, err)
		}
	}
	m, err := s.ScopeState(ctx, "acme", "alice")
	if err != nil {
		t.Fatalf("ScopeState: %v", err)
	}
	for i := range n {
		if got := string(m[fmt.Sprintf("own%d", i)]); got != fmt.Sprint(i) {
			t.Errorf("own%d = %q, want %d (a concurrent update of another key lost it)", i, got, i)
		}
	}
	if got := string(m["shared"]); got != fmt.Sprint(n-1) {
		t.Errorf("shared = %q, want %d (the newest commit's)", got, n-1)
	}
}
