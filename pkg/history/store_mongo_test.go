package history_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/history/historytest"
)

func newMongoStore(t testing.TB, ctx context.Context, db *mongo.Database) *history.MongoStore {
	t.Helper()
	s, err := history.NewMongoStore(ctx, db, history.MongoConfig{})
	if err != nil {
		t.Fatalf("NewMongoStore: %v", err)
	}
	return s
}

// TestMongoStore runs the conformance suite on embedded FerretDB (or on
// TURNPIKE_MONGO_URI). All subtests share one database; each makes its own
// store on it, which also exercises idempotent index creation.
func TestMongoStore(t *testing.T) {
	t.Parallel()
	db := testenv.MongoDB(t)
	historytest.Run(t, func(t *testing.T) history.Store {
		return newMongoStore(t, testenv.Context(t, 30*time.Second), db)
	})
}

func testTurn(i int) history.Turn {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(i) * time.Second)
	return history.Turn{
		RequestID: fmt.Sprintf("r%d", i), User: fmt.Sprintf("q%d", i), UserAt: at,
		Answer: fmt.Sprintf("a%d", i), Agent: "echo", Status: events.StatusComplete, CommittedAt: at.Add(time.Millisecond),
	}
}

func requestIDs(msgs []history.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "%d:%s ", m.Seq, m.RequestID)
	}
	return strings.TrimSpace(b.String())
}

// wantRequestIDs is requestIDs of turns lo … hi of testTurn.
func wantRequestIDs(lo, hi int) string {
	var b strings.Builder
	for i := lo; i <= hi; i++ {
		fmt.Fprintf(&b, "%d:r%d %d:r%d ", 2*i-1, i, 2*i, i)
	}
	return strings.TrimSpace(b.String())
}

