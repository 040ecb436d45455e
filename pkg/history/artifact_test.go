package history_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/history/historytest"
)

// suiteArtifactLimits are the limits historytest.Artifacts expects.
var suiteArtifactLimits = history.ArtifactLimits{MaxBytes: 1 << 20, MaxNames: 3}

func TestMemoryArtifacts(t *testing.T) {
	t.Parallel()
	historytest.Artifacts(t,
		func(*testing.T) history.ArtifactService { return history.NewMemoryArtifacts(suiteArtifactLimits) },
		func(*testing.T) history.Store { return history.NewMemoryStore() })
}

// TestMongoArtifacts runs the artifact suite on embedded FerretDB (or on
// TURNPIKE_MONGO_URI). The subtests share one database, but for the
// orphans' case, whose collections are its own.
func TestMongoArtifacts(t *testing.T) {
	t.Parallel()
	uri := testenv.MongoURI(t)
	db := testenv.MongoClient(t, uri).Database(testenv.Name(t, "tp"))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = db.Drop(ctx)
	})
	t.Run("orphans", func(t *testing.T) {
		t.Parallel()
		historytest.ArtifactOrphans(t, func(t *testing.T) historytest.ArtifactFaults {
			return failingMongoArtifacts(t, uri, db.Name())
		})
	})
	historytest.Artifacts(t,
		func(t *testing.T) history.ArtifactService {
			a, err := history.NewMongoArtifacts(testenv.Context(t, 30*time.Second), db, history.ArtifactConfig{Limits: suiteArtifactLimits})
			if err != nil {
				t.Fatalf("NewMongoArtifacts: %v", err)
			}
			return a
		},
		func(t *testing.T) history.Store { return newMongoStore(t, testenv.Context(t, 30*time.Second), db) })
}

// failStageKey marks a context under which the chunks' insert cancels it.
type failStageKey struct{}

// failingMongoArtifacts is a MongoArtifacts on collections of its own of
// database dbName, through a client whose command monitor cancels the
// context of a Stage marked by FailStage once the content's insert
// succeeded: the staged document's insert that follows then fails, as if
// the store refused it (or the process died there).
func failingMongoArtifacts(t *testing.T, uri, dbName string) historytest.ArtifactFaults {
	mon := &event.CommandMonitor{
		Succeeded: func(ctx context.Context, e *event.CommandSucceededEvent) {
			if cancel, ok := ctx.Value(failStageKey{}).(context.CancelFunc); ok && e.CommandName == "insert" {
				cancel()
			}
		},
	}
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetTimeout(30 * time.Second).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Disconnect(ctx)
	})
	db := client.Database(dbName)
	cfg := history.ArtifactConfig{Artifacts: "orphans_artifacts", Chunks: "orphans_chunks", Limits: suiteArtifactLimits}
	a, err := history.NewMongoArtifacts(testenv.Context(t, 30*time.Second), db, cfg)
	if err != nil {
		t.Fatalf("NewMongoArtifacts: %v", err)
	}
	return historytest.ArtifactFaults{
		Service: a,
		FailStage: func(ctx context.Context) context.Context {
			ctx, cancel := context.WithCancel(ctx)
			return context.WithValue(ctx, failStageKey{}, context.CancelFunc(cancel))
		},
		Contents: func(ctx context.Context) (int, error) {
			cur, err := db.Collection(cfg.Chunks).Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "token", Value: 1}}))
			if err != nil {
				return 0, err
			}
			var docs []struct {
				Token string `bson:"token"`
			}
			if err := cur.All(ctx, &docs); err != nil {
				return 0, err
			}
			tokens := map[string]bool{}
			for _, d := range docs {
				tokens[d.Token] = true
			}
			return len(tokens), nil
		},
	}
}
