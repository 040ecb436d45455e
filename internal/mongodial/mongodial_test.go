package mongodial_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/turnpike-dev/turnpike/internal/mongodial"
	"github.com/turnpike-dev/turnpike/internal/testenv"
)

// Dial reaches the database it names, with a bounded pool, and Ping
// answers while it is connected.
func TestDialReachesTheNamedDatabase(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	db := testenv.Name(t, "dial")
	c, err := mongodial.Dial(testenv.MongoURI(t), db, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.DB.Name() != db {
		t.Fatalf("database %q, want %q", c.DB.Name(), db)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if _, err := c.DB.Collection("c").InsertOne(ctx, bson.D{{Key: "x", Value: 1}}); err != nil {
		t.Fatalf("insert: %v", err)
	}
	if n, err := c.DB.Collection("c").CountDocuments(ctx, bson.D{}); err != nil || n != 1 {
		t.Fatalf("count: %d, %v; want 1", n, err)
	}
}

func TestDialRefusesAURIThatIsNotMongoDBs(t *testing.T) {
	t.Parallel()
	if c, err := mongodial.Dial("http://localhost:27017", "db", 0); err == nil {
		c.Close()
		t.Fatal("Dial of an http URI succeeded")
	}
}
