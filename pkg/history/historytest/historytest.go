package historytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// timeout bounds each subtest.
const timeout = 60 * time.Second

// Run runs the conformance suite. newStore is called once per subtest,
// from that subtest's goroutine; subtests run in parallel. For a store that
// is also a history.Journal it runs the journal's tests too.
func Run(t *testing.T, newStore func(t *testing.T) history.Store) {
	tests := []struct {
		name string
		run  func(t *testing.T, ctx context.Context, s history.Store)
	}{
		{"A committed turn is visible to Window and List", testCommitThenRead},
		{"Turns are numbered 1, 2, 3, 4 and their messages 1 to 8", testNumbering},
		{"Windows hold exactly the newest n messages, oldest first", testWindow},
		{"A window of a conversation that does not exist is empty", testWindowUnknown},
		{"Paging 7 turns 3 messages at a time yields every message once, in order", testPaging},
		{"List pages follow before and limit", testListRanges},
		{"A limit above 200 is clamped to 200", testListLimitClamp},
		{"List of a conversation that does not exist is ErrNotFound", testListUnknown},
		{"The same conversation name under two users or two tenants is two conversations", testIsolation},
		{"Committing a request id again writes nothing, even with different content", testIdempotent},
		{"Lookup finds a committed request id and only that", testLookup},
		{"Invalid turns and identities are rejected and write nothing", testInvalid},
		{"Concurrent commits of distinct request ids land on distinct contiguous turns", testConcurrentDistinct},
		{"Concurrent commits of one request id land on one turn", testConcurrentSame},
		{"Incomplete and cancelled answers keep their status", testStatuses},
		{"Times round-trip at millisecond precision in UTC", testTimes},
		{"Unicode, emoji, newlines and operator-like text round-trip verbatim", testContent},
		{"A pending message comes last in its window with seq 0 and is written by Commit", testPendingWindow},
		{"A pending request of a new conversation is alone in its window", testPendingNew},
		{"A discarded pending request writes nothing and cannot commit", testPendingDiscard},
		{"A committed pending request cannot commit again", testPendingTwice},
		{"A pending commit with an empty answer fails and writes nothing", testPendingEmpty},
		{"A turn from an older record than the last turn's is fenced and writes nothing", testFencing},
		{"Concurrent commits from a zombie and the new owner never persist out of order", testFencingRace},
		{"A committed request committed again after newer records' turns is a duplicate, not fenced", testDuplicateBehindNewerTurns},
		{"An outcome without a turn is recorded once and answers later commits and lookups", testOutcome},
		{"Cancels cover one request or everything below a position of the conversation's partition", testCancels},
		{"Of the requests cancelled one by one, a conversation remembers the newest MaxCancelledRequests", testCancelsForgetTheOldest},
		{"Conversations lists only the user's conversations with turns, newest first, with message counts", testConversationsList},
		{"Paging conversations at any page size visits each once in order, across ties of the same millisecond", testConversationsPaging},
		{"A new turn moves its conversation to the top of the listing", testConversationsReorder},
		{"A commit of an older turn after a newer one moves no conversation back in the listing", testConversationsOlderCommitAfterNewer},
		{"Listing pages across ties of one millisecond never hold another user's or tenant's conversations", testConversationsIdentityTies},
		{"A conversation listing's limit is clamped to 1..200", testConversationsLimitClamp},
		{"A user without conversations gets an empty listing", testConversationsEmpty},
		{"Conversations rejects invalid owners and cursors", testConversationsInvalid},
		{"Token usage and interrupts round-trip on assistant messages", testUsageAndInterrupt},
		{"An interrupt goes with status interrupted, and only there an empty answer is allowed", testInterruptRules},
		{"A summary is saved per conversation and only moves forward", testSummaries},
		{"Checkpoints are kept by name per conversation and replaced by a second write", testCheckpoints},
		{"Start returns the window of a new request, whose commit lands after it", testStartWindowThenCommit},
		{"Start reports a request already committed or with an outcome as decided, in the window or before it", testStartDecided},
		{"Start reports a cancelled request, unless it is already decided", testStartCancelled},
		{"A commit after Start whose expected turn was taken meanwhile lands after it, or is a duplicate, or is fenced", testStartStale},
		{"A turn of several parts holds one assistant message per part, and every window and page counts messages across them", testPartsMessages},
		{"An interrupted turn of several parts holds the parts, then the question on the last one", testPartsInterrupted},
		{"Committing a turn of several parts again writes nothing, and the next turn follows it", testPartsIdempotent},
		{"A fenced turn of several parts writes nothing", testPartsFenced},
		{"Concurrent commits of turns of several parts leave seqs without gap or overlap", testPartsConcurrent},
		{"Parts beyond MaxParts, parts without text and parts with an answer are rejected", testPartsInvalid},
		{"With KeepV1 a conversation of version 1 turns (or none) gets one assistant message per turn, the parts joined; one with a version 2 turn keeps its parts", testKeepV1},
		{"With KeepV1 a commit whose expected turn was taken by a version 2 turn meanwhile is version 2 too", testKeepV1AfterStaleStart},
	}
	tests = append(tests, stateTests...)
	tests = append(tests, resetTests...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			t.Cleanup(cancel)
			tc.run(t, ctx, newStore(t))
		})
	}
	runJournal(t, newStore)
}

// Fixtures.

var base = time.Date(2025, 3, 14, 15, 9, 26, 535_000_000, time.UTC)

// newIdentity returns an identity under a tenant unique to this call.
func newIdentity(t *testing.T, conversation string) events.Identity {
	t.Helper()
	return events.Identity{Tenant: "t-" + random(t), User: "alice", Conversation: conversation}
}

func random(t *testing.T) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random: %v", err)
	}
	return hex.EncodeToString(b[:])
}

