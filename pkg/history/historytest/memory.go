package historytest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// RunMemory runs the conformance suite of history.MemoryService.
// newMemory is called once per subtest, from that subtest's goroutine;
// subtests run in parallel, each under its own random tenant, so the
// services may share one backing store.
//
// The suite asserts what every backend must hold: scoping to (tenant,
// user), idempotent adds, deletes, limits, and a ranking property that
// MongoDB's textScore, the term scan and a vector store all have — a
// memory holding every word of the query ranks above one, of the same
// length, holding only one. It searches whole words only: stemming and
// stop words differ between backends (docs/api.md "Memory").
func RunMemory(t *testing.T, newMemory func(t *testing.T) history.MemoryService) {
	tests := []struct {
		name string
		run  func(t *testing.T, ctx context.Context, s history.MemoryService)
	}{
		{"An added memory is found by a word of its question or of its answer, every field round-tripping", testMemoryFound},
		{"A memory holding every word of the query ranks above one holding one of them, and one holding none is not found", testMemoryRanking},
		{"Adding a turn's memory again adds nothing, even with another text, even concurrently", testMemoryIdempotent},
		{"Another user or tenant, with the same conversation names, neither finds nor deletes a user's memories", testMemoryIdentity},
		{"Forged names (../, %2F, NUL, over-long, empty) are invalid for Add, Search and Delete, and change nothing", testMemoryForged},
		{"Deleting one conversation's memories keeps the user's others; deleting all of them forgets everything of that user only", testMemoryDelete},
		{"Search returns at most limit hits, the limit clamped to 1 … MaxMemoryResults", testMemoryLimit},
		{"A query without a searchable word finds nothing; an over-long or non-UTF-8 query is invalid", testMemoryQueries},
		{"Memories without text or with a turn below 1 are invalid and stored nowhere", testMemoryInvalidAdd},
		{"Over-long texts are kept cut to MaxMemoryTextBytes at a rune boundary", testMemoryCut},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			t.Cleanup(cancel)
			tc.run(t, ctx, newMemory(t))
		})
	}
}

func memoryOf(id events.Identity, turn int64, question, answer string) history.Memory {
	return history.Memory{Identity: id, Turn: turn, RequestID: fmt.Sprintf("r%d", turn), Question: question, Answer: answer, At: base.Add(time.Duration(turn) * time.Minute)}
}

func addMemory(t *testing.T, ctx context.Context, s history.MemoryService, m history.Memory) {
	t.Helper()
	added, err := s.Add(ctx, m)
	if err != nil || !added {
		t.Fatalf("Add(%s #%d) = %v, %v; want true, nil", m.Identity.Key(), m.Turn, added, err)
	}
}

// found is the hits of a search as "conversation#turn" in their order.
func found(t *testing.T, ctx context.Context, s history.MemoryService, tenant, user, query string, limit int) string {
	t.Helper()
	hits, err := s.Search(ctx, tenant, user, query, limit)
	if err != nil {
		t.Fatalf("Search(%q, %q, %q) = %v", tenant, user, query, err)
	}
	out := make([]string, len(hits))
	for i, h := range hits {
		if h.Identity.Tenant != tenant || h.Identity.User != user {
			t.Fatalf("Search(%q, %q) returned a memory of %s", tenant, user, h.Identity.Key())
		}
		out[i] = fmt.Sprintf("%s#%d", h.Identity.Conversation, h.Turn)
	}
	return strings.Join(out, " ")
}

func testMemoryFound(t *testing.T, ctx context.Context, s history.MemoryService) {
	id := newIdentity(t, "trip")
	want := memoryOf(id, 3, "My sister lives in Lisbon 🇵🇹", "Noted: {\"$ne\": null} Lisbon\nsecond line")
	addMemory(t, ctx, s, want)
	for _, q := range []string{"Lisbon", "sister", "LISBON sister", "null"} {
		hits, err := s.Search(ctx, id.Tenant, id.User, q, 5)
		if err != nil || len(hits) != 1 {
			t.Fatalf("Search(%q) = %+v, %v; want one hit", q, hits, err)
		}
		got := hits[0].Memory
		if got != want {
			t.Fatalf("Search(%q) = %+v; want %+v", q, got, want)
		}
		if hits[0].Score <= 0 {
			t.Fatalf("Search(%q) score %v; want > 0", q, hits[0].Score)
		}
	}
	if got := found(t, ctx, s, id.Tenant, id.User, "madrid", 5); got != "" {
		t.Fatalf("Search(madrid) = %q; want nothing", got)
	}
}

