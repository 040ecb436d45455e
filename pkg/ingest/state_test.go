package ingest

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

const stateURL = "/v1/conversations/c1/state"

// commitState commits turn n of id with change c in store.
func commitState(t *testing.T, ctx context.Context, store history.Store, id events.Identity, n int, c *history.StateChange) {
	t.Helper()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(n) * time.Minute)
	if _, err := store.Commit(ctx, id, history.Turn{RequestID: "r-" + string(rune('0'+n)), User: "q", UserAt: at,
		Answer: "a", Agent: "assistant", Status: events.StatusComplete, CommittedAt: at, State: c}); err != nil {
		t.Fatalf("Commit(%s, %d): %v", id, n, err)
	}
}

func op(key, value string) history.StateOp { return history.StateOp{Key: key, Value: []byte(value)} }

func TestGetStateReturnsTheNewestTurnsStateAndTheUsersOwn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := history.NewMemoryStore()
	alice := events.Identity{Tenant: "acme", User: "alice", Conversation: "c1"}
	commitState(t, ctx, store, alice, 1, &history.StateChange{
		Conversation: []history.StateOp{op("cart", `["apple",{"n":2}]`), op("lang", `"fr"`)},
		User:         []history.StateOp{op("language", `"fr"`)},
		Tenant:       []history.StateOp{op("banner", `"sale"`)},
		Agent:        "billing",
	})
	s := newTestService(t, Config{}, nil, &fakeHistory{state: store}, nil)
	tok := token(t, "acme", "alice")

	w := s.do(http.MethodGet, stateURL, tok, "", nil)
	want := `{"conversation":"c1","state":{"cart":["apple",{"n":2}],"lang":"fr"},"active_agent":"billing","user":{"language":"fr"}}`
	if w.Code != http.StatusOK || !sameJSON(t, w.Body.String(), want) {
		t.Fatalf("GET state after turn 1: %d %s, want 200 %s (no tenant: key)", w.Code, w.Body, want)
	}

	// Turn 2 deletes cart and hands the conversation back to the root; a
	// later request that started and was discarded (as a fenced, aborted
	// or failed run is: it never commits) changes nothing.
	commitState(t, ctx, store, alice, 2, &history.StateChange{Conversation: []history.StateOp{{Key: "cart"}}})
	p := history.Begin(store, alice, "r-3", "q", time.Now())
	if _, err := p.Start(ctx, 10); err != nil {
		t.Fatal(err)
	}
	p.Discard()
	_, _ = p.CommitAnswer(ctx, history.Answer{Text: "x", Status: events.StatusComplete,
		State: &history.StateChange{Conversation: []history.StateOp{op("lang", `"de"`)}, Agent: "sales"}})
	w = s.do(http.MethodGet, stateURL, tok, "", nil)
	want = `{"conversation":"c1","state":{"lang":"fr"},"user":{"language":"fr"}}`
	if w.Code != http.StatusOK || !sameJSON(t, w.Body.String(), want) {
		t.Fatalf("GET state after turn 2 and a discarded run: %d %s, want 200 %s (active_agent absent: the root)", w.Code, w.Body, want)
	}
}