// turn i of a fixture conversation: request r<i>.
func turn(i int) history.Turn {
	return history.Turn{
		RequestID:   fmt.Sprintf("r%d", i),
		User:        fmt.Sprintf("question %d", i),
		UserAt:      base.Add(time.Duration(i) * time.Minute),
		Answer:      fmt.Sprintf("answer %d", i),
		Agent:       "echo",
		Status:      events.StatusComplete,
		CommittedAt: base.Add(time.Duration(i)*time.Minute + time.Second),
	}
}

func commit(t *testing.T, ctx context.Context, s history.Store, id events.Identity, tr history.Turn) history.Committed {
	t.Helper()
	c, err := s.Commit(ctx, id, tr)
	if err != nil {
		t.Fatalf("Commit(%s, %s): %v", id, tr.RequestID, err)
	}
	return c
}

// commitTurns commits turn(1) … turn(count) and checks their numbers.
func commitTurns(t *testing.T, ctx context.Context, s history.Store, id events.Identity, count int) {
	t.Helper()
	for i := 1; i <= count; i++ {
		if c := commit(t, ctx, s, id, turn(i)); c.N != int64(i) || c.Duplicate {
			t.Fatalf("Commit(turn %d) = %+v, want N=%d, not duplicate", i, c, i)
		}
	}
}

// fixtureMessage is message seq of a conversation made by commitTurns.
func fixtureMessage(seq int64) history.Message {
	i := int((seq + 1) / 2)
	tr := turn(i)
	if seq%2 == 1 {
		return history.Message{Seq: seq, Role: history.RoleUser, Content: tr.User, RequestID: tr.RequestID, CreatedAt: tr.UserAt}
	}
	return history.Message{
		Seq: seq, Role: history.RoleAssistant, Content: tr.Answer, RequestID: tr.RequestID,
		Agent: tr.Agent, CreatedAt: tr.CommittedAt, Status: tr.Status,
	}
}

// fixtureMessages returns fixture messages lo … hi.
func fixtureMessages(lo, hi int64) []history.Message {
	out := []history.Message{}
	for seq := lo; seq <= hi; seq++ {
		out = append(out, fixtureMessage(seq))
	}
	return out
}

func window(t *testing.T, ctx context.Context, s history.Store, id events.Identity, n int) []history.Message {
	t.Helper()
	msgs, err := s.Window(ctx, id, n)
	if err != nil {
		t.Fatalf("Window(%s, %d): %v", id, n, err)
	}
	return msgs
}

func list(t *testing.T, ctx context.Context, s history.Store, id events.Identity, before int64, limit int) history.Page {
	t.Helper()
	p, err := s.List(ctx, id, before, limit)
	if err != nil {
		t.Fatalf("List(%s, before=%d, limit=%d): %v", id, before, limit, err)
	}
	return p
}

// equalMessages compares every field; times by instant and location.
func equalMessages(got, want []history.Message) error {
	if len(got) != len(want) {
		return fmt.Errorf("got %d messages %s, want %d %s", len(got), summary(got), len(want), summary(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		gt, wt := g.CreatedAt, w.CreatedAt
		g.CreatedAt, w.CreatedAt = time.Time{}, time.Time{}
		if !reflect.DeepEqual(g.Usage, w.Usage) || !reflect.DeepEqual(g.Interrupt, w.Interrupt) {
			return fmt.Errorf("message %d (seq %d): usage %+v interrupt %+v, want %+v and %+v", i, g.Seq, g.Usage, g.Interrupt, w.Usage, w.Interrupt)
		}
		g.Usage, w.Usage, g.Interrupt, w.Interrupt = nil, nil, nil, nil
		if g != w {
			return fmt.Errorf("message %d: got %+v, want %+v", i, g, w)
		}
		if !gt.Equal(wt) || gt.Location() != time.UTC {
			return fmt.Errorf("message %d (seq %d): created_at %v, want %v in UTC", i, g.Seq, gt, wt)
		}
	}
	return nil
}

func summary(msgs []history.Message) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%s:%q", m.Seq, m.Role, m.Content)
	}
	b.WriteByte(']')
	return b.String()
}

func expectNotFound(t *testing.T, ctx context.Context, s history.Store, id events.Identity) {
	t.Helper()
	if p, err := s.List(ctx, id, 0, 50); !errors.Is(err, history.ErrNotFound) {
		t.Fatalf("List(%s) = %s, %v; want ErrNotFound", id, summary(p.Messages), err)
	}
}

// Tests.

func testCommitThenRead(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	tr := turn(1)
	tr.Agent = "researcher"
	c := commit(t, ctx, s, id, tr)
	if want := (history.Committed{N: 1, Status: events.StatusComplete}); c != want {
		t.Fatalf("Commit = %+v, want %+v", c, want)
	}
	want := []history.Message{
		{Seq: 1, Role: history.RoleUser, Content: tr.User, RequestID: "r1", CreatedAt: tr.UserAt},
		{Seq: 2, Role: history.RoleAssistant, Content: tr.Answer, RequestID: "r1", Agent: "researcher",
			CreatedAt: tr.CommittedAt, Status: events.StatusComplete},
	}
	if err := equalMessages(window(t, ctx, s, id, 10), want); err != nil {
		t.Errorf("Window: %v", err)
	}
	p := list(t, ctx, s, id, 0, 50)
	if err := equalMessages(p.Messages, want); err != nil {
		t.Errorf("List: %v", err)
	}
	if p.NextBefore != 0 {
		t.Errorf("List NextBefore = %d, want 0", p.NextBefore)
	}
	if want[0].Incomplete() || want[1].Incomplete() {
		t.Errorf("messages of a complete turn report Incomplete")
	}
}