func testMemoryRanking(t *testing.T, ctx context.Context, s history.MemoryService) {
	id := newIdentity(t, "c")
	// Same length, same shape: only the words differ.
	addMemory(t, ctx, s, memoryOf(id, 1, "piano lessons start monday", "fine"))
	addMemory(t, ctx, s, memoryOf(id, 2, "violin lessons start monday", "fine"))
	addMemory(t, ctx, s, memoryOf(id, 3, "violin concert starts friday", "fine"))
	addMemory(t, ctx, s, memoryOf(id, 4, "garden party starts sunday", "fine"))
	if got, want := found(t, ctx, s, id.Tenant, id.User, "violin concert", 10), "c#3 c#2"; got != want {
		t.Fatalf("Search(violin concert) = %q; want %q", got, want)
	}
	// Ties (one word each) go to the newest.
	if got, want := found(t, ctx, s, id.Tenant, id.User, "monday", 10), "c#2 c#1"; got != want {
		t.Fatalf("Search(monday) = %q; want %q", got, want)
	}
}

func testMemoryIdempotent(t *testing.T, ctx context.Context, s history.MemoryService) {
	id := newIdentity(t, "c")
	addMemory(t, ctx, s, memoryOf(id, 1, "the code word is pelican", "ok"))
	again := memoryOf(id, 1, "the code word is flamingo", "ok")
	if added, err := s.Add(ctx, again); err != nil || added {
		t.Fatalf("Add again = %v, %v; want false, nil", added, err)
	}
	if got := found(t, ctx, s, id.Tenant, id.User, "flamingo", 5); got != "" {
		t.Fatalf("the second add's text was stored: %q", got)
	}
	if got := found(t, ctx, s, id.Tenant, id.User, "pelican", 5); got != "c#1" {
		t.Fatalf("Search(pelican) = %q; want c#1", got)
	}
	// Concurrent adds of one new key: exactly one adds it.
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		added int
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := s.Add(ctx, memoryOf(id, 2, "the code word is heron", "ok"))
			if err != nil {
				t.Errorf("concurrent Add = %v", err)
			}
			if ok {
				mu.Lock()
				added++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if added != 1 {
		t.Fatalf("%d concurrent adds of one key added; want 1", added)
	}
	if got := found(t, ctx, s, id.Tenant, id.User, "heron", 5); got != "c#2" {
		t.Fatalf("Search(heron) = %q; want c#2", got)
	}
}

func testMemoryIdentity(t *testing.T, ctx context.Context, s history.MemoryService) {
	id := newIdentity(t, "c")
	addMemory(t, ctx, s, memoryOf(id, 1, "my locker code is zebra", "ok"))
	others := []events.Identity{
		{Tenant: id.Tenant, User: "bob", Conversation: "c"},
		{Tenant: id.Tenant + "x", User: id.User, Conversation: "c"},
		{Tenant: "t-" + random(t), User: id.User, Conversation: "c"},
		{Tenant: id.Tenant, User: id.User + "-2", Conversation: "c"},
	}
	for _, o := range others {
		// Each other identity has a memory of its own with the same word.
		addMemory(t, ctx, s, memoryOf(o, 1, "their locker code is zebra too", "ok"))
	}
	all := append([]events.Identity{id}, others...)
	for _, o := range all {
		if got := found(t, ctx, s, o.Tenant, o.User, "zebra", 50); got != "c#1" {
			t.Fatalf("Search as %s/%s = %q; want only its own c#1", o.Tenant, o.User, got)
		}
	}
	for _, o := range others {
		if n, err := s.Delete(ctx, o.Tenant, o.User, ""); err != nil || n != 1 {
			t.Fatalf("Delete all as %s/%s = %d, %v; want its own 1", o.Tenant, o.User, n, err)
		}
		if n, err := s.Delete(ctx, o.Tenant, o.User, "c"); err != nil || n != 0 {
			t.Fatalf("Delete c as %s/%s = %d, %v; want 0", o.Tenant, o.User, n, err)
		}
	}
	if got := found(t, ctx, s, id.Tenant, id.User, "zebra", 50); got != "c#1" {
		t.Fatalf("after the others' deletes Search = %q; want c#1", got)
	}
}

// forgedNames are names no identity may have (".." alone is a valid
// name: names are never paths).
var forgedNames = []string{"", "../alice", "a/b", "a%2Fb", "a\x00b", "a b", strings.Repeat("a", events.MaxIDLen+1), "é"}

func testMemoryForged(t *testing.T, ctx context.Context, s history.MemoryService) {
	id := newIdentity(t, "c")
	addMemory(t, ctx, s, memoryOf(id, 1, "the secret is marmalade", "ok"))
	for _, f := range forgedNames {
		for _, who := range [][2]string{{f, id.User}, {id.Tenant, f}} {
			if _, err := s.Search(ctx, who[0], who[1], "marmalade", 5); !errors.Is(err, events.ErrInvalid) {
				t.Fatalf("Search(%q, %q) = %v; want ErrInvalid", who[0], who[1], err)
			}
			if _, err := s.Delete(ctx, who[0], who[1], ""); !errors.Is(err, events.ErrInvalid) {
				t.Fatalf("Delete(%q, %q) = %v; want ErrInvalid", who[0], who[1], err)
			}
		}
		if f != "" { // "" is "all of them" for Delete's conversation
			if _, err := s.Delete(ctx, id.Tenant, id.User, f); !errors.Is(err, events.ErrInvalid) {
				t.Fatalf("Delete(conversation %q) = %v; want ErrInvalid", f, err)
			}
		}
		for _, fid := range []events.Identity{
			{Tenant: f, User: id.User, Conversation: "c"}, {Tenant: id.Tenant, User: f, Conversation: "c"}, {Tenant: id.Tenant, User: id.User, Conversation: f},
		} {
			if _, err := s.Add(ctx, memoryOf(fid, 9, "forged marmalade", "ok")); !errors.Is(err, events.ErrInvalid) {
				t.Fatalf("Add(%q) = %v; want ErrInvalid", fid.Key(), err)
			}
		}
	}
	if got := found(t, ctx, s, id.Tenant, id.User, "marmalade", 50); got != "c#1" {
		t.Fatalf("after forged calls Search = %q; want c#1", got)
	}
}

func testMemoryDelete(t *testing.T, ctx context.Context, s history.MemoryService) {
	a := newIdentity(t, "a")
	b := a
	b.Conversation = "b"
	bob := events.Identity{Tenant: a.Tenant, User: "bob", Conversation: "a"}
	addMemory(t, ctx, s, memoryOf(a, 1, "walrus one", "ok"))
	addMemory(t, ctx, s, memoryOf(a, 2, "walrus two", "ok"))
	addMemory(t, ctx, s, memoryOf(b, 1, "walrus three", "ok"))
	addMemory(t, ctx, s, memoryOf(bob, 1, "walrus four", "ok"))
	if n, err := s.Delete(ctx, a.Tenant, a.User, "a"); err != nil || n != 2 {
		t.Fatalf("Delete(a) = %d, %v; want 2", n, err)
	}
	if got := found(t, ctx, s, a.Tenant, a.User, "walrus", 50); got != "b#1" {
		t.Fatalf("after Delete(a) Search = %q; want b#1", got)
	}
	if n, err := s.Delete(ctx, a.Tenant, a.User, "a"); err != nil || n != 0 {
		t.Fatalf("Delete(a) again = %d, %v; want 0", n, err)
	}
	// A deleted turn may be added again (nothing remembers the delete).
	addMemory(t, ctx, s, memoryOf(a, 1, "walrus one", "ok"))
	if n, err := s.Delete(ctx, a.Tenant, a.User, ""); err != nil || n != 2 {
		t.Fatalf("Delete all = %d, %v; want 2", n, err)
	}
	if got := found(t, ctx, s, a.Tenant, a.User, "walrus", 50); got != "" {
		t.Fatalf("after Delete all Search = %q; want nothing", got)
	}
	if got := found(t, ctx, s, bob.Tenant, bob.User, "walrus", 50); got != "a#1" {
		t.Fatalf("bob's Search = %q; want a#1", got)
	}
}

func testMemoryLimit(t *testing.T, ctx context.Context, s history.MemoryService) {
	id := newIdentity(t, "c")
	n := history.MaxMemoryResults + 3
	for i := 1; i <= n; i++ {
		addMemory(t, ctx, s, memoryOf(id, int64(i), "otter", "ok"))
	}
	for _, tc := range []struct{ limit, want int }{{2, 2}, {0, 1}, {-5, 1}, {1000, history.MaxMemoryResults}} {
		hits, err := s.Search(ctx, id.Tenant, id.User, "otter", tc.limit)
		if err != nil || len(hits) != tc.want {
			t.Fatalf("Search(limit %d) = %d hits, %v; want %d", tc.limit, len(hits), err, tc.want)
		}
	}
}

func testMemoryQueries(t *testing.T, ctx context.Context, s history.MemoryService) {
	id := newIdentity(t, "c")
	addMemory(t, ctx, s, memoryOf(id, 1, "the kettle is in the shed", "ok"))
	for _, q := range []string{"", "   ", "?!", "the of"} {
		if got := found(t, ctx, s, id.Tenant, id.User, q, 5); got != "" {
			t.Fatalf("Search(%q) = %q; want nothing", q, got)
		}
	}
	for _, q := range []string{strings.Repeat("kettle ", history.MaxMemoryQueryBytes/7+1), "kettle \xff"} {
		if _, err := s.Search(ctx, id.Tenant, id.User, q, 5); !errors.Is(err, events.ErrInvalid) {
			t.Fatalf("Search(%d bytes) = %v; want ErrInvalid", len(q), err)
		}
	}
}

func testMemoryInvalidAdd(t *testing.T, ctx context.Context, s history.MemoryService) {
	id := newIdentity(t, "c")
	for _, m := range []history.Memory{
		memoryOf(id, 0, "badger", "ok"),
		memoryOf(id, -1, "badger", "ok"),
		memoryOf(id, 1, "", ""),
		memoryOf(id, 1, " \n", "\t"),
		memoryOf(id, 1, "badger \xff", "ok"),
	} {
		if _, err := s.Add(ctx, m); !errors.Is(err, events.ErrInvalid) {
			t.Fatalf("Add(%+v) = %v; want ErrInvalid", m, err)
		}
	}
	if got := found(t, ctx, s, id.Tenant, id.User, "badger", 5); got != "" {
		t.Fatalf("invalid adds stored %q", got)
	}
}

func testMemoryCut(t *testing.T, ctx context.Context, s history.MemoryService) {
	id := newIdentity(t, "c")
	long := "narwhal " + strings.Repeat("é", history.MaxMemoryTextBytes) // 2 bytes a rune
	addMemory(t, ctx, s, memoryOf(id, 1, long, "narwhal"))
	hits, err := s.Search(ctx, id.Tenant, id.User, "narwhal", 5)
	if err != nil || len(hits) != 1 {
		t.Fatalf("Search = %v, %v", hits, err)
	}
	q := hits[0].Question
	if len(q) > history.MaxMemoryTextBytes || len(q) < history.MaxMemoryTextBytes-1 || !utf8.ValidString(q) || !strings.HasPrefix(long, q) {
		t.Fatalf("stored question: %d bytes, valid %v, a prefix %v; want the first ≤ %d bytes", len(q), utf8.ValidString(q), strings.HasPrefix(long, q), history.MaxMemoryTextBytes)
	}
}
