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

// unsourced is a turn committed without its record (no fencing applies).
func unsourced(requestID string) history.Turn {
	t := sourced(requestID, 0)
	t.Source = nil
	return t
}

// inParts is tr with its answer in k parts, of two agents by turns.
func inParts(tr history.Turn, k int) history.Turn {
	for i := range k {
		tr.Parts = append(tr.Parts, history.Part{Agent: []string{"desk", "orders"}[i%2], Text: fmt.Sprintf("%s/%d", tr.Answer, i+1)})
	}
	tr.Answer, tr.Agent = "", ""
	return tr
}

func mustList(t *testing.T, ctx context.Context, s history.Store, id events.Identity) string {
	t.Helper()
	p, err := s.List(ctx, id, 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	return requestIDs(p.Messages)
}

func commitAll(ctx context.Context, s history.Store, id events.Identity, turns []history.Turn) error {
	for _, tr := range turns {
		if _, err := s.Commit(ctx, id, tr); err != nil {
			return fmt.Errorf("commit %s: %w", tr.RequestID, err)
		}
	}
	return nil
}

// Commit's races, each set up as the turns concurrent commits leave
// behind. A request run through Pending.Start commits with the tip Start
// read (the newest turn then), which turns committed meanwhile make stale:
// the slot after the tip is taken, and Commit finds the turn to take by
// inserting, fencing against every taken slot it meets.
func TestMongoStoreCommitRaces(t *testing.T) {
	t.Parallel()
	db := testenv.MongoDB(t)
	tests := []struct {
		name string
		cfg  history.MongoConfig
		// before is committed first; then the conversation document is
		// left at lag turns, when lag >= 0.
		before []history.Turn
		lag    int64
		// start runs turn's request through Pending.Start before meanwhile
		// is committed, and commits it with the tip Start read; else turn
		// goes to Store.Commit (no tip) after meanwhile.
		start     bool
		meanwhile []history.Turn
		turn      history.Turn
		// want: ErrFenced, another error, or the turn.
		fenced, fails bool
		n             int64
		duplicate     bool
		// history is the request ids persisted afterwards.
		history string
	}{
		{
			name:   "A stale tip whose next slot a newer record's turn took meanwhile fences the commit (the fence on the taken slot).",
			before: []history.Turn{sourced("a", 1)}, lag: -1,
			start: true, meanwhile: []history.Turn{sourced("b", 5)},
			turn: sourced("c", 3), fenced: true, history: "1:a 2:a 3:b 4:b",
		},
		{
			name:   "Reading on past the taken slot of a stale tip fences on a newer record further up.",
			before: []history.Turn{sourced("a", 1)}, lag: -1,
			start: true, meanwhile: []history.Turn{sourced("b", 2), sourced("d", 9)},
			turn: sourced("c", 5), fenced: true, history: "1:a 2:a 3:b 4:b 5:d 6:d",
		},
		{
			name:   "Reading on past the taken slot of a stale tip commits at the first free turn, with the second insert.",
			cfg:    history.MongoConfig{CommitAttempts: 2},
			before: []history.Turn{sourced("a", 1)}, lag: -1,
			start: true, meanwhile: []history.Turn{sourced("b", 2), sourced("d", 3)},
			turn: sourced("c", 5), n: 4, history: "1:a 2:a 3:b 4:b 5:d 6:d 7:c 8:c",
		},
		{
			name:   "A stale tip's commit takes the seqs after the last message of the turns of several parts committed meanwhile.",
			before: []history.Turn{sourced("a", 1)}, lag: -1,
			start: true, meanwhile: []history.Turn{inParts(sourced("b", 2), 3), inParts(sourced("d", 3), 2)},
			turn: sourced("c", 5), n: 4, history: "1:a 2:a 3:b 4:b 5:b 6:b 7:d 8:d 9:d 10:c 11:c",
		},
		{
			name:   "A stale tip's commit of several parts after one taken slot follows that turn's last message.",
			before: []history.Turn{inParts(sourced("a", 1), 2)}, lag: -1,
			start: true, meanwhile: []history.Turn{inParts(sourced("b", 2), 4)},
			turn: sourced("c", 5), n: 3, history: "1:a 2:a 3:a 4:b 5:b 6:b 7:b 8:b 9:c 10:c",
		},
		{
			name:   "A request another worker committed past the taken slot of a stale tip is reported as a duplicate at its turn, found reading on (no second insert).",
			cfg:    history.MongoConfig{CommitAttempts: 1},
			before: []history.Turn{sourced("a", 1)}, lag: -1,
			start: true, meanwhile: []history.Turn{sourced("b", 2), sourced("c", 5)},
			turn: sourced("c", 5), n: 3, duplicate: true, history: "1:a 2:a 3:b 4:b 5:c 6:c",
		},
		{
			name:   "Commit gives up once CommitAttempts inserts found their turn taken (a stale tip), persisting nothing.",
			cfg:    history.MongoConfig{CommitAttempts: 1},
			before: []history.Turn{sourced("a", 1)}, lag: -1,
			start: true, meanwhile: []history.Turn{sourced("b", 2), sourced("d", 3)},
			turn: sourced("c", 5), fails: true, history: "1:a 2:a 3:b 4:b 5:d 6:d",
		},
		{
			name:   "Commit without a tip takes the turn after the newest one with one insert, however far the conversation document lags.",
			cfg:    history.MongoConfig{CommitAttempts: 1},
			before: []history.Turn{sourced("a", 1), sourced("b", 2), sourced("d", 3)}, lag: 1,
			turn: sourced("c", 5), n: 4, history: "1:a 2:a 3:b 4:b 5:d 6:d 7:c 8:c",
		},
		{
			name:   "Commit without a tip fences against the newest turn, however far the conversation document lags.",
			before: []history.Turn{sourced("a", 1), sourced("b", 5)}, lag: 0,
			turn: sourced("c", 3), fenced: true, history: "1:a 2:a 3:b 4:b",
		},
		{
			name:   "A request committed below the newest turn is refused by the request id's unique index and reported as a duplicate at its turn.",
			before: []history.Turn{sourced("a", 1), sourced("c", 2), unsourced("x")}, lag: -1,
			turn: sourced("c", 2), n: 2, duplicate: true, history: "1:a 2:a 3:c 4:c 5:x 6:x",
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
			if err := commitAll(ctx, s, id, tt.before); err != nil {
				t.Fatal(err)
			}
			if tt.lag >= 0 {
				if err := history.SetConversationTurns(ctx, s, id, tt.lag); err != nil {
					t.Fatal(err)
				}
			}
			var c history.Committed
			if tt.start {
				p := history.Begin(s, id, tt.turn.RequestID, tt.turn.User, tt.turn.UserAt)
				p.SetSource(*tt.turn.Source)
				if st, err := p.Start(ctx, 4); err != nil || st.Decided || st.Cancelled {
					t.Fatalf("Start = %+v, %v; want the window", st, err)
				}
				if err := commitAll(ctx, s, id, tt.meanwhile); err != nil {
					t.Fatal(err)
				}
				c, err = p.Commit(ctx, tt.turn.Answer, tt.turn.Agent, tt.turn.Status, tt.turn.CommittedAt)
			} else {
				if err := commitAll(ctx, s, id, tt.meanwhile); err != nil {
					t.Fatal(err)
				}
				c, err = s.Commit(ctx, id, tt.turn)
			}
			switch {
			case tt.fenced:
				if !errors.Is(err, history.ErrFenced) {
					t.Fatalf("commit = %+v, %v; want ErrFenced", c, err)
				}
			case tt.fails:
				if err == nil || errors.Is(err, history.ErrFenced) || errors.Is(err, events.ErrInvalid) {
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
			if got := mustList(t, ctx, s, id); got != tt.history {
				t.Fatalf("history %s, want %s", got, tt.history)
			}
		})
	}
}
