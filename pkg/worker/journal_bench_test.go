package worker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// BenchmarkDurableToolTurn runs one turn of a durable agent with two tool
// rounds (two model outputs with a tool call each, two tool results, the
// answer: the journal test's agent) through the worker's step, with the
// step journal and without it, each turn a new request of its own
// conversation: on MongoDB (the embedded FerretDB, or TURNPIKE_MONGO_URI),
// where it reports the store commands per turn beside the time, and on the
// memory store, where the difference is the journal's own CPU (hashing,
// encoding, replay bookkeeping) without a store round trip.
func BenchmarkDurableToolTurn(b *testing.B) {
	ctx := testenv.Context(b, 30*time.Minute)
	store, log := monitoredStore(b, ctx, false) // counting commands only, not waves
	conversations := 0                          // every turn a conversation of its own, across -count runs too
	stores := []struct {
		name  string
		store history.Store
	}{{"mongo", store}, {"memory", history.NewMemoryStore()}}
	for _, sto := range stores {
		for _, journal := range []bool{true, false} {
			b.Run(fmt.Sprintf("store=%s/journal=%t", sto.name, journal), func(b *testing.B) {
				a := newJournalAgent()
				c := stepConfig()
				c.JournalOff = !journal
				st := newStep(b, c, worker.WithAgentFactory(a.factory()))
				commands, turns := 0, 0
				for b.Loop() {
					turns++
					conversations++
					id := events.Identity{Tenant: "acme", User: "ann", Conversation: fmt.Sprintf("c%d", conversations)}
					log.arm()
					res, err := st.Run(ctx, stepRequest(id, "r1", "charge and mail"), sto.store, newRecordingSink())
					names, _ := log.disarm()
					if err != nil || res.Status != events.StatusComplete {
						b.Fatalf("run: %+v, %v", res, err)
					}
					commands += len(names)
				}
				if sto.name == "mongo" {
					b.ReportMetric(float64(commands)/float64(turns), "commands/turn")
				}
			})
		}
	}
}
