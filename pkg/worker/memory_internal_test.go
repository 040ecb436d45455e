package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// What is remembered of a commit: the question and the persisted answer
// of a new complete or incomplete turn (parts joined by a blank line);
// nothing of a cancelled, interrupted, failed or discarded turn, of a
// duplicate (a redelivery), of a commit that persisted nothing (N 0), or
// of a turn with no text at all.
func TestTurnMemoryRemembersOnlyNewCompleteOrIncompleteTurns(t *testing.T) {
	t.Parallel()
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "a"}
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	text := history.Answer{Text: "Noted.", At: at}
	for _, tc := range []struct {
		name     string
		question string
		a        history.Answer
		c        history.Committed
		answer   string // "" : nothing remembered
	}{
		{"complete", "My sister lives in Lisbon", text, history.Committed{N: 3, Status: events.StatusComplete}, "Noted."},
		{"incomplete", "My sister lives in Lisbon", text, history.Committed{N: 3, Status: events.StatusIncomplete}, "Noted."},
		{"parts", "plan a trip", history.Answer{Parts: []history.Part{{Agent: "a", Text: "one"}, {Agent: "b", Text: "two"}}, At: at},
			history.Committed{N: 3, Status: events.StatusComplete}, "one\n\ntwo"},
		{"cancelled", "My sister lives in Lisbon", text, history.Committed{N: 3, Status: events.StatusCancelled}, ""},
		{"interrupted", "My sister lives in Lisbon", text, history.Committed{N: 3, Status: events.StatusInterrupted}, ""},
		{"failed", "My sister lives in Lisbon", text, history.Committed{N: 3, Status: events.StatusFailed}, ""},
		{"discarded", "My sister lives in Lisbon", text, history.Committed{N: 3, Status: events.StatusDiscarded}, ""},
		{"duplicate", "My sister lives in Lisbon", text, history.Committed{N: 3, Status: events.StatusComplete, Duplicate: true}, ""},
		{"nothing persisted", "My sister lives in Lisbon", text, history.Committed{N: 0, Status: events.StatusComplete}, ""},
		{"no text", " \n", history.Answer{At: at}, history.Committed{N: 3, Status: events.StatusIncomplete}, ""},
	} {
		m := turnMemory(id, "r1", tc.question, tc.a, tc.c)
		switch {
		case tc.answer == "" && m != nil:
			t.Errorf("%s: remembered %+v; want nothing", tc.name, *m)
		case tc.answer != "" && m == nil:
			t.Errorf("%s: nothing remembered; want the turn", tc.name)
		case tc.answer != "" && (m.Identity != id || m.Turn != 3 || m.RequestID != "r1" || m.Question != tc.question || m.Answer != tc.answer || !m.At.Equal(at)):
			t.Errorf("%s: remembered %+v; want turn 3 of r1 answered %q at %v", tc.name, *m, tc.answer, at)
		}
	}
}

// MemoryConfig's defaults (SearchTimeout's included), and the agent
// file's search_timeout_ms in milliseconds; a negative timeout is refused.
func TestMemoryConfigDefaultsAndTheAgentFilesSearchTimeout(t *testing.T) {
	t.Parallel()
	d := MemoryConfig{}.withDefaults()
	if d.K != DefaultMemoryK || d.TokenBudget != DefaultMemoryTokenBudget || d.SearchTimeout != DefaultMemorySearchTimeout {
		t.Fatalf("defaults %+v", d)
	}
	if c := (&memorySpec{Inject: true, SearchTimeoutMS: 250}).config(); c.SearchTimeout != 250*time.Millisecond {
		t.Fatalf("search_timeout_ms 250: %v", c.SearchTimeout)
	}
	if err := (MemoryConfig{SearchTimeout: -time.Second}).validate(); err == nil {
		t.Fatal("a negative search timeout is valid")
	}
}

// ctxMemory is a MemoryService whose searches return their context's
// error.
type ctxMemory struct{ history.MemoryService }

func (ctxMemory) Search(ctx context.Context, _, _, _ string, _ int) ([]history.MemoryHit, error) {
	return nil, ctx.Err()
}

// A search_memory call ended by its run's end (the context done) returns
// the error, not the failure result, and is not counted as the service's
// failure.
func TestSearchMemoryEndedByTheRunsEndIsAnError(t *testing.T) {
	t.Parallel()
	failed := 0
	m := &Memory{svc: ctxMemory{}, tenant: "acme", user: "alice", toolFailed: func() { failed++ }}
	ctx, cancel := context.WithCancel(withMemory(context.Background(), m))
	cancel()
	out, err := searchMemory{}.InvokableRun(ctx, `{"query":"otters"}`)
	if !errors.Is(err, context.Canceled) || out != "" || failed != 0 {
		t.Fatalf("InvokableRun on a done context = %q, %v (counted %d); want context.Canceled, uncounted", out, err, failed)
	}
}
