package history_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// TestAMemoryTermSearchOfScanLimitCandidatesIsOneFind: a term search with
// MemoryScanLimit candidates or more is one find, no getMore (FerretDB
// leaves the cursor open when the batch is full, so the batch is one more
// than the limit).
func TestAMemoryTermSearchOfScanLimitCandidatesIsOneFind(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	var finds, getMores atomic.Int32
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		switch e.CommandName {
		case "find":
			finds.Add(1)
		case "getMore":
			getMores.Add(1)
		}
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(testenv.MongoURI(t)).SetTimeout(30 * time.Second).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	db := client.Database(testenv.Name(t, "tp"))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = db.Drop(ctx)
		_ = client.Disconnect(ctx)
	})
	m, err := history.NewMongoMemory(ctx, db, history.MongoMemoryConfig{Search: history.MemorySearchTerms})
	if err != nil {
		t.Fatal(err)
	}
	// The documents as MongoMemory writes them (one InsertMany, not
	// MemoryScanLimit+5 Adds).
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	docs := make([]any, 0, history.MemoryScanLimit+5)
	for i := range cap(docs) {
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("acme/ann/c1#r%05d", i)}, {Key: "tenant", Value: "acme"},
			{Key: "user", Value: "ann"}, {Key: "conversation", Value: "c1"}, {Key: "turn", Value: int64(i + 1)},
			{Key: "request_id", Value: fmt.Sprintf("r%05d", i)}, {Key: "question", Value: "paris trip"}, {Key: "answer", Value: "ok"},
			{Key: "at", Value: at.Add(time.Duration(i) * time.Second)}, {Key: "terms", Value: bson.A{"paris", "trip"}}})
	}
	if _, err := db.Collection("memories").InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	finds.Store(0)
	hits, err := m.Search(ctx, "acme", "ann", "paris", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 3 {
		t.Fatalf("%d hits, want 3", len(hits))
	}
	if f, g := finds.Load(), getMores.Load(); f != 1 || g != 0 {
		t.Errorf("a search of %d candidates (scan limit %d) = %d finds and %d getMores, want 1 and 0", len(docs), history.MemoryScanLimit, f, g)
	}
}
