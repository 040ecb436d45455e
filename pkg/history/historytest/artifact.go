package historytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// Artifacts runs the conformance suite of a history.ArtifactService.
// newService is called once per subtest, from that subtest's goroutine,
// and returns a service whose limits are ArtifactLimits{MaxBytes: 1 << 20,
// MaxNames: 3}; subtests run in parallel, each under identities of its
// own, but for the two sweeps' (one sweep, several at once), which run
// alone after them. newStore, when not nil, is the turn store whose
// manifests the suite checks (Turn.Artifacts, history.ManifestReader). A
// service whose Stage writes the content before the save also runs
// ArtifactOrphans.
func Artifacts(t *testing.T, newService func(t *testing.T) history.ArtifactService, newStore func(t *testing.T) history.Store) {
	tests := []struct {
		name string
		run  func(t *testing.T, ctx context.Context, a history.ArtifactService)
	}{
		{"A staged save is invisible until published, then is version 1, and each save is a new version", testArtifactVersions},
		{"Publishing the same tokens again (a redelivered request) makes no second version", testArtifactPublishTwice},
		{"Another tenant, user or conversation can neither list, read, delete nor publish an artifact", testArtifactIsolation},
		{"user: names are shared by the user's conversations and by nobody else", testArtifactUserScope},
		{"Forged names and MIME types are refused and store nothing", testArtifactInvalid},
		{"Content over MaxBytes and a name past MaxNames are refused with ErrArtifactLimit", testArtifactLimits},
		{"Delete removes every version, and a later publish of a deleted save brings nothing back", testArtifactDelete},
		{"Content of several chunks and empty content round-trip byte-exact", testArtifactContent},
		{"Concurrent publishes of one user: name from two conversations take distinct versions", testArtifactConcurrent},
		{"Concurrent publishes of one token (a redelivery racing its first run) make one version, which every caller gets", testArtifactPublishRace},
	}
	t.Run("in parallel", func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				tc.run(t, ctx, newService(t))
			})
		}
	})
	// The sweep is the service's, every identity's: it runs alone.
	t.Run("Sweep drops the staged saves never published and keeps the published ones", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		testArtifactSweep(t, ctx, newService(t))
	})
	t.Run("Several sweeps at once (worker replicas) drop each staged save once and keep the published ones", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		testArtifactSweepRace(t, ctx, newService(t))
	})
	if newStore != nil {
		t.Run("A turn keeps its artifact manifest, and a duplicate commit keeps the first one's", func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			testArtifactManifest(t, ctx, newStore(t))
		})
	}
}

func stage(t *testing.T, ctx context.Context, a history.ArtifactService, id events.Identity, name, mime string, data []byte) string {
	t.Helper()
	tok, err := a.Stage(ctx, id, history.ArtifactSave{Name: name, MIME: mime, Data: data})
	if err != nil {
		t.Fatalf("Stage(%s): %v", name, err)
	}
	return tok
}

func publish(t *testing.T, ctx context.Context, a history.ArtifactService, id events.Identity, tokens ...string) []history.Artifact {
	t.Helper()
	out, err := a.Publish(ctx, id, tokens)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	return out
}

// expectArtifact opens name at version and checks its version and bytes.
func expectArtifact(t *testing.T, ctx context.Context, a history.ArtifactService, id events.Identity, name string, version, wantVersion int, want []byte) history.Artifact {
	t.Helper()
	got, data, err := a.OpenArtifact(ctx, id, name, version)
	if err != nil {
		t.Fatalf("OpenArtifact(%s, %d): %v", name, version, err)
	}
	if got.Version != wantVersion || !bytes.Equal(data, want) || got.Size != int64(len(want)) || got.Name != name {
		t.Fatalf("OpenArtifact(%s, %d) = %+v with %d bytes, want version %d with %q", name, version, got, len(data), wantVersion, truncateBytes(want))
	}
	return got
}