func testNumbering(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	commitTurns(t, ctx, s, id, 4)
	if err := equalMessages(window(t, ctx, s, id, 8), fixtureMessages(1, 8)); err != nil {
		t.Fatal(err)
	}
}

func testWindow(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	commitTurns(t, ctx, s, id, 5) // messages 1 … 10
	tests := []struct {
		name   string
		n      int
		lo, hi int64
	}{
		{"A window smaller than the history holds the newest messages.", 4, 7, 10},
		{"An odd window is trimmed to exactly n messages.", 3, 8, 10},
		{"A window of one holds the newest assistant message.", 1, 10, 10},
		{"A window as long as the history holds all of it.", 10, 1, 10},
		{"An odd window one longer than the history holds all of it.", 11, 1, 10},
		{"A window larger than the history holds all of it.", 50, 1, 10},
		{"A window of the largest int holds all of it.", math.MaxInt, 1, 10},
		{"A window of zero is empty.", 0, 1, 0},
		{"A negative window is empty.", -3, 1, 0},
	}
	for _, tc := range tests {
		got := window(t, ctx, s, id, tc.n)
		if got == nil {
			t.Errorf("%s Window(%d) = nil, want a non-nil slice", tc.name, tc.n)
		}
		if err := equalMessages(got, fixtureMessages(tc.lo, tc.hi)); err != nil {
			t.Errorf("%s Window(%d): %v", tc.name, tc.n, err)
		}
	}
}

func testWindowUnknown(t *testing.T, ctx context.Context, s history.Store) {
	got := window(t, ctx, s, newIdentity(t, "nobody-here"), 20)
	if got == nil || len(got) != 0 {
		t.Fatalf("Window of an unknown conversation = %#v, want an empty non-nil slice", got)
	}
}

func testPaging(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	commitTurns(t, ctx, s, id, 7) // messages 1 … 14
	var pages [][]history.Message
	before := int64(0)
	for len(pages) < 10 {
		p := list(t, ctx, s, id, before, 3)
		pages = append(pages, p.Messages)
		if p.NextBefore == 0 {
			break
		}
		if len(p.Messages) == 0 || p.NextBefore != p.Messages[0].Seq {
			t.Fatalf("page %d %s: NextBefore %d, want the lowest seq of the page", len(pages), summary(p.Messages), p.NextBefore)
		}
		before = p.NextBefore
	}
	wantSizes := []int{3, 3, 3, 3, 2}
	if len(pages) != len(wantSizes) {
		t.Fatalf("got %d pages, want %d: %v", len(pages), len(wantSizes), pages)
	}
	var all []history.Message
	for i := len(pages) - 1; i >= 0; i-- {
		if len(pages[i]) != wantSizes[i] {
			t.Errorf("page %d has %d messages %s, want %d", i, len(pages[i]), summary(pages[i]), wantSizes[i])
		}
		all = append(all, pages[i]...)
	}
	if err := equalMessages(all, fixtureMessages(1, 14)); err != nil {
		t.Fatalf("pages newest to oldest, concatenated oldest first: %v", err)
	}
}

func testListRanges(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	commitTurns(t, ctx, s, id, 7) // messages 1 … 14
	tests := []struct {
		name     string
		before   int64
		limit    int
		lo, hi   int64
		wantNext int64
	}{
		{"Before 0 lists the newest messages.", 0, 4, 11, 14, 11},
		{"A negative before lists the newest messages.", -1, 4, 11, 14, 11},
		{"Before past the newest message lists the newest messages.", 1000, 3, 12, 14, 12},
		{"Before one past the newest message lists the newest messages.", 15, 3, 12, 14, 12},
		{"Before in the middle lists the messages just below it.", 5, 3, 2, 4, 2},
		{"A page reaching message 1 has no next page.", 3, 10, 1, 2, 0},
		{"A page starting at message 1 exactly has no next page.", 4, 3, 1, 3, 0},
		{"Before 1 yields an empty page with no next page.", 1, 10, 1, 0, 0},
		{"A limit below 1 is raised to 1.", 0, 0, 14, 14, 14},
		{"A limit larger than the conversation lists all of it.", 0, 100, 1, 14, 0},
	}
	for _, tc := range tests {
		p := list(t, ctx, s, id, tc.before, tc.limit)
		if p.Messages == nil {
			t.Errorf("%s List(%d, %d).Messages is nil, want a non-nil slice", tc.name, tc.before, tc.limit)
		}
		if err := equalMessages(p.Messages, fixtureMessages(tc.lo, tc.hi)); err != nil {
			t.Errorf("%s List(%d, %d): %v", tc.name, tc.before, tc.limit, err)
		}
		if p.NextBefore != tc.wantNext {
			t.Errorf("%s List(%d, %d).NextBefore = %d, want %d", tc.name, tc.before, tc.limit, p.NextBefore, tc.wantNext)
		}
	}
}

func testListLimitClamp(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	commitTurns(t, ctx, s, id, 101) // messages 1 … 202
	p := list(t, ctx, s, id, 0, 1000)
	if err := equalMessages(p.Messages, fixtureMessages(3, 202)); err != nil {
		t.Fatal(err)
	}
	if p.NextBefore != 3 {
		t.Fatalf("NextBefore = %d, want 3", p.NextBefore)
	}
}

func testListUnknown(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "nobody-here")
	for _, before := range []int64{0, 1, 5} {
		if _, err := s.List(ctx, id, before, 10); !errors.Is(err, history.ErrNotFound) {
			t.Errorf("List(before=%d) error = %v, want ErrNotFound", before, err)
		}
	}
}

