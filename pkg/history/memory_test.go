package history_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/history/historytest"
)

func TestInMemoryMemory(t *testing.T) {
	t.Parallel()
	historytest.RunMemory(t, func(*testing.T) history.MemoryService { return history.NewInMemoryMemory() })
}

// TestMongoMemoryTerms runs the suite on MongoMemory's term scan, on
// embedded FerretDB (or TURNPIKE_MONGO_URI).
func TestMongoMemoryTerms(t *testing.T) {
	t.Parallel()
	db := testenv.MongoDB(t)
	historytest.RunMemory(t, func(t *testing.T) history.MemoryService {
		m, err := history.NewMongoMemory(testenv.Context(t, 30*time.Second), db, history.MongoMemoryConfig{Search: history.MemorySearchTerms})
		if err != nil {
			t.Fatalf("NewMongoMemory: %v", err)
		}
		return m
	})
}

// TestMongoMemoryText runs the suite on MongoMemory's $text search: on a
// MongoDB server named by TURNPIKE_MONGO_URI. The embedded FerretDB has no
// text indexes: there NewMongoMemory must refuse MemorySearchText (the
// production query is not bent to fit it), and the test checks that.
func TestMongoMemoryText(t *testing.T) {
	t.Parallel()
	db := testenv.MongoDB(t)
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := history.NewMongoMemory(ctx, db, history.MongoMemoryConfig{Collection: "probe_text"}); err != nil {
		if !isFerretDB(t, db) {
			t.Fatalf("NewMongoMemory(text) on a real server: %v", err)
		}
		t.Skipf("embedded FerretDB has no text index (refused as it must be: %v); run with TURNPIKE_MONGO_URI of a MongoDB server", err)
	}
	historytest.RunMemory(t, func(t *testing.T) history.MemoryService {
		m, err := history.NewMongoMemory(testenv.Context(t, 30*time.Second), db, history.MongoMemoryConfig{})
		if err != nil {
			t.Fatalf("NewMongoMemory: %v", err)
		}
		return m
	})
}

// isFerretDB says whether db's server is FerretDB (its buildInfo names
// its version).
func isFerretDB(t *testing.T, db *mongo.Database) bool {
	t.Helper()
	var info bson.M
	if err := db.RunCommand(testenv.Context(t, 10*time.Second), bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil {
		t.Fatalf("buildInfo: %v", err)
	}
	_, ok := info["ferretdbVersion"]
	return ok
}