func truncateBytes(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

func expectArtifactNotFound(t *testing.T, ctx context.Context, a history.ArtifactService, id events.Identity, name string, version int) {
	t.Helper()
	if got, _, err := a.OpenArtifact(ctx, id, name, version); !errors.Is(err, history.ErrNotFound) {
		t.Fatalf("OpenArtifact(%s, %s, %d) = %+v, %v; want ErrNotFound", id, name, version, got, err)
	}
}

func listNames(t *testing.T, ctx context.Context, a history.ArtifactService, id events.Identity) string {
	t.Helper()
	list, err := a.ListArtifacts(ctx, id)
	if err != nil {
		t.Fatalf("ListArtifacts: %v", err)
	}
	var b strings.Builder
	for _, x := range list {
		fmt.Fprintf(&b, "%s@%d ", x.Name, x.Version)
	}
	return strings.TrimSpace(b.String())
}

func testArtifactVersions(t *testing.T, ctx context.Context, a history.ArtifactService) {
	id := newIdentity(t, "c1")
	tok := stage(t, ctx, a, id, "chart.png", "image/png", []byte("v1"))
	expectArtifactNotFound(t, ctx, a, id, "chart.png", 0)
	if got := listNames(t, ctx, a, id); got != "" {
		t.Fatalf("list before publish = %q, want empty", got)
	}
	pub := publish(t, ctx, a, id, tok)
	if len(pub) != 1 || pub[0].Version != 1 || pub[0].MIME != "image/png" || pub[0].Size != 2 || pub[0].Token != tok {
		t.Fatalf("Publish = %+v, want version 1 of 2 bytes image/png", pub)
	}
	tok2 := stage(t, ctx, a, id, "chart.png", "image/png", []byte("version two"))
	expectArtifact(t, ctx, a, id, "chart.png", 0, 1, []byte("v1"))
	publish(t, ctx, a, id, tok2)
	got := expectArtifact(t, ctx, a, id, "chart.png", 0, 2, []byte("version two"))
	if got.Token == tok || got.MIME != "image/png" {
		t.Fatalf("version 2 = %+v", got)
	}
	expectArtifact(t, ctx, a, id, "chart.png", 1, 1, []byte("v1"))
	expectArtifact(t, ctx, a, id, "chart.png", 2, 2, []byte("version two"))
	expectArtifactNotFound(t, ctx, a, id, "chart.png", 3)
	if got := listNames(t, ctx, a, id); got != "chart.png@2" {
		t.Fatalf("list = %q, want chart.png@2", got)
	}
}

func testArtifactPublishTwice(t *testing.T, ctx context.Context, a history.ArtifactService) {
	id := newIdentity(t, "c1")
	t1 := stage(t, ctx, a, id, "a.txt", "text/plain", []byte("one"))
	t2 := stage(t, ctx, a, id, "b.txt", "text/plain", []byte("two"))
	first := publish(t, ctx, a, id, t1, t2)
	again := publish(t, ctx, a, id, t1, t2)
	if len(first) != 2 || len(again) != 2 || first[0].Version != 1 || again[0].Version != 1 || again[1].Version != 1 {
		t.Fatalf("Publish twice = %+v then %+v, want version 1 each time", first, again)
	}
	expectArtifact(t, ctx, a, id, "a.txt", 0, 1, []byte("one"))
	expectArtifactNotFound(t, ctx, a, id, "a.txt", 2)
	if got := listNames(t, ctx, a, id); got != "a.txt@1 b.txt@1" {
		t.Fatalf("list = %q", got)
	}
}

// others is every identity that differs from id in one part.
func others(id events.Identity) []events.Identity {
	return []events.Identity{
		{Tenant: id.Tenant + "x", User: id.User, Conversation: id.Conversation},
		{Tenant: id.Tenant, User: id.User + "x", Conversation: id.Conversation},
		{Tenant: id.Tenant, User: id.User, Conversation: id.Conversation + "x"},
	}
}

func testArtifactIsolation(t *testing.T, ctx context.Context, a history.ArtifactService) {
	id := newIdentity(t, "c1")
	tok := stage(t, ctx, a, id, "secret.txt", "text/plain", []byte("mine"))
	utok := stage(t, ctx, a, id, "user:profile.json", "application/json", []byte(`{"a":1}`))
	for _, o := range others(id) {
		if got := publish(t, ctx, a, o, tok, utok); len(got) != 0 {
			t.Fatalf("Publish by %s of %s's tokens = %+v, want nothing", o, id, got)
		}
	}
	expectArtifactNotFound(t, ctx, a, id, "secret.txt", 0)
	publish(t, ctx, a, id, tok, utok)
	for _, o := range others(id) {
		if o.Conversation != id.Conversation && o.User == id.User && o.Tenant == id.Tenant {
			continue // the user's own other conversation: see testArtifactUserScope
		}
		if got := listNames(t, ctx, a, o); got != "" {
			t.Fatalf("list by %s = %q, want empty", o, got)
		}
		expectArtifactNotFound(t, ctx, a, o, "secret.txt", 0)
		expectArtifactNotFound(t, ctx, a, o, "secret.txt", 1)
		expectArtifactNotFound(t, ctx, a, o, "user:profile.json", 0)
		if err := a.DeleteArtifact(ctx, o, "secret.txt"); !errors.Is(err, history.ErrNotFound) {
			t.Fatalf("Delete by %s = %v, want ErrNotFound", o, err)
		}
		if err := a.DeleteArtifact(ctx, o, "user:profile.json"); !errors.Is(err, history.ErrNotFound) {
			t.Fatalf("Delete by %s = %v, want ErrNotFound", o, err)
		}
	}
	other := others(id)[2] // the same user's other conversation
	expectArtifactNotFound(t, ctx, a, other, "secret.txt", 0)
	if err := a.DeleteArtifact(ctx, other, "secret.txt"); !errors.Is(err, history.ErrNotFound) {
		t.Fatalf("Delete from another conversation = %v, want ErrNotFound", err)
	}
	expectArtifact(t, ctx, a, id, "secret.txt", 0, 1, []byte("mine"))
	expectArtifact(t, ctx, a, id, "user:profile.json", 0, 1, []byte(`{"a":1}`))
}

func testArtifactUserScope(t *testing.T, ctx context.Context, a history.ArtifactService) {
	id := newIdentity(t, "c1")
	id2 := events.Identity{Tenant: id.Tenant, User: id.User, Conversation: "c2"}
	publish(t, ctx, a, id, stage(t, ctx, a, id, "user:notes.md", "text/markdown", []byte("from c1")))
	publish(t, ctx, a, id, stage(t, ctx, a, id, "local.md", "text/markdown", []byte("c1 only")))
	publish(t, ctx, a, id2, stage(t, ctx, a, id2, "user:notes.md", "text/markdown", []byte("from c2")))
	expectArtifact(t, ctx, a, id, "user:notes.md", 0, 2, []byte("from c2"))
	expectArtifact(t, ctx, a, id2, "user:notes.md", 1, 1, []byte("from c1"))
	if got := listNames(t, ctx, a, id2); got != "user:notes.md@2" {
		t.Fatalf("list of c2 = %q", got)
	}
	if got := listNames(t, ctx, a, id); got != "local.md@1 user:notes.md@2" {
		t.Fatalf("list of c1 = %q", got)
	}
	bob := events.Identity{Tenant: id.Tenant, User: "bob", Conversation: "c1"}
	expectArtifactNotFound(t, ctx, a, bob, "user:notes.md", 0)
	if err := a.DeleteArtifact(ctx, id2, "user:notes.md"); err != nil {
		t.Fatalf("Delete of a user: name from another conversation: %v", err)
	}
	expectArtifactNotFound(t, ctx, a, id, "user:notes.md", 0)
}

func testArtifactInvalid(t *testing.T, ctx context.Context, a history.ArtifactService) {
	id := newIdentity(t, "c1")
	names := []string{"", "../etc/passwd", "a/b", "%2F", "a%2Fb", "a\x00b", ".hidden", "user:", "user:../x", "a#1", "a b",
		"é.txt", strings.Repeat("a", history.MaxArtifactNameBytes+1), "user:user:x"}
	for _, name := range names {
		if _, err := a.Stage(ctx, id, history.ArtifactSave{Name: name, MIME: "text/plain", Data: []byte("x")}); !errors.Is(err, events.ErrInvalid) {
			t.Errorf("Stage(%q) = %v, want ErrInvalid", name, err)
		}
		if _, _, err := a.OpenArtifact(ctx, id, name, 0); !errors.Is(err, events.ErrInvalid) {
			t.Errorf("OpenArtifact(%q) = %v, want ErrInvalid", name, err)
		}
		if err := a.DeleteArtifact(ctx, id, name); !errors.Is(err, events.ErrInvalid) {
			t.Errorf("DeleteArtifact(%q) = %v, want ErrInvalid", name, err)
		}
	}
	for _, mime := range []string{"", "text", "text/", "/plain", "text/plain/x", "text/pl ain", "text/plain\x00", "text/plain\r\nX: y"} {
		if _, err := a.Stage(ctx, id, history.ArtifactSave{Name: "a.txt", MIME: mime, Data: []byte("x")}); !errors.Is(err, events.ErrInvalid) {
			t.Errorf("Stage with MIME %q = %v, want ErrInvalid", mime, err)
		}
	}
	if _, err := a.Stage(ctx, events.Identity{Tenant: "t/1", User: "u", Conversation: "c"}, history.ArtifactSave{Name: "a", MIME: "text/plain"}); !errors.Is(err, events.ErrInvalid) {
		t.Errorf("Stage with a bad identity = %v, want ErrInvalid", err)
	}
	if _, err := a.Publish(ctx, id, []string{"../x"}); !errors.Is(err, events.ErrInvalid) {
		t.Errorf("Publish of a forged token = %v, want ErrInvalid", err)
	}
	if got := listNames(t, ctx, a, id); got != "" {
		t.Fatalf("list = %q, want empty", got)
	}
	// Valid names of every kind are accepted.
	for _, name := range []string{"a", "user:A-b_c.9", strings.Repeat("z", history.MaxArtifactNameBytes)} {
		if err := history.ValidateArtifactName(name); err != nil {
			t.Errorf("ValidateArtifactName(%q) = %v", name, err)
		}
	}
}

func testArtifactLimits(t *testing.T, ctx context.Context, a history.ArtifactService) {
	id := newIdentity(t, "c1")
	if _, err := a.Stage(ctx, id, history.ArtifactSave{Name: "big.bin", MIME: "application/octet-stream", Data: make([]byte, 1<<20+1)}); !errors.Is(err, history.ErrArtifactLimit) {
		t.Fatalf("Stage of 1 MiB + 1 = %v, want ErrArtifactLimit", err)
	}
	publish(t, ctx, a, id, stage(t, ctx, a, id, "max.bin", "application/octet-stream", make([]byte, 1<<20)))
	for _, n := range []string{"b", "c"} {
		publish(t, ctx, a, id, stage(t, ctx, a, id, n, "text/plain", []byte(n)))
	}
	if _, err := a.Stage(ctx, id, history.ArtifactSave{Name: "d", MIME: "text/plain", Data: []byte("d")}); !errors.Is(err, history.ErrArtifactLimit) {
		t.Fatalf("Stage of a 4th name = %v, want ErrArtifactLimit", err)
	}
	// A new version of a name the scope has is not a new name; the user's
	// names are a scope of their own.
	publish(t, ctx, a, id, stage(t, ctx, a, id, "b", "text/plain", []byte("b2")))
	publish(t, ctx, a, id, stage(t, ctx, a, id, "user:u", "text/plain", []byte("u")))
	if got := listNames(t, ctx, a, id); got != "b@2 c@1 max.bin@1 user:u@1" {
		t.Fatalf("list = %q", got)
	}
}

func testArtifactDelete(t *testing.T, ctx context.Context, a history.ArtifactService) {
	id := newIdentity(t, "c1")
	t1 := stage(t, ctx, a, id, "r.pdf", "application/pdf", []byte("1"))
	t2 := stage(t, ctx, a, id, "r.pdf", "application/pdf", []byte("2"))
	publish(t, ctx, a, id, t1, t2)
	publish(t, ctx, a, id, stage(t, ctx, a, id, "keep.pdf", "application/pdf", []byte("k")))
	// A save staged before the delete and not published yet (its turn
	// committed, its publish not run) goes with the name.
	t3 := stage(t, ctx, a, id, "r.pdf", "application/pdf", []byte("3"))
	if err := a.DeleteArtifact(ctx, id, "r.pdf"); err != nil {
		t.Fatalf("DeleteArtifact: %v", err)
	}
	expectArtifactNotFound(t, ctx, a, id, "r.pdf", 0)
	expectArtifactNotFound(t, ctx, a, id, "r.pdf", 1)
	if got := publish(t, ctx, a, id, t1, t2, t3); len(got) != 0 {
		t.Fatalf("Publish after delete = %+v, want nothing", got)
	}
	expectArtifactNotFound(t, ctx, a, id, "r.pdf", 0)
	if err := a.DeleteArtifact(ctx, id, "r.pdf"); !errors.Is(err, history.ErrNotFound) {
		t.Fatalf("second DeleteArtifact = %v, want ErrNotFound", err)
	}
	if got := listNames(t, ctx, a, id); got != "keep.pdf@1" {
		t.Fatalf("list = %q", got)
	}
	publish(t, ctx, a, id, stage(t, ctx, a, id, "r.pdf", "application/pdf", []byte("new")))
	expectArtifact(t, ctx, a, id, "r.pdf", 0, 1, []byte("new"))
}

func testArtifactSweep(t *testing.T, ctx context.Context, a history.ArtifactService) {
	id := newIdentity(t, "c1")
	kept := stage(t, ctx, a, id, "kept", "text/plain", []byte("k"))
	lost := stage(t, ctx, a, id, "lost", "text/plain", []byte("l"))
	publish(t, ctx, a, id, kept)
	if _, err := a.SweepArtifacts(ctx, time.Now().Add(-time.Hour)); err != nil {
		t.Fatalf("SweepArtifacts: %v", err)
	}
	// Not older than the cut: still publishable.
	if got := publish(t, ctx, a, id, lost); len(got) != 1 {
		t.Fatalf("Publish of a recent staged save after a sweep = %+v", got)
	}
	gone := stage(t, ctx, a, id, "gone", "text/plain", []byte("g"))
	n, err := a.SweepArtifacts(ctx, time.Now().Add(time.Hour))
	if err != nil || n < 1 {
		t.Fatalf("SweepArtifacts = %d, %v; want at least 1", n, err)
	}
	if got := publish(t, ctx, a, id, gone); len(got) != 0 {
		t.Fatalf("Publish of a swept save = %+v, want nothing", got)
	}
	expectArtifact(t, ctx, a, id, "kept", 0, 1, []byte("k"))
	expectArtifact(t, ctx, a, id, "lost", 0, 1, []byte("l"))
	expectArtifactNotFound(t, ctx, a, id, "gone", 0)
}

func testArtifactSweepRace(t *testing.T, ctx context.Context, a history.ArtifactService) {
	id := newIdentity(t, "c1")
	// What earlier subtests left staged goes first.
	if _, err := a.SweepArtifacts(ctx, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("SweepArtifacts: %v", err)
	}
	const staged, sweeps = 12, 4
	kept := stage(t, ctx, a, id, "kept", "text/plain", []byte("k"))
	publish(t, ctx, a, id, kept)
	for i := range staged {
		stage(t, ctx, a, id, fmt.Sprintf("s%d", i%3), "text/plain", []byte{byte(i)})
	}
	counts := make([]int, sweeps)
	errs := make([]error, sweeps)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range sweeps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			counts[i], errs[i] = a.SweepArtifacts(ctx, time.Now().Add(time.Hour))
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent SweepArtifacts: %v", err)
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	if total != staged {
		t.Fatalf("concurrent sweeps dropped %v saves, %d in all; want %d in all", counts, total, staged)
	}
	expectArtifact(t, ctx, a, id, "kept", 0, 1, []byte("k"))
	if got := publish(t, ctx, a, id, kept); len(got) != 1 || got[0].Version != 1 {
		t.Fatalf("Publish of the kept save after the sweeps = %+v, want version 1", got)
	}
}

func testArtifactContent(t *testing.T, ctx context.Context, a history.ArtifactService) {
	id := newIdentity(t, "c1")
	big := make([]byte, 2*history.ArtifactChunkBytes+17)
	for i := range big {
		big[i] = byte(i*7 + i/251)
	}
	publish(t, ctx, a, id, stage(t, ctx, a, id, "big.bin", "application/octet-stream", big))
	publish(t, ctx, a, id, stage(t, ctx, a, id, "empty.txt", "text/plain; charset=utf-8", nil))
	publish(t, ctx, a, id, stage(t, ctx, a, id, "exact.bin", "application/octet-stream", big[:history.ArtifactChunkBytes]))
	expectArtifact(t, ctx, a, id, "big.bin", 0, 1, big)
	expectArtifact(t, ctx, a, id, "exact.bin", 1, 1, big[:history.ArtifactChunkBytes])
	got := expectArtifact(t, ctx, a, id, "empty.txt", 0, 1, []byte{})
	if got.MIME != "text/plain; charset=utf-8" || got.SavedAt.IsZero() {
		t.Fatalf("empty.txt = %+v", got)
	}
}

func testArtifactConcurrent(t *testing.T, ctx context.Context, a history.ArtifactService) {
	base := newIdentity(t, "c0")
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		id := events.Identity{Tenant: base.Tenant, User: base.User, Conversation: fmt.Sprintf("c%d", i)}
		tok := stage(t, ctx, a, id, "user:shared", "text/plain", []byte{byte('a' + i)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = a.Publish(ctx, id, []string{tok})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	seen := map[string]bool{}
	for v := 1; v <= n; v++ {
		_, data, err := a.OpenArtifact(ctx, base, "user:shared", v)
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		if seen[string(data)] {
			t.Fatalf("version %d holds %q, which another version holds", v, data)
		}
		seen[string(data)] = true
	}
	expectArtifactNotFound(t, ctx, a, base, "user:shared", n+1)
}

func testArtifactPublishRace(t *testing.T, ctx context.Context, a history.ArtifactService) {
	id := newIdentity(t, "c1")
	// Several rounds: a round's publishes may happen not to overlap.
	for round := 1; round <= 4; round++ {
		tok := stage(t, ctx, a, id, "raced", "text/plain", []byte{byte('0' + round)})
		const n = 8
		got := make([][]history.Artifact, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got[i], errs[i] = a.Publish(ctx, id, []string{tok})
			}()
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: Publish: %v", round, err)
		}
		for i, g := range got {
			if len(g) != 1 || g[0].Version != round || g[0].Token != tok {
				t.Fatalf("round %d: caller %d got %+v, want version %d of token %s", round, i, g, round, tok)
			}
		}
		expectArtifact(t, ctx, a, id, "raced", 0, round, []byte{byte('0' + round)})
		expectArtifactNotFound(t, ctx, a, id, "raced", round+1)
	}
}

func testArtifactManifest(t *testing.T, ctx context.Context, s history.Store) {
	r, ok := s.(history.ManifestReader)
	if !ok {
		t.Fatalf("%T is not a history.ManifestReader", s)
	}
	id := newIdentity(t, "c1")
	tokens := []string{strings.Repeat("a", 32), strings.Repeat("b", 32)}
	tr := turn(1)
	tr.Artifacts = tokens
	if c := commit(t, ctx, s, id, tr); c.Artifacts != len(tokens) {
		t.Fatalf("Commit of a turn with %d saves = %+v; want Artifacts %d", len(tokens), c, len(tokens))
	}
	tr.Artifacts = []string{strings.Repeat("c", 32)}
	// A store that is a ManifestReader reports the committed turn's saves
	// on every duplicate answer (Commit, Lookup, Start): the worker reads
	// the manifest again only when Committed.Artifacts > 0, so a store
	// that leaves it 0 would lose the saves of a run that crashed between
	// its commit and its publish.
	if c, err := s.Commit(ctx, id, tr); err != nil || !c.Duplicate || c.Artifacts != len(tokens) {
		t.Fatalf("Commit again = %+v, %v; want a duplicate with the first commit's Artifacts %d", c, err, len(tokens))
	}
	if c, found, err := s.Lookup(ctx, id, tr.RequestID); err != nil || !found || c.Artifacts != len(tokens) {
		t.Fatalf("Lookup of the committed turn = %+v, %v, %v; want Artifacts %d", c, found, err, len(tokens))
	}
	if st, err := history.Begin(s, id, tr.RequestID, tr.User, tr.UserAt).Start(ctx, 4); err != nil || !st.Decided || st.Committed.Artifacts != len(tokens) {
		t.Fatalf("Start of the committed request = %+v, %v; want decided with Artifacts %d", st, err, len(tokens))
	}
	plain := turn(3)
	commit(t, ctx, s, id, plain)
	if c, err := s.Commit(ctx, id, plain); err != nil || !c.Duplicate || c.Artifacts != 0 {
		t.Fatalf("Commit again of a turn without saves = %+v, %v; want a duplicate with Artifacts 0", c, err)
	}
	got, found, err := r.TurnArtifacts(ctx, id, tr.RequestID)
	if err != nil || !found || strings.Join(got, ",") != strings.Join(tokens, ",") {
		t.Fatalf("TurnArtifacts = %v, %v, %v; want %v", got, found, err, tokens)
	}
	for _, o := range others(id) {
		if got, found, err := r.TurnArtifacts(ctx, o, tr.RequestID); err != nil || found || len(got) > 0 {
			t.Fatalf("TurnArtifacts by %s = %v, %v, %v; want none", o, got, found, err)
		}
	}
	if _, found, err := r.TurnArtifacts(ctx, id, "r-unknown"); err != nil || found {
		t.Fatalf("TurnArtifacts of an unknown request = %v, %v", found, err)
	}
	bad := turn(4)
	bad.Artifacts = []string{"../x"}
	if _, err := s.Commit(ctx, id, bad); !errors.Is(err, events.ErrInvalid) {
		t.Fatalf("Commit with a forged token = %v, want ErrInvalid", err)
	}
}

// ArtifactFaults is a service whose Stage can be made to fail half-way,
// for ArtifactOrphans.
type ArtifactFaults struct {
	// Service is the service under test, on storage of its own (Contents
	// counts all of it).
	Service history.ArtifactService
	// FailStage returns a context under which Stage writes the save's
	// content and then fails before the save is staged (a store refusing
	// that write, or a process dying there).
	FailStage func(ctx context.Context) context.Context
	// Contents is the number of saves whose content the service's storage
	// holds, staged or not (MongoArtifacts: the distinct tokens of its
	// chunks).
	Contents func(ctx context.Context) (int, error)
}

// ArtifactOrphans checks that content written by a Stage that failed
// before staging its save is not kept forever: SweepArtifacts keeps it
// while it is younger than the cut (it may be a Stage in flight) and
// drops it once older, and keeps the published saves' content. An
// implementation whose Stage writes content and save at once (such as
// history.MemoryArtifacts) has no such content and needs no such case.
func ArtifactOrphans(t *testing.T, newFaults func(t *testing.T) ArtifactFaults) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	f := newFaults(t)
	a := f.Service
	contents := func(want int, when string) {
		t.Helper()
		n, err := f.Contents(ctx)
		if err != nil || n != want {
			t.Fatalf("%s: Contents = %d, %v; want %d", when, n, err, want)
		}
	}
	id := newIdentity(t, "c1")
	kept := stage(t, ctx, a, id, "kept.txt", "text/plain", []byte("kept"))
	publish(t, ctx, a, id, kept)
	stage(t, ctx, a, id, "staged.txt", "text/plain", []byte("never committed"))
	big := bytes.Repeat([]byte("orphan"), history.ArtifactChunkBytes/3) // two chunks
	if tok, err := a.Stage(f.FailStage(ctx), id, history.ArtifactSave{Name: "failed.bin", MIME: "application/octet-stream", Data: big}); err == nil {
		t.Fatalf("Stage under FailStage = %s, nil; want an error", tok)
	}
	contents(3, "after the failed Stage")
	if n, err := a.SweepArtifacts(ctx, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("SweepArtifacts(an hour ago) = %d, %v; want 0 (nothing that old)", n, err)
	}
	contents(3, "after a sweep of what is older than an hour")
	if n, err := a.SweepArtifacts(ctx, time.Now().Add(time.Hour)); err != nil || n != 2 {
		t.Fatalf("SweepArtifacts(in an hour) = %d, %v; want 2 (the staged save and the orphaned content)", n, err)
	}
	contents(1, "after the sweep")
	expectArtifact(t, ctx, a, id, "kept.txt", 0, 1, []byte("kept"))
	if n, err := a.SweepArtifacts(ctx, time.Now().Add(time.Hour)); err != nil || n != 0 {
		t.Fatalf("second SweepArtifacts = %d, %v; want 0", n, err)
	}
	contents(1, "after the second sweep")
}
