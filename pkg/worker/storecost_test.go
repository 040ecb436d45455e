package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// Bounds of an ordinary turn's store protocol: a conversation with at
// least a full window of turns, window 20, no compaction.
const (
	maxCommandsPerTurn = 4
	maxWavesPerTurn    = 3
)

// commandLog counts the commands a MongoDB client sends to one database
// while armed, and how deep their dependency chain is (waves).
//
// A command's wave is one more than the deepest wave of the commands that
// had succeeded before it started: commands issued together share a wave,
// a command that waits for another's reply is in a later one. So that
// commands issued together are seen together however the goroutines are
// scheduled, an armed log holds each started command until a second one is
// in flight or partnerWait has passed; partnerWait only delays a command
// that has no partner, it never decides a count on its own unless the
// machine stalls a ready goroutine for that long.
type commandLog struct {
	db          string
	partnerWait time.Duration

	// mu guards every field below.
	mu       sync.Mutex
	armed    bool
	names    []string
	depth    map[int64]int // by request id: wave of a command in flight or done
	done     []int64       // request ids that succeeded, in order
	inflight int
	arrived  chan struct{} // closed (and replaced) when a command starts
}

func newCommandLog(db string) *commandLog {
	return &commandLog{db: db, partnerWait: 2 * time.Second, depth: map[int64]int{}, arrived: make(chan struct{})}
}

func (l *commandLog) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			if e.DatabaseName != l.db {
				return
			}
			l.mu.Lock()
			if !l.armed {
				l.mu.Unlock()
				return
			}
			wave := 1
			for _, id := range l.done {
				wave = max(wave, l.depth[id]+1)
			}
			l.depth[e.RequestID] = wave
			l.names = append(l.names, e.CommandName)
			l.inflight++
			close(l.arrived)
			l.arrived = make(chan struct{})
			alone, wait := l.inflight == 1, l.arrived
			l.mu.Unlock()
			if alone {
				t := time.NewTimer(l.partnerWait)
				select {
				case <-wait:
				case <-t.C:
				}
				t.Stop()
			}
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) { l.finished(e.DatabaseName, e.RequestID) },
		Failed:    func(_ context.Context, e *event.CommandFailedEvent) { l.finished(e.DatabaseName, e.RequestID) },
	}
}

func (l *commandLog) finished(db string, id int64) {
	if db != l.db {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.depth[id]; ok {
		l.done = append(l.done, id)
		l.inflight--
	}
}

func (l *commandLog) arm() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed, l.names, l.done, l.inflight = true, nil, nil, 0
	clear(l.depth)
}

// disarm stops counting and returns the commands seen and their waves.
func (l *commandLog) disarm() (names []string, waves int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed = false
	for _, d := range l.depth {
		waves = max(waves, d)
	}
	return l.names, waves
}

// monitoredStore opens a MongoStore on a database of its own (on the
// embedded FerretDB, or TURNPIKE_MONGO_URI) through a client that reports
// every command to the returned command log, unarmed; the database is
// dropped when the test ends. Without waves the log counts commands only
// (partnerWait 0: no command is held for a partner).
func monitoredStore(tb testing.TB, ctx context.Context, waves bool) (*history.MongoStore, *commandLog) {
	tb.Helper()
	dbName := testenv.Name(tb, "tp")
	log := newCommandLog(dbName)
	if !waves {
		log.partnerWait = 0
	}
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
	store, err := history.NewMongoStore(ctx, db, history.MongoConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	return store, log
}

// TestOrdinaryTurnStaysWithinTheStoreCommandBound runs 20 turns of one
// conversation through the worker on MongoDB (the embedded FerretDB, or
// TURNPIKE_MONGO_URI), then counts with the driver's command monitor the
// commands and waves of the 21st: an ordinary turn (window 20, a full
// window of history, no compaction).
func TestOrdinaryTurnStaysWithinTheStoreCommandBound(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 120*time.Second)
	store, log := monitoredStore(t, ctx, true)
	s := newStack(t, store)
	s.cfg.WindowMessages = 20
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "long"}
	const before = 20
	for i := range before {
		s.produce(t, ctx, id.Key(), request(id, fmt.Sprintf("req-%02d", i), fmt.Sprintf("message %d", i)))
	}
	s.start(t, ctx, worker.Deps{})
	stream := s.stream(t)
	stream.untilCompleted(t, ctx, before)

	log.arm()
	s.produce(t, ctx, id.Key(), request(id, "req-ordinary", "one more"))
	got := stream.untilCompleted(t, ctx, 1)
	// The window holds 10 user messages, then the new one: "echo #11".
	// The turn is committed before run.completed is emitted: every command
	// of the turn has returned by now.
	names, waves := log.disarm()
	if txt, st := text(got["req-ordinary"]); txt != "echo #11: one more" || st != events.StatusComplete {
		t.Fatalf("the ordinary turn streamed %q (%s)", txt, st)
	}
	page, err := store.List(ctx, id, 0, 2)
	if err != nil || len(page.Messages) != 2 || page.Messages[1].Seq != 2*(before+1) {
		t.Fatalf("history after the turn: %+v, %v", page, err)
	}
	t.Logf("ordinary turn: %d commands in %d waves: %s", len(names), waves, strings.Join(names, " "))
	if len(names) > maxCommandsPerTurn || waves > maxWavesPerTurn {
		t.Fatalf("an ordinary turn issued %d store commands in %d waves (%s); the bound is %d commands in %d waves",
			len(names), waves, strings.Join(names, " "), maxCommandsPerTurn, maxWavesPerTurn)
	}
}

