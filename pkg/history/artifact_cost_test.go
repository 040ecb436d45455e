package history_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// commandCounter records the commands a client sends to one database.
type commandCounter struct {
	db    string
	mu    sync.Mutex
	names []string
}

func (c *commandCounter) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.DatabaseName == c.db {
			c.mu.Lock()
			c.names = append(c.names, e.CommandName)
			c.mu.Unlock()
		}
	}}
}

func (c *commandCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.names
	c.names = nil
	return n
}

// monitoredArtifacts is a MongoArtifacts on a database of its own (the
// embedded FerretDB, or TURNPIKE_MONGO_URI) through a client whose
// commands the returned counter records.
func monitoredArtifacts(tb testing.TB, ctx context.Context) (*history.MongoArtifacts, *commandCounter) {
	tb.Helper()
	cc := &commandCounter{db: testenv.Name(tb, "tp")}
	client, err := mongo.Connect(options.Client().ApplyURI(testenv.MongoURI(tb)).SetTimeout(30 * time.Second).SetMonitor(cc.monitor()))
	if err != nil {
		tb.Fatal(err)
	}
	db := client.Database(cc.db)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = db.Drop(ctx)
		_ = client.Disconnect(ctx)
	})
	a, err := history.NewMongoArtifacts(ctx, db, history.ArtifactConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	cc.take()
	return a, cc
}

// saveMiB stages, publishes and opens a 1 MiB artifact of id (BENCHMARKS.md
// "Artifacts").
func saveMiB(tb testing.TB, ctx context.Context, a history.ArtifactService, id events.Identity, data []byte) {
	tok, err := a.Stage(ctx, id, history.ArtifactSave{Name: "report.bin", MIME: "application/octet-stream", Data: data})
	if err != nil {
		tb.Fatal(err)
	}
	if got, err := a.Publish(ctx, id, []string{tok}); err != nil || len(got) != 1 {
		tb.Fatalf("Publish = %+v, %v", got, err)
	}
	_, back, err := a.OpenArtifact(ctx, id, "report.bin", 0)
	if err != nil || !bytes.Equal(back, data) {
		tb.Fatalf("OpenArtifact: %d bytes, %v", len(back), err)
	}
}

// A 1 MiB artifact save costs MongoArtifacts ten store commands: Stage
// three (the scope's names, the five chunks in one insert, the staged
// document), Publish five (the staged document, a version holding its
// token, the name's newest version, the version's insert, the staged
// document's mark), OpenArtifact two (the version, its chunks). The
// second save of the name costs the same. BENCHMARKS.md "Artifacts".
func TestA1MiBArtifactSaveCostsTenStoreCommands(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	a, cc := monitoredArtifacts(t, ctx)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "c1"}
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	for i := range 2 {
		saveMiB(t, ctx, a, id, data)
		names := cc.take()
		t.Logf("save %d: %d commands: %s", i+1, len(names), strings.Join(names, " "))
		if want := "find insert insert find find find insert update find find"; strings.Join(names, " ") != want {
			t.Fatalf("save %d of 1 MiB issued %d commands (%s), want 10 (%s)", i+1, len(names), strings.Join(names, " "), want)
		}
	}
}

// dropMiB deletes what saveMiB saved, outside the measured time, so that
// every save is the name's first and the heap does not grow.
func dropMiB(b *testing.B, ctx context.Context, a history.ArtifactService, id events.Identity) {
	b.StopTimer()
	defer b.StartTimer()
	if err := a.DeleteArtifact(ctx, id, "report.bin"); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkArtifactSave1MiB measures a 1 MiB artifact save (Stage,
// Publish, OpenArtifact) on MemoryArtifacts and on MongoArtifacts over the
// embedded FerretDB (or TURNPIKE_MONGO_URI). BENCHMARKS.md "Artifacts".
func BenchmarkArtifactSave1MiB(b *testing.B) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "bench"}
	b.Run("memory", func(b *testing.B) {
		a := history.NewMemoryArtifacts(history.ArtifactLimits{MaxNames: 1})
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			saveMiB(b, context.Background(), a, id, data)
			dropMiB(b, context.Background(), a, id)
		}
	})
	b.Run("ferretdb", func(b *testing.B) {
		ctx := context.Background()
		a, cc := monitoredArtifacts(b, ctx)
		saveMiB(b, ctx, a, id, data) // the collections' creation is not measured
		dropMiB(b, ctx, a, id)
		cc.take()
		b.SetBytes(int64(len(data)))
		n := 0
		for b.Loop() {
			saveMiB(b, ctx, a, id, data)
			n += len(cc.take())
			dropMiB(b, ctx, a, id)
			cc.take()
		}
		b.ReportMetric(float64(n)/float64(b.N), "commands/save")
	})
}

// A redelivered Publish of a token already published costs three store
// commands: the staged document, the version it names, and the mark. It
// neither looks for the name's newest version nor tries an insert that
// the token's unique index refuses.
func TestARedeliveredPublishCostsThreeStoreCommands(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	a, cc := monitoredArtifacts(t, ctx)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "c1"}
	tok, err := a.Stage(ctx, id, history.ArtifactSave{Name: "a.txt", MIME: "text/plain", Data: []byte("one")})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		cc.take()
		got, err := a.Publish(ctx, id, []string{tok})
		if err != nil || len(got) != 1 || got[0].Version != 1 {
			t.Fatalf("Publish %d = %+v, %v; want version 1", i+1, got, err)
		}
	}
	if got, want := strings.Join(cc.take(), " "), "find find update"; got != want {
		t.Fatalf("redelivered Publish issued %q, want %q", got, want)
	}
}