// TestMongoStoreConverges covers the states a crash or a lost update
// leaves between the commit point and the conversation roll-forward.
func TestMongoStoreConverges(t *testing.T) {
	t.Parallel()
	db := testenv.MongoDB(t)
	tests := []struct {
		name      string
		committed int                                                                        // turns committed normally first
		damage    func(ctx context.Context, s *history.MongoStore, id events.Identity) error // then
		turns     int                                                                        // turns visible afterwards
	}{
		{
			name:      "A first turn whose commit crashed after the commit point is visible.",
			committed: 0,
			damage: func(ctx context.Context, s *history.MongoStore, id events.Identity) error {
				return history.InsertTurnOnly(ctx, s, id, 1, testTurn(1))
			},
			turns: 1,
		},
		{
			name:      "A later turn whose commit crashed after the commit point is visible.",
			committed: 3,
			damage: func(ctx context.Context, s *history.MongoStore, id events.Identity) error {
				return history.InsertTurnOnly(ctx, s, id, 4, testTurn(4))
			},
			turns: 4,
		},
		{
			name:      "A conversation document lagging three turns behind hides none of them.",
			committed: 5,
			damage: func(ctx context.Context, s *history.MongoStore, id events.Identity) error {
				return history.SetConversationTurns(ctx, s, id, 2)
			},
			turns: 5,
		},
		{
			name:      "A turn covered by the conversation document but missing its request record is not committed twice.",
			committed: 2,
			damage: func(ctx context.Context, s *history.MongoStore, id events.Identity) error {
				// Commit would now try turn 4; only the request id's unique
				// index can tell that r3 already holds turn 3.
				if err := history.InsertTurnOnly(ctx, s, id, 3, testTurn(3)); err != nil {
					return err
				}
				return history.SetConversationTurns(ctx, s, id, 3)
			},
			turns: 3,
		},
		{
			name:      "A conversation document lagging every turn hides none of them.",
			committed: 3,
			damage: func(ctx context.Context, s *history.MongoStore, id events.Identity) error {
				return history.SetConversationTurns(ctx, s, id, 0)
			},
			turns: 3,
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 30*time.Second)
			s := newMongoStore(t, ctx, db)
			id := events.Identity{Tenant: "converge", User: "u", Conversation: fmt.Sprintf("c%d", i)}
			for j := 1; j <= tc.committed; j++ {
				if _, err := s.Commit(ctx, id, testTurn(j)); err != nil {
					t.Fatalf("Commit(%d): %v", j, err)
				}
			}
			if err := tc.damage(ctx, s, id); err != nil {
				t.Fatalf("damage: %v", err)
			}
			n := tc.turns

			w, err := s.Window(ctx, id, 100)
			if got, want := requestIDs(w), wantRequestIDs(1, n); err != nil || got != want {
				t.Errorf("Window = %q, %v; want %q", got, err, want)
			}
			p, err := s.List(ctx, id, 0, 3)
			if got, want := requestIDs(p.Messages), wantRequestIDs(1, n); err != nil || !strings.HasSuffix(want, " "+got) && got != want || len(p.Messages) != min(3, 2*n) {
				t.Errorf("List(0, 3) = %q, %v; want the newest 3 of %q", got, err, want)
			}
			p, err = s.List(ctx, id, int64(2*n), 2)
			if got, want := requestIDs(p.Messages), fmt.Sprintf("%d:r%d %d:r%d", 2*n-2, n-1, 2*n-1, n); n > 1 && (err != nil || got != want) {
				t.Errorf("List(%d, 2) = %q, %v; want %q", 2*n, got, err, want)
			}

			// A retry of the crashed request reports its turn; the next
			// request lands after it.
			c, err := s.Commit(ctx, id, testTurn(n))
			if err != nil || c.N != int64(n) || !c.Duplicate {
				t.Errorf("retried Commit(r%d) = %+v, %v; want turn %d, duplicate", n, c, err, n)
			}
			if c, found, err := s.Lookup(ctx, id, fmt.Sprintf("r%d", n)); err != nil || !found || c.N != int64(n) {
				t.Errorf("Lookup(r%d) after the retry = %+v, %v, %v", n, c, found, err)
			}
			c, err = s.Commit(ctx, id, testTurn(n+1))
			if err != nil || c.N != int64(n+1) || c.Duplicate {
				t.Errorf("next Commit = %+v, %v; want turn %d", c, err, n+1)
			}
			w, err = s.Window(ctx, id, 100)
			if got, want := requestIDs(w), wantRequestIDs(1, n+1); err != nil || got != want {
				t.Errorf("final Window = %q, %v; want %q", got, err, want)
			}
		})
	}
}

// TestSeedTurnsMatchesCommit guards the benchmark's bulk seeding: it must
// store exactly what Commit stores.
func TestSeedTurnsMatchesCommit(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	s := newMongoStore(t, ctx, testenv.MongoDB(t))
	committed := events.Identity{Tenant: "seed", User: "u", Conversation: "committed"}
	seeded := events.Identity{Tenant: "seed", User: "u", Conversation: "seeded"}
	var turns []history.Turn
	for i := 1; i <= 5; i++ {
		tr := testTurn(i)
		if i == 3 {
			tr.Status = events.StatusCancelled
		}
		turns = append(turns, tr)
		if _, err := s.Commit(ctx, committed, tr); err != nil {
			t.Fatalf("Commit: %v", err)
		}
	}
	if err := history.SeedTurns(ctx, s, seeded, 1, turns); err != nil {
		t.Fatalf("SeedTurns: %v", err)
	}
	want, err := history.RawDocuments(ctx, s, committed)
	if err != nil {
		t.Fatal(err)
	}
	got, err := history.RawDocuments(ctx, s, seeded)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 6 { // 1 conversation, 5 turns
		t.Fatalf("committed conversation has %d documents, want 6: %v", len(want), want)
	}
	conv := want["conversations/KEY"]
	wantConv := bson.M{
		"tenant": "IDENTITY", "user": "IDENTITY", "conversation": "IDENTITY", "turns": int64(5), "messages": int64(10),
		"created_at": bson.NewDateTimeFromTime(turns[0].CommittedAt),
		"updated_at": bson.NewDateTimeFromTime(turns[4].CommittedAt),
	}
	if !reflect.DeepEqual(conv, wantConv) {
		t.Errorf("conversation document = %v, want %v", conv, wantConv)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("seeded documents differ from committed ones:\n got %v\nwant %v", got, want)
	}
}