// A turn of a durable agent with r tool rounds and c tool calls costs the
// ordinary turn's four commands, plus one journal write per model output
// with tool calls and per tool result (r + c), plus the journal's delete:
// here r = 2 and c = 2, in a first run (nothing to replay, no claim).
func TestATurnWithToolsCostsOneJournalWritePerStepAndACleanup(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store, log := monitoredStore(t, ctx, false)
	a := newJournalAgent()
	st := newStep(t, stepConfig(), worker.WithAgentFactory(a.factory()))
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "tools"}
	log.arm()
	res, err := st.Run(ctx, stepRequest(id, "r1", "charge and mail"), store, newRecordingSink())
	names, _ := log.disarm()
	if err != nil || res.Status != events.StatusComplete {
		t.Fatalf("run: %+v, %v", res, err)
	}
	t.Logf("a turn with 2 tool rounds and 2 tool calls: %d commands: %s", len(names), strings.Join(names, " "))
	const r, c = 2, 2
	if want := maxCommandsPerTurn + r + c + 1; len(names) != want {
		t.Fatalf("the turn issued %d store commands (%s), want %d: 4, one journal write per step, one delete",
			len(names), strings.Join(names, " "), want)
	}
}

// A turn whose run changes k user: keys costs the ordinary turn's
// commands plus one conditional upsert per key, issued with the
// conversation's roll-forward. The conversation's next turn re-applies
// those keys after Start (a crash may have left them in the turn only):
// k commands more; the turn after it,
// which changed nothing of the user's, costs what a turn without state
// does. (Step.Run has no record coordinates, so from the second turn on
// its Start adds the read of the request id's index and a wave: the
// worker's consumer does not, see TestOrdinaryTurnStaysWithinTheStoreCommandBound.)
// Commands are counted, not waves: the command log pairs commands issued
// together, and three at once (the roll-forward and two upserts) may be
// seen as two waves or three depending on scheduling.
func TestATurnThatChangesUserStateCostsOneUpsertPerKey(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store, log := monitoredStore(t, ctx, false)
	const k = 2
	const stepRead = 1 // Step.Run's read of the request id's index
	set := stateTool{name: "set", body: func(ctx context.Context, st *worker.State) (string, error) {
		return "ok", errors.Join(st.Set("user:lang", "fr"), st.Set("user:tz", "CET"), st.Set("step", 1))
	}}
	plain := stateTool{name: "set", body: func(context.Context, *worker.State) (string, error) { return "ok", nil }}
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "user-state"}
	for _, tc := range []struct {
		name     string
		tool     stateTool
		commands int
	}{
		{"the turn that changes the user's keys", set, maxCommandsPerTurn + k},
		{"the next turn, re-applying them", plain, maxCommandsPerTurn + stepRead + k},
		{"the turn after it", plain, maxCommandsPerTurn + stepRead},
	} {
		st := stateStep(t, tc.tool, echoResult)
		log.arm()
		res, err := st.Run(ctx, stepRequest(id, testenv.Name(t, "r"), "set"), store, newRecordingSink())
		names, waves := log.disarm()
		if err != nil || res.Status != events.StatusComplete {
			t.Fatalf("%s: %+v, %v", tc.name, res, err)
		}
		t.Logf("%s: %d commands in %d waves: %s", tc.name, len(names), waves, strings.Join(names, " "))
		if len(names) != tc.commands {
			t.Errorf("%s issued %d store commands (%s), want %d", tc.name, len(names), strings.Join(names, " "), tc.commands)
		}
	}
	m, err := store.ScopeState(ctx, "acme", "ann")
	if err != nil || string(m["lang"]) != `"fr"` || string(m["tz"]) != `"CET"` {
		t.Fatalf("user state %q, %v", m, err)
	}
}

// A redelivered request (a duplicate: its turn is committed) costs the
// same store commands with an artifact service as without when its turn
// holds no artifact saves: the committed turn's manifest is read
// (history.ManifestReader) only when Start reported saves
// (Committed.Artifacts), one command more, and then published again
// (which makes no second version).
func TestADuplicateReadsItsTurnsArtifactManifestOnlyWhenItHoldsSaves(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	store, log := monitoredStore(t, ctx, false)
	svc := history.NewMemoryArtifacts(history.ArtifactLimits{})
	var calls atomic.Int32
	withSaves := artifactStep(t, svc, &calls, echoResult)
	without := newStep(t, stepConfig())
	plain := newStep(t, stepConfig(), worker.WithArtifacts(svc))
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "dup"}
	run := func(st *worker.Step, requestID string) int {
		t.Helper()
		log.arm()
		res, err := st.Run(ctx, stepRequest(id, requestID, "hello"), store, newRecordingSink())
		names, _ := log.disarm()
		if err != nil || res.Status != events.StatusComplete {
			t.Fatalf("run %s: %+v, %v", requestID, res, err)
		}
		t.Logf("%s: %d commands: %s", requestID, len(names), strings.Join(names, " "))
		return len(names)
	}
	run(plain, "r1")
	base := run(without, "r1") // the duplicate without an artifact service
	if got := run(plain, "r1"); got != base {
		t.Errorf("a duplicate whose turn holds no saves issued %d store commands with an artifact service, %d without: want the same", got, base)
	}
	run(withSaves, "r2")
	if got := run(without, "r2"); got != base {
		t.Fatalf("the duplicate of r2 without an artifact service issued %d commands, r1's %d", got, base)
	}
	if got := run(withSaves, "r2"); got != base+1 {
		t.Errorf("a duplicate whose turn holds a save issued %d store commands, want %d (one read of its manifest)", got, base+1)
	}
	expectVersions(t, ctx, svc, id, "png 1")
}
