package worker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// monitoredMemory opens a MongoMemory with search on a database of its
// own (on the embedded FerretDB, or TURNPIKE_MONGO_URI) through a client
// that reports every command to the returned command log, unarmed and
// counting commands only; the database is dropped when the test ends.
func monitoredMemory(tb testing.TB, ctx context.Context, search history.MemorySearch) (*history.MongoMemory, *commandLog) {
	tb.Helper()
	dbName := testenv.Name(tb, "mem")
	log := newCommandLog(dbName)
	log.partnerWait = 0
	client, err := mongo.Connect(options.Client().ApplyURI(testenv.MongoURI(tb)).SetTimeout(30 * time.Second).SetMonitor(log.monitor()))
	if err != nil {
		tb.Fatal(err)
	}
	db := client.Database(dbName)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = db.Drop(ctx)
		_ = client.Disconnect(ctx)
	})
	mem, err := history.NewMongoMemory(ctx, db, history.MongoMemoryConfig{Search: search})
	if err != nil {
		tb.Fatal(err)
	}
	return mem, log
}

// seedOtters gives alice n memories of another conversation, each
// holding the query's term "otters".
func seedOtters(tb testing.TB, ctx context.Context, mem history.MemoryService, n int) {
	tb.Helper()
	owner := events.Identity{Tenant: "acme", User: "alice", Conversation: "old"}
	for i := 1; i <= n; i++ {
		if _, err := mem.Add(ctx, history.Memory{Identity: owner, Turn: int64(i),
			Question: fmt.Sprintf("fact %d about otters and rivers", i), Answer: "noted", At: time.Unix(int64(i), 0)}); err != nil {
			tb.Fatal(err)
		}
	}
}

// The memory of a turn costs, on MongoMemory's term search (FerretDB),
// one insert (the add after the commit) and, with injection, one find
// (the search before the run): here with 200 candidate memories, more
// than a first reply batch of the driver's default (101).
func TestMemoryCostsOneInsertAndWithInjectionOneFindPerTurn(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	for _, tc := range []struct {
		inject bool
		want   []string
	}{{false, []string{"insert"}}, {true, []string{"find", "insert"}}} {
		mem, log := monitoredMemory(t, ctx, history.MemorySearchTerms)
		seedOtters(t, ctx, mem, 200)
		m := echoing()
		st := newStep(t, stepConfig(), worker.WithAgent(chatAgent(t, m)), worker.WithMemory(mem, worker.MemoryConfig{Inject: tc.inject, K: 3}))
		id := events.Identity{Tenant: "acme", User: "alice", Conversation: "new"}
		log.arm()
		runOK(t, ctx, st, history.NewMemoryStore(), id, "r1", "tell me about otters")
		names, _ := log.disarm()
		slices.Sort(names)
		if !slices.Equal(names, tc.want) {
			t.Fatalf("inject %v: the turn's memory commands %s; want %s", tc.inject, strings.Join(names, " "), strings.Join(tc.want, " "))
		}
		if got := strings.Count(memoryOfWindow(m.seen()[0]), "\n- ["); tc.inject && got != 3 {
			t.Fatalf("injected %d memories; want 3", got)
		}
	}
}