func TestGetStateOfAnotherIdentityIsWhatAConversationNeverHadGets(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := history.NewMemoryStore()
	commitState(t, ctx, store, events.Identity{Tenant: "acme", User: "alice", Conversation: "c1"}, 1, &history.StateChange{
		Conversation: []history.StateOp{op("cart", `["apple"]`)}, User: []history.StateOp{op("card", `"4242"`)}, Agent: "billing"})
	// Bob has a conversation of his own (another name), with user state.
	commitState(t, ctx, store, events.Identity{Tenant: "acme", User: "bob", Conversation: "mine"}, 1, &history.StateChange{
		User: []history.StateOp{op("lang", `"de"`)}})
	s := newTestService(t, Config{}, nil, &fakeHistory{state: store}, nil)

	never := s.do(http.MethodGet, "/v1/conversations/never/state", token(t, "acme", "alice"), "", nil)
	checkError(t, never, http.StatusNotFound, server.CodeNotFound)
	for _, tc := range []struct{ name, tenant, user string }{
		{"Another user of the tenant gets what a conversation never had gets.", "acme", "bob"},
		{"The same user name in another tenant gets what a conversation never had gets.", "globex", "alice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := s.do(http.MethodGet, stateURL, token(t, tc.tenant, tc.user), "", nil)
			checkError(t, w, http.StatusNotFound, server.CodeNotFound)
			if got, want := strings.ReplaceAll(w.Body.String(), "never", "c1"), strings.ReplaceAll(never.Body.String(), "never", "c1"); got != want {
				t.Errorf("body %s, want the body of a conversation never had: %s", got, want)
			}
		})
	}
	t.Run("Another user's own conversation shows only his user state.", func(t *testing.T) {
		w := s.do(http.MethodGet, "/v1/conversations/mine/state", token(t, "acme", "bob"), "", nil)
		if want := `{"conversation":"mine","state":{},"user":{"lang":"de"}}`; w.Code != http.StatusOK || !sameJSON(t, w.Body.String(), want) {
			t.Errorf("bob's state: %d %s, want 200 %s", w.Code, w.Body, want)
		}
	})
}

func TestGetStateErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		method    string
		path      string
		tok       bool
		err       error
		status    int
		code      string
		wantAllow string
	}{
		{name: "A conversation breaking the ID rule is rejected.", method: http.MethodGet, path: "/v1/conversations/bad%24id/state", tok: true, status: 400, code: server.CodeInvalidArgument},
		{name: "A missing token is unauthenticated.", method: http.MethodGet, path: stateURL, status: 401, code: server.CodeUnauthenticated},
		{name: "A store failure is internal and does not leak.", method: http.MethodGet, path: stateURL, tok: true, err: errors.New("mongo: connection refused at 10.0.0.7"), status: 500, code: server.CodeInternal},
		{name: "A wrapped not-found from the store is not found.", method: http.MethodGet, path: stateURL, tok: true, err: errors.Join(errors.New("x"), history.ErrNotFound), status: 404, code: server.CodeNotFound},
		{name: "POST is a JSON 405 with Allow.", method: http.MethodPost, path: stateURL, tok: true, status: 405, code: server.CodeMethodNotAllowed, wantAllow: "GET, HEAD"},
		{name: "DELETE is a JSON 405 with Allow.", method: http.MethodDelete, path: stateURL, tok: true, status: 405, code: server.CodeMethodNotAllowed, wantAllow: "GET, HEAD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newTestService(t, Config{}, nil, &fakeHistory{err: tt.err}, nil)
			tok := ""
			if tt.tok {
				tok = token(t, "acme", "alice")
			}
			w := s.do(tt.method, tt.path, tok, "", nil)
			msg := checkError(t, w, tt.status, tt.code)
			if got := w.Header().Get("Allow"); got != tt.wantAllow {
				t.Errorf("Allow %q, want %q", got, tt.wantAllow)
			}
			if tt.status == http.StatusInternalServerError && strings.Contains(msg, "10.0.0.7") {
				t.Errorf("message %q leaks the store error", msg)
			}
		})
	}
}

func TestGetStateIsCountedUnderItsRoute(t *testing.T) {
	t.Parallel()
	s := newTestService(t, Config{}, nil, &fakeHistory{}, nil)
	tok := token(t, "acme", "alice")
	s.do(http.MethodGet, stateURL, tok, "", nil)
	s.do(http.MethodGet, stateURL, tok, "", nil)
	s.do(http.MethodPut, stateURL, tok, "", nil)
	for _, c := range []struct {
		route, code string
		want        float64
	}{{"GET " + statePath, "404", 2}, {statePath, "405", 1}} {
		m := findMetric(t, s.reg, "turnpike_ingest_http_requests_total", map[string]string{"route": c.route, "code": c.code})
		if got := m.GetCounter().GetValue(); got != c.want {
			t.Errorf("http_requests_total{route=%q,code=%q} = %v, want %v", c.route, c.code, got, c.want)
		}
	}
}