func TestNewMongoStore(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	db := testenv.MongoDB(t)
	cfg := history.MongoConfig{Conversations: "c", Turns: "t", Requests: "r"}
	for range 2 {
		if _, err := history.NewMongoStore(ctx, db, cfg); err != nil {
			t.Fatalf("NewMongoStore (indexes must be idempotent): %v", err)
		}
	}
	wantIndexes := map[string][]string{
		"t": {"_id_", "identity_n", "identity_request_id", "identity_seq"},
		"c": {"_id_", "tenant_user_updated_at"},
	}
	for coll, want := range wantIndexes {
		specs, err := db.Collection(coll).Indexes().ListSpecifications(ctx)
		if err != nil {
			t.Fatalf("list indexes of %s: %v", coll, err)
		}
		var got []string
		for _, sp := range specs {
			got = append(got, sp.Name)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("indexes of %s = %v, want %v", coll, got, want)
		}
	}
	if _, err := history.NewMongoStore(ctx, nil, history.MongoConfig{}); err == nil {
		t.Errorf("NewMongoStore(nil database) succeeded")
	}
}

func TestMongoConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   history.MongoConfig
		wants []string // substrings of the error; none: valid
	}{
		{"The zero config is valid.", history.MongoConfig{}, nil},
		{"Custom collection names are valid.", history.MongoConfig{Conversations: "a", Turns: "b", Requests: "c"}, nil},
		{"A collection named twice is invalid.", history.MongoConfig{Turns: "requests"}, []string{"distinct"}},
		{"The smallest settings are valid.", history.MongoConfig{GroupCommitBatch: 1, GroupCommitFlushes: 1, GroupCommitTimeout: time.Nanosecond, CommitAttempts: 1}, nil},
		{"Every problem is reported at once.", history.MongoConfig{GroupCommitBatch: -1, CommitAttempts: -2},
			[]string{"group commit batch -1", "commit attempts -2"}},
	}
	for _, tc := range tests {
		err := tc.cfg.Validate()
		if (err == nil) != (len(tc.wants) == 0) {
			t.Errorf("%s Validate() = %v", tc.name, err)
			continue
		}
		for _, w := range tc.wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s Validate() = %v, want it to mention %q", tc.name, err, w)
			}
		}
	}
}

// BenchmarkWindow reads a 20-message window of a short and of a very long
// conversation, among 200,000 messages of other conversations, on embedded
// FerretDB: the two must cost the same (the window is one indexed range
// read, which the vendored FerretDB pushes down to SQLite).
func BenchmarkWindow(b *testing.B) {
	ctx := testenv.Context(b, 30*time.Minute)
	s := newMongoStore(b, ctx, testenv.MongoDB(b))
	seed := func(id events.Identity, messages int) {
		b.Helper()
		turns := make([]history.Turn, messages/2)
		for i := range turns {
			turns[i] = testTurn(i + 1)
			turns[i].User = fmt.Sprintf("user message %d of %s, of an ordinary length for a chat", i+1, id.Conversation)
			turns[i].Answer = fmt.Sprintf("assistant answer %d of %s, a little longer than the question was", i+1, id.Conversation)
		}
		if err := history.SeedTurns(ctx, s, id, 1, turns); err != nil {
			b.Fatalf("seed %s: %v", id, err)
		}
	}
	start := time.Now()
	for i := range 100 {
		seed(events.Identity{Tenant: "bench", User: fmt.Sprintf("u%d", i), Conversation: "other"}, 2000)
	}
	sizes := []int{100, 100_000}
	for _, n := range sizes {
		seed(events.Identity{Tenant: "bench", User: "reader", Conversation: fmt.Sprintf("m%d", n)}, n)
	}
	b.Logf("seeded %d messages in %v", 200_000+100+100_000, time.Since(start).Round(time.Millisecond))

	for _, n := range sizes {
		id := events.Identity{Tenant: "bench", User: "reader", Conversation: fmt.Sprintf("m%d", n)}
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			for b.Loop() {
				msgs, err := s.Window(ctx, id, 20)
				if err != nil {
					b.Fatal(err)
				}
				if len(msgs) != 20 || msgs[19].Seq != int64(n) {
					b.Fatalf("window of %d messages ends at seq %d", len(msgs), msgs[len(msgs)-1].Seq)
				}
			}
		})
	}
}