func testIsolation(t *testing.T, ctx context.Context, s history.Store) {
	alice := newIdentity(t, "shared-name")
	bob := alice
	bob.User = "bob"
	otherTenant := alice
	otherTenant.Tenant += "-2"

	commitTurns(t, ctx, s, alice, 2)
	for _, other := range []events.Identity{bob, otherTenant} {
		expectNotFound(t, ctx, s, other)
		if got := window(t, ctx, s, other, 10); len(got) != 0 {
			t.Errorf("Window(%s) = %s, want empty", other, summary(got))
		}
		if c, ok, err := s.Lookup(ctx, other, "r1"); err != nil || ok {
			t.Errorf("Lookup(%s, r1) = %+v, %v, %v; want not found", other, c, ok, err)
		}
	}

	// Bob's request r1 is his own first turn, not a duplicate of Alice's.
	bobTurn := turn(1)
	bobTurn.User, bobTurn.Answer = "bob asks", "bob is answered"
	if c := commit(t, ctx, s, bob, bobTurn); c.N != 1 || c.Duplicate {
		t.Fatalf("Commit(bob, r1) = %+v, want N=1 not duplicate", c)
	}
	if err := equalMessages(window(t, ctx, s, alice, 10), fixtureMessages(1, 4)); err != nil {
		t.Errorf("Alice's window after Bob's commit: %v", err)
	}
	got := window(t, ctx, s, bob, 10)
	if len(got) != 2 || got[0].Content != "bob asks" || got[1].Content != "bob is answered" {
		t.Errorf("Bob's window = %s, want only his own turn", summary(got))
	}
	expectNotFound(t, ctx, s, otherTenant)
}

func testIdempotent(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	commitTurns(t, ctx, s, id, 2)
	again := turn(1)
	again.User, again.Answer, again.Status = "different question", "different answer", events.StatusIncomplete
	for range 2 {
		c := commit(t, ctx, s, id, again)
		if want := (history.Committed{N: 1, Status: events.StatusComplete, Duplicate: true}); c != want {
			t.Fatalf("second Commit(r1) = %+v, want %+v", c, want)
		}
	}
	if err := equalMessages(window(t, ctx, s, id, 100), fixtureMessages(1, 4)); err != nil {
		t.Fatalf("after duplicate commits: %v", err)
	}
	if c := commit(t, ctx, s, id, turn(3)); c.N != 3 || c.Duplicate {
		t.Fatalf("Commit(r3) after duplicates = %+v, want N=3", c)
	}
}

func testLookup(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	commitTurns(t, ctx, s, id, 1)
	tr := turn(2)
	tr.Status = events.StatusIncomplete
	commit(t, ctx, s, id, tr)

	tests := []struct {
		name      string
		id        events.Identity
		requestID string
		want      history.Committed
		found     bool
	}{
		{"A committed request id is found with its turn.", id, "r1", history.Committed{N: 1, Status: events.StatusComplete}, true},
		{"A committed request id reports its status.", id, "r2", history.Committed{N: 2, Status: events.StatusIncomplete}, true},
		{"An unknown request id is not found.", id, "r3", history.Committed{}, false},
		{"A request id of another conversation is not found.", events.Identity{Tenant: id.Tenant, User: id.User, Conversation: "c2"}, "r1", history.Committed{}, false},
	}
	for _, tc := range tests {
		c, found, err := s.Lookup(ctx, tc.id, tc.requestID)
		if err != nil || found != tc.found || c != tc.want {
			t.Errorf("%s Lookup(%s) = %+v, %v, %v; want %+v, %v, nil", tc.name, tc.requestID, c, found, err, tc.want, tc.found)
		}
	}
	if _, _, err := s.Lookup(ctx, id, "bad/id"); !errors.Is(err, events.ErrInvalid) {
		t.Errorf("Lookup of an invalid request id: error %v, want ErrInvalid", err)
	}
}

func testInvalid(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	mod := func(f func(*history.Turn)) history.Turn {
		tr := turn(1)
		f(&tr)
		return tr
	}
	tests := []struct {
		name  string
		turn  history.Turn
		empty bool // also ErrEmptyAnswer
	}{
		{"An empty answer is rejected.", mod(func(tr *history.Turn) { tr.Answer = "" }), true},
		{"An empty user message is rejected.", mod(func(tr *history.Turn) { tr.User = "" }), false},
		{"Status discarded is rejected.", mod(func(tr *history.Turn) { tr.Status = events.StatusDiscarded }), false},
		{"Status failed is rejected.", mod(func(tr *history.Turn) { tr.Status = events.StatusFailed }), false},
		{"An unknown status is rejected.", mod(func(tr *history.Turn) { tr.Status = "bogus" }), false},
		{"An empty status is rejected.", mod(func(tr *history.Turn) { tr.Status = "" }), false},
		{"An empty request id is rejected.", mod(func(tr *history.Turn) { tr.RequestID = "" }), false},
		{"A request id with a slash is rejected.", mod(func(tr *history.Turn) { tr.RequestID = "a/b" }), false},
		{"A request id with a hash is rejected.", mod(func(tr *history.Turn) { tr.RequestID = "a#b" }), false},
		{"A request id over 128 bytes is rejected.", mod(func(tr *history.Turn) { tr.RequestID = strings.Repeat("r", 129) }), false},
	}
	for _, tc := range tests {
		_, err := s.Commit(ctx, id, tc.turn)
		if !errors.Is(err, events.ErrInvalid) {
			t.Errorf("%s Commit error = %v, want ErrInvalid", tc.name, err)
		}
		if tc.empty != errors.Is(err, history.ErrEmptyAnswer) {
			t.Errorf("%s errors.Is(%v, ErrEmptyAnswer) = %v, want %v", tc.name, err, !tc.empty, tc.empty)
		}
	}
	expectNotFound(t, ctx, s, id)
	if _, found, err := s.Lookup(ctx, id, "r1"); found || err != nil {
		t.Errorf("Lookup(r1) after rejected commits = %v, %v; want not found", found, err)
	}

	bad := id
	bad.Conversation = "a/b"
	if _, err := s.Commit(ctx, bad, turn(1)); !errors.Is(err, events.ErrInvalid) {
		t.Errorf("Commit with an invalid conversation: error %v, want ErrInvalid", err)
	}
	if _, err := s.Window(ctx, bad, 10); !errors.Is(err, events.ErrInvalid) {
		t.Errorf("Window with an invalid conversation: error %v, want ErrInvalid", err)
	}
	if _, err := s.List(ctx, bad, 0, 10); !errors.Is(err, events.ErrInvalid) {
		t.Errorf("List with an invalid conversation: error %v, want ErrInvalid", err)
	}
	noUser := id
	noUser.User = ""
	if _, err := s.Commit(ctx, noUser, turn(1)); !errors.Is(err, events.ErrInvalid) {
		t.Errorf("Commit with an empty user: error %v, want ErrInvalid", err)
	}
	expectNotFound(t, ctx, s, id)
}

