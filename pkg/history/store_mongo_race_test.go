package history_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// sourced is a turn from record offset of partition 0 of the requests topic.
func sourced(requestID string, offset int64) history.Turn {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(offset) * time.Second)
	return history.Turn{RequestID: requestID, User: "q " + requestID, Answer: "a " + requestID, Status: events.StatusComplete,
		Source: &history.Source{Topic: "requests", Partition: 0, Offset: offset, Time: at}}
}

// lagging commits turns, then leaves the conversation document at lag
// turns, as commits that stopped before rolling it forward do.
func lagging(lag int64, turns ...history.Turn) func(context.Context, *history.MongoStore, events.Identity) error {
	return func(ctx context.Context, s *history.MongoStore, id events.Identity) error {
		for _, tr := range turns {
			if _, err := s.Commit(ctx, id, tr); err != nil {
				return err
			}
		}
		return history.LagConversation(ctx, s, id, lag)
	}
}

func mustList(t *testing.T, ctx context.Context, s history.Store, id events.Identity) string {
	t.Helper()
	p, err := s.List(ctx, id, 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	return requestIDs(p.Messages)
}

// Commit's races, each set up as the documents a crashed or concurrent
// commit leaves behind.
func TestMongoStoreCommitRaces(t *testing.T) {
	t.Parallel()
	db := testenv.MongoDB(t)
	tests := []struct {
		name string
		// setup commits the conversation's turns and leaves its documents
		// as a race would.
		setup func(ctx context.Context, s *history.MongoStore, id events.Identity) error
		cfg   history.MongoConfig
		turn  history.Turn
		// want is the result: ErrFenced, another error, or the turn.
		fenced, fails bool
		n             int64
		duplicate     bool
		// history is the request ids persisted afterwards ("-": not
		// listable, the setup left turn 1 empty).
		history string
	}{
		{
			name:  "A stale conversation document with a newer record's turn in the slot fences the commit.",
			setup: lagging(1, sourced("a", 1), sourced("b", 5)),
			turn:  sourced("c", 3), fenced: true, history: "1:a 2:a 3:b 4:b",
		},
		{
			name:  "Reading on past a lagging conversation document fences on a newer record further up.",
			setup: lagging(1, sourced("a", 1), sourced("b", 2), sourced("d", 9)),
			turn:  sourced("c", 5), fenced: true, history: "1:a 2:a 3:b 4:b 5:d 6:d",
		},
		{
			name:  "Reading on past a lagging conversation document commits at the first free turn.",
			setup: lagging(1, sourced("a", 1), sourced("b", 2), sourced("d", 3)),
			turn:  sourced("c", 5), n: 4, history: "1:a 2:a 3:b 4:b 5:d 6:d 7:c 8:c",
		},
		{
			name: "A request committed at another turn (its unique index refuses the insert) is reported as a duplicate at that turn.",
			setup: func(ctx context.Context, s *history.MongoStore, id events.Identity) error {
				for _, tr := range []history.Turn{sourced("a", 1), sourced("c", 2)} {
					if _, err := s.Commit(ctx, id, tr); err != nil {
						return err
					}
				}
				// Turn 1 free, c at turn 2 without its request document,
				// and the conversation document at 0.
				return errors.Join(history.DeleteTurn(ctx, s, id, 1), history.DeleteRequest(ctx, s, id, "c"), history.LagConversation(ctx, s, id, 0))
			},
			turn: sourced("c", 2), n: 2, duplicate: true, history: "-",
		},
		{
			name:  "Commit gives up once CommitAttempts inserts found their turn taken, persisting nothing.",
			cfg:   history.MongoConfig{CommitAttempts: 1},
			setup: lagging(1, sourced("a", 1), sourced("b", 2), sourced("d", 3)),
			turn:  sourced("c", 5), fails: true, history: "1:a 2:a 3:b 4:b 5:d 6:d",
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 30*time.Second)
			s, err := history.NewMongoStore(ctx, db, tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			id := events.Identity{Tenant: "acme", User: "race", Conversation: fmt.Sprintf("%s-%d", testenv.Name(t, "c"), i)}
			if err := tt.setup(ctx, s, id); err != nil {
				t.Fatal(err)
			}
			c, err := s.Commit(ctx, id, tt.turn)
			switch {
			case tt.fenced:
				if !errors.Is(err, history.ErrFenced) {
					t.Fatalf("commit = %+v, %v; want ErrFenced", c, err)
				}
			case tt.fails:
				if err == nil || errors.Is(err, history.ErrFenced) {
					t.Fatalf("commit = %+v, %v; want a retriable error", c, err)
				}
			default:
				if err != nil || c.N != tt.n || c.Duplicate != tt.duplicate {
					t.Fatalf("commit = %+v, %v; want turn %d (duplicate %v)", c, err, tt.n, tt.duplicate)
				}
				if l, found, err := s.Lookup(ctx, id, tt.turn.RequestID); err != nil || !found || l.N != tt.n {
					t.Fatalf("lookup = %+v, %v, %v; want turn %d", l, found, err, tt.n)
				}
			}
			if tt.history == "-" {
				return
			}
			if got := mustList(t, ctx, s, id); got != tt.history {
				t.Fatalf("history %s, want %s", got, tt.history)
			}
		})
	}
}