// TestMongoStoreReadsWhatOlderVersionsWrote covers a store written before
// the four-command protocol, which also kept a request document for every
// committed turn (and lagging conversation documents): those turns stay
// decided, duplicates are recognised, and new turns follow them.
func TestMongoStoreReadsWhatOlderVersionsWrote(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	s := newMongoStore(t, ctx, testenv.MongoDB(t))
	id := events.Identity{Tenant: "legacy", User: "u", Conversation: "c"}
	at := func(off int64) *history.Source {
		return &history.Source{Topic: "requests", Partition: 0, Offset: off, Time: time.Unix(off, 0)}
	}
	for i := 1; i <= 3; i++ {
		tr := testTurn(i)
		tr.Source = at(int64(i))
		if _, err := s.Commit(ctx, id, tr); err != nil {
			t.Fatal(err)
		}
		if err := history.WriteLegacyRequest(ctx, s, id, int64(i), tr.RequestID, tr.Status, tr.CommittedAt); err != nil {
			t.Fatal(err)
		}
	}
	if err := history.SetConversationTurns(ctx, s, id, 1); err != nil {
		t.Fatal(err)
	}
	if c, found, err := s.Lookup(ctx, id, "r2"); err != nil || !found || c != (history.Committed{N: 2, Status: events.StatusComplete}) {
		t.Fatalf("Lookup(r2) = %+v, %v, %v", c, found, err)
	}
	p := history.Begin(s, id, "r1", "q1", time.Now())
	p.SetSource(*at(1))
	if st, err := p.Start(ctx, 20); err != nil || !st.Decided || st.Committed.N != 1 {
		t.Fatalf("Start of a redelivered r1 = %+v, %v", st, err)
	}
	if c, err := s.Commit(ctx, id, testTurn(2)); err != nil || c != (history.Committed{N: 2, Status: events.StatusComplete, Duplicate: true}) {
		t.Fatalf("Commit(r2) again = %+v, %v", c, err)
	}
	if c, err := s.RecordOutcome(ctx, id, "r3", events.StatusFailed); err != nil || c != (history.Committed{N: 3, Status: events.StatusComplete, Duplicate: true}) {
		t.Fatalf("RecordOutcome(r3) = %+v, %v", c, err)
	}
	p = history.Begin(s, id, "r4", "q4", time.Now())
	p.SetSource(*at(4))
	st, err := p.Start(ctx, 20)
	if err != nil || st.Decided || st.Cancelled || len(st.Window) != 7 {
		t.Fatalf("Start of r4 = %+v, %v; want the 6 messages and the pending one", st, err)
	}
	if c, err := p.Commit(ctx, "a4", "echo", events.StatusComplete, time.Now()); err != nil || c.N != 4 || c.Duplicate {
		t.Fatalf("Commit(r4) = %+v, %v", c, err)
	}
	page, err := s.Conversations(ctx, "legacy", "u", history.ConversationCursor{}, 10)
	if err != nil || len(page.Conversations) != 1 || page.Conversations[0].Messages != 8 {
		t.Fatalf("Conversations = %+v, %v; want one with 8 messages", page, err)
	}
}