// runConcurrently runs f(0) … f(n-1) in n goroutines and waits.
func runConcurrently(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { f(i) })
	}
	wg.Wait()
}

func testConcurrentDistinct(t *testing.T, ctx context.Context, s history.Store) {
	const writers, each = 8, 4
	id := newIdentity(t, "c1")
	results := make([]history.Committed, writers*each)
	errs := make([]error, writers*each)
	runConcurrently(writers, func(w int) {
		for j := range each {
			i := w*each + j
			results[i], errs[i] = s.Commit(ctx, id, turn(i+1))
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent commits: %v", err)
	}
	byN := make(map[int64]string)
	for i, c := range results {
		rid := turn(i + 1).RequestID
		if c.Duplicate {
			t.Errorf("Commit(%s) = %+v: a distinct request reported as duplicate", rid, c)
		}
		if prev, ok := byN[c.N]; ok {
			t.Errorf("turn %d was given to both %s and %s", c.N, prev, rid)
		}
		byN[c.N] = rid
	}
	for n := int64(1); n <= writers*each; n++ {
		if _, ok := byN[n]; !ok {
			t.Errorf("turn %d was given to no request: numbers are not contiguous", n)
		}
	}
	msgs := window(t, ctx, s, id, 2*writers*each+10)
	if len(msgs) != 2*writers*each {
		t.Fatalf("window has %d messages, want %d (a turn was lost): %s", len(msgs), 2*writers*each, summary(msgs))
	}
	for i, m := range msgs {
		if m.Seq != int64(i+1) || m.RequestID != byN[(m.Seq+1)/2] {
			t.Errorf("message %d = seq %d of %s, want seq %d of %s", i, m.Seq, m.RequestID, i+1, byN[int64(i/2+1)])
		}
	}
	p := list(t, ctx, s, id, 0, 200)
	if err := equalMessages(p.Messages, msgs); err != nil {
		t.Errorf("List disagrees with Window: %v", err)
	}
	for i, c := range results {
		rid := turn(i + 1).RequestID
		got, found, err := s.Lookup(ctx, id, rid)
		if err != nil || !found || got.N != c.N {
			t.Errorf("Lookup(%s) = %+v, %v, %v; want turn %d", rid, got, found, err, c.N)
		}
	}
}

func testConcurrentSame(t *testing.T, ctx context.Context, s history.Store) {
	const retries, others = 6, 4
	id := newIdentity(t, "c1")
	same := turn(100)
	results := make([]history.Committed, retries+others)
	errs := make([]error, retries+others)
	runConcurrently(retries+others, func(i int) {
		tr := same
		if i >= retries {
			tr = turn(i)
		}
		results[i], errs[i] = s.Commit(ctx, id, tr)
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent commits: %v", err)
	}
	fresh := 0
	for _, c := range results[:retries] {
		if !c.Duplicate {
			fresh++
		}
		if c.N != results[0].N {
			t.Errorf("request %s landed on turns %d and %d", same.RequestID, results[0].N, c.N)
		}
	}
	if fresh != 1 {
		t.Errorf("%d of %d commits of one request id wrote a turn, want exactly 1: %+v", fresh, retries, results[:retries])
	}
	msgs := window(t, ctx, s, id, 100)
	if len(msgs) != 2*(1+others) {
		t.Fatalf("window has %d messages, want %d: %s", len(msgs), 2*(1+others), summary(msgs))
	}
	count := 0
	for _, m := range msgs {
		if m.RequestID == same.RequestID {
			count++
		}
	}
	if count != 2 {
		t.Errorf("request %s has %d messages, want 2: %s", same.RequestID, count, summary(msgs))
	}
}

func testStatuses(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	statuses := []events.Status{events.StatusComplete, events.StatusIncomplete, events.StatusCancelled}
	for i, st := range statuses {
		tr := turn(i + 1)
		tr.Status = st
		if c := commit(t, ctx, s, id, tr); c.Status != st {
			t.Errorf("Commit(status %s).Status = %s", st, c.Status)
		}
	}
	msgs := window(t, ctx, s, id, 6)
	if len(msgs) != 6 {
		t.Fatalf("window = %s, want 6 messages", summary(msgs))
	}
	for i, st := range statuses {
		u, a := msgs[2*i], msgs[2*i+1]
		if u.Status != "" || u.Incomplete() {
			t.Errorf("user message %d: status %q, incomplete %v; want none", u.Seq, u.Status, u.Incomplete())
		}
		if a.Status != st || a.Incomplete() != (st != events.StatusComplete) {
			t.Errorf("assistant message %d: status %q, incomplete %v; want %q, %v", a.Seq, a.Status, a.Incomplete(), st, st != events.StatusComplete)
		}
	}
}

func testTimes(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	tr := turn(1)
	tr.UserAt = time.Date(2024, 2, 29, 23, 59, 59, 123_456_789, zone)
	tr.CommittedAt = time.Date(2024, 3, 1, 0, 0, 1, 999_999_999, zone)
	commit(t, ctx, s, id, tr)

	untimed := turn(2)
	untimed.UserAt, untimed.CommittedAt = time.Time{}, time.Time{}
	before := time.Now()
	commit(t, ctx, s, id, untimed)
	after := time.Now()

	msgs := window(t, ctx, s, id, 4)
	if len(msgs) != 4 {
		t.Fatalf("window = %s, want 4 messages", summary(msgs))
	}
	want := []time.Time{
		time.Date(2024, 2, 29, 18, 29, 59, 123_000_000, time.UTC),
		time.Date(2024, 2, 29, 18, 30, 1, 999_000_000, time.UTC),
	}
	for i, w := range want {
		got := msgs[i].CreatedAt
		if !got.Equal(w) || got.Location() != time.UTC {
			t.Errorf("message %d created_at = %v, want %v (millisecond precision, UTC)", msgs[i].Seq, got, w)
		}
	}
	// Zero times are stamped by the store (generous bounds: clocks only).
	for _, m := range msgs[2:] {
		if m.CreatedAt.Before(before.Add(-time.Hour)) || m.CreatedAt.After(after.Add(time.Hour)) {
			t.Errorf("message %d with a zero time: created_at %v, want about %v", m.Seq, m.CreatedAt, before)
		}
		if m.CreatedAt.Location() != time.UTC || m.CreatedAt.Nanosecond()%int(time.Millisecond) != 0 {
			t.Errorf("message %d created_at %v: want UTC at millisecond precision", m.Seq, m.CreatedAt)
		}
	}
}

func testContent(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	contents := []struct{ user, answer string }{
		{"héllo wörld — ünïcödé ✓", "日本語のテキスト، العربية, עברית"},
		{"emoji 👋🏽👨‍👩‍👧‍👦🇫🇷 and a lone combining mark e\u0301", "🙂"},
		{"line one\nline two\r\n\tindented\n\n", "trailing spaces   \n"},
		{`{"$set": {"turns": 0}, "a.b": "$x"} \ " ' ` + "`", "$max"},
		{"[[delay:1ms]] [[tokens:3]] directives are verbatim", strings.Repeat("long answer ", 2800)},
	}
	for i, c := range contents {
		tr := turn(i + 1)
		tr.User, tr.Answer = c.user, c.answer
		commit(t, ctx, s, id, tr)
	}
	check := func(what string, msgs []history.Message) {
		if len(msgs) != 2*len(contents) {
			t.Fatalf("%s: %d messages, want %d", what, len(msgs), 2*len(contents))
		}
		for i, c := range contents {
			if msgs[2*i].Content != c.user || msgs[2*i+1].Content != c.answer {
				t.Errorf("%s: turn %d = %q / %.40q, want %q / %.40q", what, i+1, msgs[2*i].Content, msgs[2*i+1].Content, c.user, c.answer)
			}
		}
	}
	check("Window", window(t, ctx, s, id, 100))
	check("List", list(t, ctx, s, id, 0, 100).Messages)
}

func testPendingWindow(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	commitTurns(t, ctx, s, id, 2)
	at := base.Add(time.Hour + 123456789)
	p := history.Begin(s, id, "r3", "the pending question", at)
	got, err := p.Window(ctx, 3)
	if err != nil {
		t.Fatalf("Pending.Window: %v", err)
	}
	pending := history.Message{Seq: 0, Role: history.RoleUser, Content: "the pending question", RequestID: "r3",
		CreatedAt: at.Truncate(time.Millisecond)}
	if err := equalMessages(got, append(fixtureMessages(2, 4), pending)); err != nil {
		t.Fatalf("Pending.Window(3): %v", err)
	}
	if err := equalMessages(window(t, ctx, s, id, 100), fixtureMessages(1, 4)); err != nil {
		t.Fatalf("the pending message was written before Commit: %v", err)
	}
	c, err := p.Commit(ctx, "the answer", "echo", events.StatusIncomplete, at.Add(time.Second))
	if err != nil {
		t.Fatalf("Pending.Commit: %v", err)
	}
	if want := (history.Committed{N: 3, Status: events.StatusIncomplete}); c != want {
		t.Fatalf("Pending.Commit = %+v, want %+v", c, want)
	}
	pending.Seq = 5
	answer := history.Message{Seq: 6, Role: history.RoleAssistant, Content: "the answer", RequestID: "r3", Agent: "echo",
		CreatedAt: at.Add(time.Second).Truncate(time.Millisecond), Status: events.StatusIncomplete}
	if err := equalMessages(window(t, ctx, s, id, 2), []history.Message{pending, answer}); err != nil {
		t.Fatalf("after Pending.Commit: %v", err)
	}
}

func testPendingNew(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	p := history.Begin(s, id, "r1", "first words", base)
	got, err := p.Window(ctx, 20)
	if err != nil {
		t.Fatalf("Pending.Window: %v", err)
	}
	if len(got) != 1 || got[0].Seq != 0 || got[0].Content != "first words" || got[0].Role != history.RoleUser {
		t.Fatalf("Pending.Window = %s, want only the pending message", summary(got))
	}
	expectNotFound(t, ctx, s, id)
	p.Discard()
}

func testPendingDiscard(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	p := history.Begin(s, id, "r1", "never mind", base)
	p.Discard()
	p.Discard() // idempotent
	if _, err := p.Commit(ctx, "an answer", "echo", events.StatusComplete, base); !errors.Is(err, history.ErrClosed) {
		t.Errorf("Commit after Discard: error %v, want ErrClosed", err)
	}
	if _, err := p.Window(ctx, 10); !errors.Is(err, history.ErrClosed) {
		t.Errorf("Window after Discard: error %v, want ErrClosed", err)
	}
	expectNotFound(t, ctx, s, id)
	if _, found, err := s.Lookup(ctx, id, "r1"); found || err != nil {
		t.Errorf("Lookup after Discard = %v, %v; want not found", found, err)
	}
}

func testPendingTwice(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	p := history.Begin(s, id, "r1", "question", base)
	if _, err := p.Commit(ctx, "answer", "echo", events.StatusComplete, base); err != nil {
		t.Fatalf("first Commit: %v", err)
	}
	if _, err := p.Commit(ctx, "answer", "echo", events.StatusComplete, base); !errors.Is(err, history.ErrClosed) {
		t.Errorf("second Commit: error %v, want ErrClosed", err)
	}
	if got := window(t, ctx, s, id, 10); len(got) != 2 {
		t.Errorf("window = %s, want one turn", summary(got))
	}
}

func testPendingEmpty(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	p := history.Begin(s, id, "r1", "say nothing", base)
	if _, err := p.Commit(ctx, "", "echo", events.StatusComplete, base); !errors.Is(err, history.ErrEmptyAnswer) {
		t.Errorf("Commit with an empty answer: error %v, want ErrEmptyAnswer", err)
	}
	expectNotFound(t, ctx, s, id)
	p.Discard()
	if _, err := p.Commit(ctx, "late", "echo", events.StatusComplete, base); !errors.Is(err, history.ErrClosed) {
		t.Errorf("Commit after Discard: error %v, want ErrClosed", err)
	}
	expectNotFound(t, ctx, s, id)
}

func sourced(i int, src history.Source) history.Turn {
	tr := turn(i)
	tr.Source = &src
	return tr
}

func testFencing(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "fenced")
	at := base
	src := func(partition int, offset int64, d time.Duration) history.Source {
		return history.Source{Topic: "requests", Partition: partition, Offset: offset, Time: at.Add(d)}
	}
	commit(t, ctx, s, id, sourced(1, src(3, 10, 0)))
	tests := []struct {
		name   string
		turn   history.Turn
		fenced bool
	}{
		{"an older offset of the same partition is fenced", sourced(2, src(3, 9, 0)), true},
		{"an older offset with an earlier time is fenced", sourced(2, src(3, 5, -time.Hour)), true},
		{"a turn without source is not fenced", turn(2), false},
		{"a newer offset is not fenced", sourced(3, src(3, 11, time.Second)), false},
		{"an older offset of another partition is not fenced (the topic was repartitioned)", sourced(4, src(5, 1, 2*time.Second)), false},
		{"an older offset with a later time is not fenced (the topic was recreated)", sourced(5, src(5, 0, time.Hour)), false},
		{"an older offset of another topic is not fenced", sourced(6, history.Source{Topic: "other", Partition: 5, Offset: 0, Time: at}), false},
	}
	n := int64(1)
	for _, tt := range tests {
		c, err := s.Commit(ctx, id, tt.turn)
		if tt.fenced {
			if !errors.Is(err, history.ErrFenced) {
				t.Fatalf("%s: Commit = %+v, %v; want ErrFenced", tt.name, c, err)
			}
			if _, found, err := s.Lookup(ctx, id, tt.turn.RequestID); err != nil || found {
				t.Fatalf("%s: a fenced request was recorded (%v, %v)", tt.name, found, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: Commit: %v", tt.name, err)
		}
		n++
		if c.N != n {
			t.Fatalf("%s: committed as turn %d, want %d", tt.name, c.N, n)
		}
	}
	if got := len(window(t, ctx, s, id, 100)); got != int(2*n) {
		t.Fatalf("window holds %d messages, want %d", got, 2*n)
	}
}

// testDuplicateBehindNewerTurns commits a request again (a redelivery that
// Commit sees without Pending.Start, as a shadow replay does) after turns
// of newer records: idempotency per request id comes before fencing.
func testDuplicateBehindNewerTurns(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "dup-fenced")
	src := func(offset int64) history.Source {
		return history.Source{Topic: "requests", Partition: 1, Offset: offset, Time: base.Add(time.Duration(offset) * time.Second)}
	}
	first := sourced(1, src(1))
	commit(t, ctx, s, id, first)
	commit(t, ctx, s, id, sourced(2, src(2)))
	c, err := s.Commit(ctx, id, first)
	if err != nil || c.N != 1 || !c.Duplicate {
		t.Fatalf("Commit of request 1 again = %+v, %v; want a duplicate of turn 1", c, err)
	}
	if got := len(window(t, ctx, s, id, 100)); got != 4 {
		t.Fatalf("window holds %d messages, want 4", got)
	}
}

// testFencingRace commits offsets 1..N of one partition twice, from two
// "workers" going in order, concurrently: whichever wins each slot, the
// turns must come out in offset order, each request once.
func testFencingRace(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "race")
	const n = 12
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= n; i++ {
				_, err := s.Commit(ctx, id, sourced(i, history.Source{Topic: "requests", Partition: 0, Offset: int64(i), Time: base.Add(time.Duration(i) * time.Second)}))
				if err != nil && !errors.Is(err, history.ErrFenced) {
					t.Errorf("worker %d, offset %d: %v", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	msgs := window(t, ctx, s, id, 4*n)
	var last int
	seen := map[string]bool{}
	for _, m := range msgs {
		if m.Role != history.RoleUser {
			continue
		}
		var i int
		if _, err := fmt.Sscanf(m.Content, "question %d", &i); err != nil {
			t.Fatalf("unexpected message %q", m.Content)
		}
		if i <= last || seen[m.RequestID] {
			t.Fatalf("turns out of order or duplicated: %d after %d in %v", i, last, msgs)
		}
		last = i
		seen[m.RequestID] = true
	}
	if last != n {
		t.Fatalf("the newest turn is %d, want %d", last, n)
	}
}

func testOutcome(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "outcome")
	if _, err := s.RecordOutcome(ctx, id, "r1", events.StatusComplete); !errors.Is(err, events.ErrInvalid) {
		t.Fatalf("RecordOutcome(complete) = %v, want ErrInvalid", err)
	}
	c, err := s.RecordOutcome(ctx, id, "r1", events.StatusDiscarded)
	if err != nil || c != (history.Committed{Status: events.StatusDiscarded}) {
		t.Fatalf("RecordOutcome = %+v, %v", c, err)
	}
	if c, err := s.RecordOutcome(ctx, id, "r1", events.StatusRejected); err != nil || c != (history.Committed{Status: events.StatusDiscarded, Duplicate: true}) {
		t.Fatalf("second RecordOutcome = %+v, %v; want the first decision", c, err)
	}
	if c, found, err := s.Lookup(ctx, id, "r1"); err != nil || !found || c != (history.Committed{Status: events.StatusDiscarded}) {
		t.Fatalf("Lookup = %+v %v %v", c, found, err)
	}
	if c := commit(t, ctx, s, id, turn(1)); c != (history.Committed{Status: events.StatusDiscarded, Duplicate: true}) {
		t.Fatalf("Commit after an outcome = %+v, want the outcome as a duplicate", c)
	}
	if _, err := s.List(ctx, id, 0, 10); !errors.Is(err, history.ErrNotFound) {
		t.Fatalf("a conversation with outcomes only must not exist: %v", err)
	}
	commit(t, ctx, s, id, turn(2))
	if c, err := s.RecordOutcome(ctx, id, "r2", events.StatusCancelled); err != nil || c != (history.Committed{N: 1, Status: events.StatusComplete, Duplicate: true}) {
		t.Fatalf("RecordOutcome of a committed request = %+v, %v; want its turn", c, err)
	}
}

func testCancelsForgetTheOldest(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "c1")
	for i := range history.MaxCancelledRequests + 1 {
		if err := s.RecordCancel(ctx, id, history.Cancel{Topic: "requests", Partition: 2, RequestID: fmt.Sprintf("r%d", i)}); err != nil {
			t.Fatalf("RecordCancel(r%d): %v", i, err)
		}
	}
	src := history.Source{Topic: "requests", Partition: 2, Offset: 1}
	for i, want := range map[int]bool{0: false, 1: true, history.MaxCancelledRequests: true} {
		if got, err := s.Cancelled(ctx, id, fmt.Sprintf("r%d", i), src); err != nil || got != want {
			t.Errorf("Cancelled(r%d) after %d cancels = %v, %v; want %v", i, history.MaxCancelledRequests+1, got, err, want)
		}
	}
}

func testCancels(t *testing.T, ctx context.Context, s history.Store) {
	id := newIdentity(t, "cancels")
	other := newIdentity(t, "cancels")
	at := func(offset int64) history.Source {
		return history.Source{Topic: "requests", Partition: 2, Offset: offset}
	}
	cancelled := func(id events.Identity, rid string, src history.Source) bool {
		t.Helper()
		ok, err := s.Cancelled(ctx, id, rid, src)
		if err != nil {
			t.Fatalf("Cancelled: %v", err)
		}
		return ok
	}
	if cancelled(id, "r1", at(1)) {
		t.Fatal("a conversation without cancels reports a cancel")
	}
	if err := s.RecordCancel(ctx, id, history.Cancel{Topic: "requests", Partition: 2}); err != nil {
		t.Fatal(err) // a cancel of everything before offset 0: covers nothing
	}
	if cancelled(id, "r1", at(0)) {
		t.Fatal("a cancel before offset 0 covers offset 0")
	}
	for _, c := range []history.Cancel{
		{Topic: "requests", Partition: 2, RequestID: "r7"},
		{Topic: "requests", Partition: 2, Before: 10},
		{Topic: "requests", Partition: 2, Before: 4}, // older: must not move the position back
		{Topic: "requests", Partition: 2, RequestID: "r7"},
	} {
		if err := s.RecordCancel(ctx, id, c); err != nil {
			t.Fatalf("RecordCancel(%+v): %v", c, err)
		}
	}
	tests := []struct {
		name string
		id   events.Identity
		rid  string
		src  history.Source
		want bool
	}{
		{"a request posted before the cancel is covered", id, "r1", at(9), true},
		{"a request posted after it is not", id, "r2", at(10), false},
		{"a request cancelled by id is covered wherever it is", id, "r7", at(50), true},
		{"another partition is not covered", id, "r1", history.Source{Topic: "requests", Partition: 3, Offset: 1}, false},
		{"another topic is not covered", id, "r1", history.Source{Topic: "other", Partition: 2, Offset: 1}, false},
		{"another identity is not covered", other, "r7", at(1), false},
	}
	for _, tt := range tests {
		if got := cancelled(tt.id, tt.rid, tt.src); got != tt.want {
			t.Errorf("%s: Cancelled = %v", tt.name, got)
		}
	}
	if err := s.RecordCancel(ctx, id, history.Cancel{Partition: 2, Before: 3}); !errors.Is(err, events.ErrInvalid) {
		t.Fatalf("a cancel without topic: %v", err)
	}
	if _, err := s.List(ctx, id, 0, 10); !errors.Is(err, history.ErrNotFound) {
		t.Fatalf("cancels alone must not make a conversation exist: %v", err)
	}
}
