package history_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
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
	db := monitoredClient(t, uri, mon).Database(dbName)
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

// monitoredClient connects to uri with mon as its command monitor, and
// disconnects at cleanup.
func monitoredClient(t *testing.T, uri string, mon *event.CommandMonitor) *mongo.Client {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetTimeout(30 * time.Second).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Disconnect(ctx)
	})
	return client
}

// TestNewMongoArtifactsRepairsATokenHeldByTwoVersions: versions written
// before the unique index "token_unique" existed may hold one token twice
// (two concurrent publishes of it). NewMongoArtifacts then still starts
// (the worker and ingest would crash-loop otherwise), both versions stay
// readable, and concurrent publishes of the token return one version, the
// lowest.
func TestNewMongoArtifactsRepairsATokenHeldByTwoVersions(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	db := testenv.MongoClient(t, testenv.MongoURI(t)).Database(testenv.Name(t, "tp"))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = db.Drop(ctx)
	})
	// Stage a save through the service, then write the pair the old code
	// could write, with the index dropped.
	a, err := history.NewMongoArtifacts(ctx, db, history.ArtifactConfig{})
	if err != nil {
		t.Fatal(err)
	}
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "repair"}
	token, err := a.Stage(ctx, id, history.ArtifactSave{Name: "notes.txt", MIME: "text/plain", Data: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Collection("artifacts").Indexes().DropOne(ctx, "token_unique"); err != nil {
		t.Fatal(err)
	}
	scope := id.Tenant + "/" + id.User + "/" + id.Conversation
	for _, v := range []int{2, 1} { // the higher one first: the repair keeps the lowest, not the first
		doc := bson.D{{Key: "_id", Value: fmt.Sprintf("%s#notes.txt#%08d", scope, v)}, {Key: "tenant", Value: id.Tenant},
			{Key: "user", Value: id.User}, {Key: "conversation", Value: id.Conversation}, {Key: "scope", Value: scope},
			{Key: "name", Value: "notes.txt"}, {Key: "version", Value: v}, {Key: "mime", Value: "text/plain"},
			{Key: "size", Value: int64(5)}, {Key: "chunks", Value: 1}, {Key: "token", Value: token},
			{Key: "at", Value: time.Now().UTC().Truncate(time.Millisecond)}}
		if _, err := db.Collection("artifacts").InsertOne(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	var logged bytes.Buffer
	a, err = history.NewMongoArtifacts(ctx, db, history.ArtifactConfig{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatalf("NewMongoArtifacts on versions holding a token twice: %v", err)
	}
	if !strings.Contains(logged.String(), token) {
		t.Errorf("the repair of token %s was not logged: %q", token, logged.String())
	}
	for _, v := range []int{1, 2} {
		got, data, err := a.OpenArtifact(ctx, id, "notes.txt", v)
		if err != nil || got.Version != v || string(data) != "hello" {
			t.Errorf("version %d after the repair: %+v %q %v, want it readable", v, got, data, err)
		}
	}
	var wg sync.WaitGroup
	pubs := make([][]history.Artifact, 4)
	errs := make([]error, len(pubs))
	for i := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pubs[i], errs[i] = a.Publish(ctx, id, []string{token})
		}()
	}
	wg.Wait()
	for i := range pubs {
		if errs[i] != nil || len(pubs[i]) != 1 || pubs[i][0].Version != 1 {
			t.Errorf("publish %d of the repaired token: %+v %v, want version 1 (the lowest, which kept it)", i, pubs[i], errs[i])
		}
	}
	if n, err := db.Collection("artifacts").CountDocuments(ctx, bson.D{{Key: "token", Value: token}}); err != nil || n != 1 {
		t.Errorf("%d versions hold the token after the repair (%v), want 1", n, err)
	}
}

// A save published between a sweep's read of the unpublished saves and its
// delete of that save (a redelivered request's Publish, on another
// replica) is neither dropped nor counted, and keeps its content: the
// sweep's delete is conditional on the save still being unpublished, and
// it drops the content of the saves it deleted only. The publish is made,
// deterministically, from the command monitor of the sweep's client, just
// before its delete is sent.
func TestASavePublishedDuringASweepKeepsItsContentAndIsNotCounted(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	uri := testenv.MongoURI(t)
	other := testenv.MongoClient(t, uri).Database(testenv.Name(t, "tp"))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = other.Drop(ctx)
	})
	cfg := history.ArtifactConfig{Artifacts: "race_artifacts", Chunks: "race_chunks"}
	var token string
	var armed atomic.Bool // set once the save is staged; the first delete after it takes it
	published := make(chan error, 1)
	mon := &event.CommandMonitor{
		Started: func(ctx context.Context, e *event.CommandStartedEvent) {
			if e.CommandName != "delete" || e.Command.Lookup("delete").StringValue() != cfg.Artifacts {
				return
			}
			if !armed.CompareAndSwap(true, false) {
				return
			}
			// Another replica publishes the save now.
			_, err := other.Collection(cfg.Artifacts).UpdateOne(ctx, bson.D{{Key: "_id", Value: "s#" + token}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "pub", Value: int64(1)}}}})
			published <- err
		},
	}
	a, err := history.NewMongoArtifacts(ctx, monitoredClient(t, uri, mon).Database(other.Name()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "c1"}
	if token, err = a.Stage(ctx, id, history.ArtifactSave{Name: "report.txt", MIME: "text/plain", Data: []byte("the report")}); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	n, err := a.SweepArtifacts(ctx, time.Now().Add(time.Hour))
	select {
	case err := <-published:
		if err != nil {
			t.Fatalf("the publish during the sweep: %v", err)
		}
	default:
		t.Fatal("the sweep sent no delete of the staged save: the race was not exercised")
	}
	if err != nil || n != 0 {
		t.Fatalf("SweepArtifacts = %d, %v; want 0: the one save it read was published before its delete", n, err)
	}
	if chunks, err := other.Collection(cfg.Chunks).CountDocuments(ctx, bson.D{{Key: "token", Value: token}}); err != nil || chunks == 0 {
		t.Fatalf("the published save's content: %d chunks, %v; want it kept", chunks, err)
	}
}