// insertVersion1Turns writes turns 1 … count of id as the store wrote them
// before turns had parts (format version 1: no "v", no "seq", the one
// assistant message in "assistant"), with the conversation document of
// that version (no "messages"), straight through the driver.
func insertVersion1Turns(t *testing.T, ctx context.Context, db *mongo.Database, id events.Identity, count int) {
	t.Helper()
	var docs []any
	var last time.Time
	for i := 1; i <= count; i++ {
		tr := testTurn(i)
		last = tr.CommittedAt
		docs = append(docs, bson.D{
			{Key: "_id", Value: fmt.Sprintf("%s#%012d", id.Key(), i)},
			{Key: "tenant", Value: id.Tenant}, {Key: "user", Value: id.User}, {Key: "conversation", Value: id.Conversation},
			{Key: "n", Value: int64(i)},
			{Key: "request_id", Value: tr.RequestID},
			{Key: "user_message", Value: bson.D{{Key: "content", Value: tr.User}, {Key: "created_at", Value: tr.UserAt}}},
			{Key: "assistant", Value: bson.D{
				{Key: "content", Value: tr.Answer}, {Key: "agent", Value: tr.Agent},
				{Key: "status", Value: string(tr.Status)}, {Key: "created_at", Value: tr.CommittedAt},
			}},
		})
	}
	if _, err := db.Collection("turns").InsertMany(ctx, docs); err != nil {
		t.Fatalf("insert version 1 turns: %v", err)
	}
	if _, err := db.Collection("conversations").InsertOne(ctx, bson.D{
		{Key: "_id", Value: id.Key()},
		{Key: "tenant", Value: id.Tenant}, {Key: "user", Value: id.User}, {Key: "conversation", Value: id.Conversation},
		{Key: "turns", Value: int64(count)}, {Key: "created_at", Value: testTurn(1).CommittedAt}, {Key: "updated_at", Value: last},
	}); err != nil {
		t.Fatalf("insert version 1 conversation: %v", err)
	}
}

