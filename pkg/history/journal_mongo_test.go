package history_test

import (
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// A journal not written for its TTL (its request never reached a durable
// end) is deleted by SweepSteps, the backstop on FerretDB, which has no TTL
// index; a fresh one, and the requests collection's other documents, stay.
func TestSweepStepsDeletesExpiredJournalsOnly(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	db := testenv.MongoDB(t)
	then := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	old, err := history.NewMongoStore(ctx, db, history.MongoConfig{Now: func() time.Time { return then }})
	if err != nil {
		t.Fatal(err)
	}
	s := newMongoStore(t, ctx, db)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "sweep"}
	step := history.Step{Key: "m/a/1", Data: []byte("x")}
	if _, err := old.RecordStep(ctx, id, "stale", 1, step, history.JournalLimits{TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordStep(ctx, id, "fresh", 1, step, history.JournalLimits{TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordOutcome(ctx, id, "discarded", events.StatusDiscarded); err != nil {
		t.Fatal(err)
	}
	n, err := s.SweepSteps(ctx, then.Add(2*time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("SweepSteps = %d, %v; want the stale journal", n, err)
	}
	if _, found, _ := s.Steps(ctx, id, "stale"); found {
		t.Error("the stale journal is still there")
	}
	if _, found, _ := s.Steps(ctx, id, "fresh"); !found {
		t.Error("the fresh journal was swept")
	}
	if _, found, _ := s.Lookup(ctx, id, "discarded"); !found {
		t.Error("an outcome was swept")
	}
}
