package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/turnpike-dev/turnpike/internal/embedded"
)

// Context returns a context that ends after d or when the test ends.
func Context(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var nonName = regexp.MustCompile(`[^A-Za-z0-9]+`)

// Name returns a name unique to this test run that satisfies Turnpike's ID
// rule, Kafka's topic rule and MongoDB's database name rule:
// prefix-testname-random, at most 60 bytes.
func Name(t testing.TB, prefix string) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	base := strings.Trim(nonName.ReplaceAllString(t.Name(), "-"), "-")
	if len(base) > 36 {
		base = base[len(base)-36:]
	}
	return strings.Trim(prefix+"-"+base, "-") + "-" + hex.EncodeToString(b[:])
}

// Kafka returns bootstrap broker addresses: TURNPIKE_KAFKA_BROKERS when set,
// otherwise a fresh embedded broker for this test.
func Kafka(t testing.TB) []string {
	t.Helper()
	if v := os.Getenv("TURNPIKE_KAFKA_BROKERS"); v != "" {
		return strings.Split(v, ",")
	}
	return []string{EmbeddedKafka(t, embedded.KafkaConfig{}).Addr()}
}

// EmbeddedKafka always starts an embedded broker (tests that inject faults
// through kfake need it even when a real Kafka is configured).
func EmbeddedKafka(t testing.TB, cfg embedded.KafkaConfig) *embedded.Kafka {
	t.Helper()
	k, err := embedded.StartKafka(cfg)
	if err != nil {
		t.Fatalf("embedded kafka: %v", err)
	}
	t.Cleanup(k.Close)
	return k
}

// MongoURI returns TURNPIKE_MONGO_URI when set, otherwise the URI of a fresh
// embedded FerretDB for this test.
func MongoURI(t testing.TB) string {
	t.Helper()
	if v := os.Getenv("TURNPIKE_MONGO_URI"); v != "" {
		return v
	}
	return EmbeddedMongo(t, t.TempDir()).URI()
}

// EmbeddedMongo always starts an embedded FerretDB keeping its files in dir.
func EmbeddedMongo(t testing.TB, dir string) *embedded.Mongo {
	t.Helper()
	m, err := embedded.StartMongo(embedded.MongoConfig{DataDir: dir})
	if err != nil {
		t.Fatalf("embedded mongo: %v", err)
	}
	t.Cleanup(m.Close)
	return m
}

// MongoClient connects to uri and disconnects at cleanup.
func MongoClient(t testing.TB, uri string) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetTimeout(30 * time.Second))
	if err != nil {
		t.Fatalf("mongo connect: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
	})
	return c
}

// MongoDB returns a database with a unique name on TURNPIKE_MONGO_URI or a
// fresh embedded store; the database is dropped at cleanup.
func MongoDB(t testing.TB) *mongo.Database {
	t.Helper()
	db := MongoClient(t, MongoURI(t)).Database(Name(t, "tp"))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = db.Drop(ctx)
	})
	return db
}