// TestMongoStoreReadsVersion1TurnsBeforeVersion2Ones covers a
// conversation whose first turns were written before parts (format
// version 1) and whose later turns have several parts: every window and
// every page, at every boundary, counts seqs 1, 2, 3 … across both, and
// the listing counts every message.
func TestMongoStoreReadsVersion1TurnsBeforeVersion2Ones(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	db := testenv.MongoDB(t)
	s := newMongoStore(t, ctx, db)
	id := events.Identity{Tenant: "v1", User: "u", Conversation: "c"}
	insertVersion1Turns(t, ctx, db, id, 3) // messages 1 … 6

	if page, err := s.Conversations(ctx, id.Tenant, id.User, history.ConversationCursor{}, 10); err != nil ||
		len(page.Conversations) != 1 || page.Conversations[0].Messages != 6 {
		t.Fatalf("Conversations of version 1 documents = %+v, %v; want 6 messages", page, err)
	}
	// New turns: through Pending.Start (the worker's path) and plain Commit.
	p := history.Begin(s, id, "r4", "q4", time.Now())
	st, err := p.Start(ctx, 20)
	if err != nil || st.Decided || len(st.Window) != 7 {
		t.Fatalf("Start after version 1 turns = %+v, %v; want their 6 messages and the pending one", st, err)
	}
	if c, err := p.CommitAnswer(ctx, history.Answer{Parts: []history.Part{{Agent: "desk", Text: "d4"}, {Agent: "orders", Text: "o4"}, {Agent: "desk", Text: "D4"}},
		Status: events.StatusComplete, At: time.Now()}); err != nil || c.N != 4 {
		t.Fatalf("CommitAnswer(r4) = %+v, %v", c, err)
	}
	r5 := testTurn(5)
	if c, err := s.Commit(ctx, id, r5); err != nil || c.N != 5 {
		t.Fatalf("Commit(r5) = %+v, %v", c, err)
	}
	r6 := testTurn(6)
	r6.Answer, r6.Agent, r6.Parts = "", "", []history.Part{{Agent: "orders", Text: "o6"}, {Agent: "desk", Text: "d6"}}
	if c, err := s.Commit(ctx, id, r6); err != nil || c.N != 6 {
		t.Fatalf("Commit(r6) = %+v, %v", c, err)
	}
	// 1:q1 2:a1 3:q2 4:a2 5:q3 6:a3 | 7:q4 8:d4 9:o4 10:D4 11:q5 12:a5 13:q6 14:o6 15:d6
	want := []string{"q1", "a1", "q2", "a2", "q3", "a3", "q4", "d4", "o4", "D4", "q5", "a5", "q6", "o6", "d6"}
	contents := func(msgs []history.Message) string {
		var b []string
		for _, m := range msgs {
			b = append(b, fmt.Sprintf("%d:%s", m.Seq, m.Content))
		}
		return strings.Join(b, " ")
	}
	wantRange := func(lo, hi int64) string {
		var b []string
		for seq := lo; seq <= hi; seq++ {
			b = append(b, fmt.Sprintf("%d:%s", seq, want[seq-1]))
		}
		return strings.Join(b, " ")
	}
	total := int64(len(want))
	for n := 1; n <= len(want)+1; n++ {
		w, err := s.Window(ctx, id, n)
		if got, wantW := contents(w), wantRange(max(1, total-int64(n)+1), total); err != nil || got != wantW {
			t.Errorf("Window(%d) = %q, %v; want %q", n, got, err, wantW)
		}
	}
	for before := int64(1); before <= total+1; before++ {
		for limit := 1; limit <= len(want); limit++ {
			page, err := s.List(ctx, id, before, limit)
			hi := before - 1
			lo := max(1, hi-int64(limit)+1)
			if got, wantP := contents(page.Messages), wantRange(lo, hi); err != nil || got != wantP {
				t.Fatalf("List(before %d, limit %d) = %q, %v; want %q", before, limit, got, err, wantP)
			}
		}
	}
	all, err := s.List(ctx, id, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if m := all.Messages[8]; m.Agent != "orders" || m.Content != "o4" || m.RequestID != "r4" {
		t.Errorf("message 9 = %+v, want orders' part of r4", m)
	}
	page, err := s.Conversations(ctx, id.Tenant, id.User, history.ConversationCursor{}, 10)
	if err != nil || len(page.Conversations) != 1 || page.Conversations[0].Messages != total {
		t.Fatalf("Conversations = %+v, %v; want %d messages", page, err, total)
	}
	// A redelivery of a version 1 turn is still a duplicate of it.
	if c, err := s.Commit(ctx, id, testTurn(2)); err != nil || c != (history.Committed{N: 2, Status: events.StatusComplete, Duplicate: true}) {
		t.Errorf("Commit(r2) again = %+v, %v", c, err)
	}
}

// prevTurnDoc is a turn document as the release before parts read it:
// every turn one user message and one assistant message, seqs 2n-1 and
// 2n, the answer in "assistant" (a version 2 document reads there as an
// empty answer).
type prevTurnDoc struct {
	N           int64  `bson:"n"`
	RequestID   string `bson:"request_id"`
	UserMessage struct {
		Content string `bson:"content"`
	} `bson:"user_message"`
	Assistant struct {
		Content string `bson:"content"`
		Agent   string `bson:"agent"`
		Status  string `bson:"status"`
	} `bson:"assistant"`
}

// readAsPreviousRelease reads turns 1 … count of id straight through the
// driver, as the release before parts did: "seq:role:agent:content" per
// message, or an error for a turn missing or out of place.
func readAsPreviousRelease(t *testing.T, ctx context.Context, db *mongo.Database, id events.Identity, count int) []string {
	t.Helper()
	var out []string
	for n := int64(1); n <= int64(count); n++ {
		var raw bson.M
		if err := db.Collection("turns").FindOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("%s#%012d", id.Key(), n)}}).Decode(&raw); err != nil {
			t.Fatalf("read turn %d: %v", n, err)
		}
		for _, f := range []string{"v", "seq", "parts"} {
			if _, ok := raw[f]; ok {
				t.Errorf("turn %d has %q: a version 2 document, which the release before parts misreads", n, f)
			}
		}
		b, err := bson.Marshal(raw)
		if err != nil {
			t.Fatal(err)
		}
		var d prevTurnDoc
		if err := bson.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		if d.N != n {
			t.Fatalf("turn %d has n %d", n, d.N)
		}
		out = append(out, fmt.Sprintf("%d:user::%s", 2*n-1, d.UserMessage.Content),
			fmt.Sprintf("%d:assistant:%s:%s", 2*n, d.Assistant.Agent, d.Assistant.Content))
	}
	return out
}

func messageLines(msgs []history.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, fmt.Sprintf("%d:%s:%s:%s", m.Seq, m.Role, m.Agent, m.Content))
	}
	return out
}

// TestMongoStoreKeepV1WritesWhatTheReleaseBeforePartsReads is a rolling
// upgrade's first phase (docs/deploy.md): this release's workers commit
// with KeepV1 beside workers of the release before parts. What they write
// is read right by both releases, turn after turn from either.
func TestMongoStoreKeepV1WritesWhatTheReleaseBeforePartsReads(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	db := testenv.MongoDB(t)
	s := newMongoStore(t, ctx, db)
	id := events.Identity{Tenant: "upgrade", User: "u", Conversation: "phase-1"}
	parts := func(i int, agents ...string) []history.Part {
		var out []history.Part
		for _, a := range agents {
			out = append(out, history.Part{Agent: a, Text: fmt.Sprintf("%s of r%d. ", a, i)})
		}
		return out
	}

	// Turn 1 through Start (the worker's path), turn 2 by Commit.
	p := history.Begin(s, id, "r1", "q1", time.Now())
	p.SetKeepV1(true)
	if st, err := p.Start(ctx, 20); err != nil || st.Decided {
		t.Fatalf("Start(r1) = %+v, %v", st, err)
	}
	if c, err := p.CommitAnswer(ctx, history.Answer{Parts: parts(1, "desk", "orders"), Status: events.StatusComplete, At: time.Now()}); err != nil || c.N != 1 {
		t.Fatalf("CommitAnswer(r1) = %+v, %v", c, err)
	}
	r2 := testTurn(2)
	r2.Answer, r2.Agent, r2.Parts, r2.KeepV1 = "", "", parts(2, "orders", "desk", "orders"), true
	if c, err := s.Commit(ctx, id, r2); err != nil || c.N != 2 {
		t.Fatalf("Commit(r2) = %+v, %v", c, err)
	}
	want := []string{
		"1:user::q1", "2:assistant:orders:desk of r1. orders of r1. ",
		"3:user::q2", "4:assistant:orders:orders of r2. desk of r2. orders of r2. ",
	}
	if got := readAsPreviousRelease(t, ctx, db, id, 2); !reflect.DeepEqual(got, want) {
		t.Fatalf("the release before parts reads %q, want %q", got, want)
	}
	if page, err := s.List(ctx, id, 0, 50); err != nil || !reflect.DeepEqual(messageLines(page.Messages), want) {
		t.Fatalf("List = %q, %v; want %q", messageLines(page.Messages), err, want)
	}

	// A worker of the release before parts commits turn 3: its document,
	// and its roll-forward, which counts turns and not messages.
	r3 := testTurn(3)
	if _, err := db.Collection("turns").InsertOne(ctx, bson.D{
		{Key: "_id", Value: fmt.Sprintf("%s#%012d", id.Key(), 3)},
		{Key: "tenant", Value: id.Tenant}, {Key: "user", Value: id.User}, {Key: "conversation", Value: id.Conversation},
		{Key: "n", Value: int64(3)}, {Key: "request_id", Value: r3.RequestID},
		{Key: "user_message", Value: bson.D{{Key: "content", Value: r3.User}, {Key: "created_at", Value: r3.UserAt}}},
		{Key: "assistant", Value: bson.D{{Key: "content", Value: r3.Answer}, {Key: "agent", Value: r3.Agent},
			{Key: "status", Value: string(r3.Status)}, {Key: "created_at", Value: r3.CommittedAt}}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("conversations").UpdateOne(ctx, bson.D{{Key: "_id", Value: id.Key()}},
		bson.D{{Key: "$max", Value: bson.D{{Key: "turns", Value: int64(3)}}}}); err != nil {
		t.Fatal(err)
	}
	if page, err := s.Conversations(ctx, id.Tenant, id.User, history.ConversationCursor{}, 10); err != nil ||
		len(page.Conversations) != 1 || page.Conversations[0].Messages != 6 {
		t.Fatalf("Conversations after the older release's turn 3 = %+v, %v; want 6 messages", page, err)
	}

	// This release's turn 4 follows it in version 1.
	p = history.Begin(s, id, "r4", "q4", time.Now())
	p.SetKeepV1(true)
	if st, err := p.Start(ctx, 20); err != nil || st.Decided || len(st.Window) != 7 {
		t.Fatalf("Start(r4) = %+v, %v; want 6 messages and the pending one", st, err)
	}
	if c, err := p.CommitAnswer(ctx, history.Answer{Parts: parts(4, "desk", "orders"), Status: events.StatusComplete, At: time.Now()}); err != nil || c.N != 4 {
		t.Fatalf("CommitAnswer(r4) = %+v, %v", c, err)
	}
	want = append(want, "5:user::q3", "6:assistant:echo:a3", "7:user::q4", "8:assistant:orders:desk of r4. orders of r4. ")
	if got := readAsPreviousRelease(t, ctx, db, id, 4); !reflect.DeepEqual(got, want) {
		t.Fatalf("the release before parts reads %q, want %q", got, want)
	}
	if page, err := s.List(ctx, id, 0, 50); err != nil || !reflect.DeepEqual(messageLines(page.Messages), want) {
		t.Fatalf("List = %q, %v; want %q", messageLines(page.Messages), err, want)
	}
	if page, err := s.Conversations(ctx, id.Tenant, id.User, history.ConversationCursor{}, 10); err != nil ||
		len(page.Conversations) != 1 || page.Conversations[0].Messages != 8 {
		t.Fatalf("Conversations = %+v, %v; want 8 messages", page, err)
	}
}

// TestMongoStoreKeepV1GoesOnInVersion2AfterAVersion2Turn: a conversation
// whose last turn is of version 2 stays there (the upgrade's second
// phase has begun for it), and without KeepV1 a new conversation starts
// in version 2.
func TestMongoStoreKeepV1GoesOnInVersion2AfterAVersion2Turn(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	db := testenv.MongoDB(t)
	s := newMongoStore(t, ctx, db)
	id := events.Identity{Tenant: "upgrade", User: "u", Conversation: "phase-2"}
	steps := []struct {
		name    string
		keepV1  bool
		through bool
	}{
		{"Without KeepV1 a new conversation's turn is version 2.", false, false},
		{"With KeepV1, through Start, a turn after a version 2 one is version 2.", true, true},
		{"With KeepV1 a turn after a version 2 one is version 2.", true, false},
	}
	seq := int64(1)
	for i, st := range steps {
		n := int64(i + 1)
		tr := testTurn(i + 1)
		tr.Answer, tr.Agent = "", ""
		tr.Parts = []history.Part{{Agent: "desk", Text: "d"}, {Agent: "orders", Text: "o"}}
		tr.KeepV1 = st.keepV1
		var c history.Committed
		var err error
		if st.through {
			p := history.Begin(s, id, tr.RequestID, tr.User, tr.UserAt)
			p.SetKeepV1(st.keepV1)
			if _, err := p.Start(ctx, 20); err != nil {
				t.Fatal(err)
			}
			c, err = p.CommitAnswer(ctx, history.Answer{Parts: tr.Parts, Status: tr.Status, At: tr.CommittedAt})
		} else {
			c, err = s.Commit(ctx, id, tr)
		}
		if err != nil || c.N != n {
			t.Fatalf("%s Commit = %+v, %v", st.name, c, err)
		}
		var raw bson.M
		if err := db.Collection("turns").FindOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("%s#%012d", id.Key(), n)}}).Decode(&raw); err != nil {
			t.Fatal(err)
		}
		if raw["v"] != int32(2) || raw["seq"] != seq {
			t.Errorf("%s Stored v %v, seq %v; want version 2 at seq %d", st.name, raw["v"], raw["seq"], seq)
		}
		seq += 3
	}
	page, err := s.List(ctx, id, 0, 50)
	if err != nil || len(page.Messages) != 9 {
		t.Fatalf("List = %q, %v; want 9 messages", messageLines(page.Messages), err)
	}
}
