package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

func TestListMessagesPage(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 678901234, time.FixedZone("X", -5*3600))
	alice := events.Identity{Tenant: "acme", User: "alice", Conversation: "c1"}
	page := history.Page{
		Messages: []history.Message{
			{Seq: 3, Role: history.RoleUser, Content: "[[tokens:2]] <hi>", RequestID: "r-1", CreatedAt: at},
			{Seq: 4, Role: history.RoleAssistant, Content: "w1 w2", RequestID: "r-1", Agent: "echo", CreatedAt: at.Add(time.Second), Status: events.StatusComplete},
			{Seq: 5, Role: history.RoleUser, Content: "again", RequestID: "i-2", CreatedAt: at.Add(2 * time.Second)},
			{Seq: 6, Role: history.RoleAssistant, Content: "echo #2:", RequestID: "i-2", Agent: "echo", CreatedAt: at.Add(3 * time.Second), Status: events.StatusIncomplete},
			{Seq: 8, Role: history.RoleAssistant, Content: "stop", RequestID: "i-3", Agent: "echo", CreatedAt: at, Status: events.StatusCancelled,
				Usage: &events.Usage{PromptTokens: 9, CompletionTokens: 1, TotalTokens: 10}},
			{Seq: 10, Role: history.RoleAssistant, Content: "", RequestID: "i-4", Agent: "assistant", CreatedAt: at, Status: events.StatusInterrupted,
				Interrupt: &history.Interrupt{Agent: "assistant", Tool: "ask_user", Question: "Which city?", Targets: []string{"internal"}}},
		},
		NextBefore: 3,
	}
	h := &fakeHistory{pages: map[events.Identity]history.Page{
		alice: page,
		{Tenant: "acme", User: "alice", Conversation: "empty"}: {},
	}}
	s := newTestService(t, Config{}, nil, h, nil)
	tok := token(t, "acme", "alice")

	w := s.do(http.MethodGet, messagesURL+"?limit=5&before=9", tok, "", nil)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d; body %s", w.Code, w.Body)
	}
	want := `{"messages":[` +
		`{"seq":3,"role":"user","content":"[[tokens:2]] \u003chi\u003e","request_id":"r-1","agent":"","created_at":"2026-01-02T08:04:05.678Z"},` +
		`{"seq":4,"role":"assistant","content":"w1 w2","request_id":"r-1","agent":"echo","created_at":"2026-01-02T08:04:06.678Z","status":"complete","incomplete":false},` +
		`{"seq":5,"role":"user","content":"again","request_id":"i-2","agent":"","created_at":"2026-01-02T08:04:07.678Z"},` +
		`{"seq":6,"role":"assistant","content":"echo #2:","request_id":"i-2","agent":"echo","created_at":"2026-01-02T08:04:08.678Z","status":"incomplete","incomplete":true},` +
		`{"seq":8,"role":"assistant","content":"stop","request_id":"i-3","agent":"echo","created_at":"2026-01-02T08:04:05.678Z","status":"cancelled","incomplete":true,` +
		`"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}},` +
		`{"seq":10,"role":"assistant","content":"","request_id":"i-4","agent":"assistant","created_at":"2026-01-02T08:04:05.678Z","status":"interrupted","incomplete":true,` +
		`"interrupt":{"agent":"assistant","tool":"ask_user","question":"Which city?"}}` +
		`],"next_before":3}`
	if !sameJSON(t, w.Body.String(), want) {
		t.Errorf("body\n%s\nwant\n%s", w.Body, want)
	}
	if c := h.lastCall(t); c != (listCall{alice, 9, 5}) {
		t.Errorf("List(%+v), want List(%+v)", c, listCall{alice, 9, 5})
	}

	w = s.do(http.MethodGet, "/v1/conversations/empty/messages", tok, "", nil)
	if want := `{"messages":[],"next_before":null}`; w.Code != http.StatusOK || !sameJSON(t, w.Body.String(), want) {
		t.Errorf("empty page: %d %s, want 200 %s", w.Code, w.Body, want)
	}
}

func TestListMessagesQuery(t *testing.T) {
	t.Parallel()
	alice := events.Identity{Tenant: "acme", User: "alice", Conversation: "c1"}
	tests := []struct {
		name       string
		query      string
		cfg        Config
		wantStatus int
		wantBefore int64
		wantLimit  int
	}{
		{name: "Without parameters the newest default page is read.", query: "", wantStatus: 200, wantLimit: 50},
		{name: "The configured default page size is used.", query: "", cfg: Config{HistoryDefaultLimit: 7}, wantStatus: 200, wantLimit: 7},
		{name: "A limit of 1 is accepted.", query: "?limit=1", wantStatus: 200, wantLimit: 1},
		{name: "A limit of the maximum is accepted.", query: "?limit=200", wantStatus: 200, wantLimit: 200},
		{name: "Before 1 is accepted.", query: "?before=1", wantStatus: 200, wantBefore: 1, wantLimit: 50},
		{name: "A large before is accepted.", query: "?before=9007199254740993&limit=3", wantStatus: 200, wantBefore: 9007199254740993, wantLimit: 3},
		{name: "Unknown parameters are ignored.", query: "?limit=2&_=123", wantStatus: 200, wantLimit: 2},
		{name: "A limit of 0 is rejected.", query: "?limit=0", wantStatus: 400},
		{name: "A limit over the maximum is rejected.", query: "?limit=201", wantStatus: 400},
		{name: "A limit over a configured maximum is rejected.", query: "?limit=11", cfg: Config{HistoryDefaultLimit: 10, HistoryMaxLimit: 10}, wantStatus: 400},
		{name: "A negative limit is rejected.", query: "?limit=-1", wantStatus: 400},
		{name: "A limit that is not a number is rejected.", query: "?limit=ten", wantStatus: 400},
		{name: "A fractional limit is rejected.", query: "?limit=1.5", wantStatus: 400},
		{name: "An empty limit is rejected.", query: "?limit=", wantStatus: 400},
		{name: "A limit given twice is rejected.", query: "?limit=1&limit=2", wantStatus: 400},
		{name: "Before 0 is rejected.", query: "?before=0", wantStatus: 400},
		{name: "A negative before is rejected.", query: "?before=-3", wantStatus: 400},
		{name: "A before that is not a number is rejected.", query: "?before=latest", wantStatus: 400},
		{name: "A before beyond int64 is rejected.", query: "?before=9223372036854775808", wantStatus: 400},
		{name: "An empty before is rejected.", query: "?before=", wantStatus: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := &fakeHistory{pages: map[events.Identity]history.Page{alice: {}}}
			s := newTestService(t, tt.cfg, nil, h, nil)
			w := s.do(http.MethodGet, messagesURL+tt.query, token(t, "acme", "alice"), "", nil)
			if tt.wantStatus != http.StatusOK {
				checkError(t, w, tt.wantStatus, server.CodeInvalidArgument)
				if h.callCount() != 0 {
					t.Error("history read for a rejected query")
				}
				return
			}
			if w.Code != http.StatusOK {
				t.Fatalf("status %d; body %s", w.Code, w.Body)
			}
			if c := h.lastCall(t); c != (listCall{alice, tt.wantBefore, tt.wantLimit}) {
				t.Errorf("List(%+v), want List(%+v)", c, listCall{alice, tt.wantBefore, tt.wantLimit})
			}
		})
	}
}

func TestListMessagesErrors(t *testing.T) {
	t.Parallel()
	alice := events.Identity{Tenant: "acme", User: "alice", Conversation: "c1"}
	tests := []struct {
		name   string
		path   string
		tenant string
		user   string
		err    error
		status int
		code   string
	}{
		{name: "An unknown conversation is not found.", path: "/v1/conversations/c2/messages", tenant: "acme", user: "alice", status: 404, code: server.CodeNotFound},
		{name: "Another user's conversation of the same name is not found.", path: messagesURL, tenant: "acme", user: "bob", status: 404, code: server.CodeNotFound},
		{name: "Another tenant's conversation of the same name is not found.", path: messagesURL, tenant: "globex", user: "alice", status: 404, code: server.CodeNotFound},
		{name: "A wrapped not-found from the store is not found.", path: messagesURL, tenant: "acme", user: "alice", err: fmt.Errorf("list: %w", history.ErrNotFound), status: 404, code: server.CodeNotFound},
		{name: "A store failure is internal and does not leak.", path: messagesURL, tenant: "acme", user: "alice", err: errors.New("mongo: connection refused at 10.0.0.7"), status: 500, code: server.CodeInternal},
		{name: "A conversation breaking the ID rule is rejected.", path: "/v1/conversations/bad%24id/messages", tenant: "acme", user: "alice", status: 400, code: server.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := &fakeHistory{pages: map[events.Identity]history.Page{alice: {}}, err: tt.err}
			s := newTestService(t, Config{}, nil, h, nil)
			w := s.do(http.MethodGet, tt.path, token(t, tt.tenant, tt.user), "", nil)
			msg := checkError(t, w, tt.status, tt.code)
			if tt.status == http.StatusInternalServerError {
				if strings.Contains(msg, "10.0.0.7") {
					t.Errorf("message %q leaks the store error", msg)
				}
				if logs := s.logs.String(); !strings.Contains(logs, "10.0.0.7") || !strings.Contains(logs, "level=ERROR") {
					t.Errorf("log %q: want the store error at level ERROR", logs)
				}
			}
		})
	}
}

func TestListMessagesWhenTheClientGoesAwayIsNotAnErrorLog(t *testing.T) {
	t.Parallel()
	h := &fakeHistory{err: context.Canceled}
	s := newTestService(t, Config{}, nil, h, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := newAuthedRequest(t, ctx, http.MethodGet, messagesURL)
	s.Handler().ServeHTTP(discardWriter{}, r)
	if logs := s.logs.String(); strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, "context canceled") {
		t.Errorf("log %q: want the cancellation below level ERROR", logs)
	}
}

// sameJSON reports whether two JSON texts hold the same values (key order
// and escaping aside; a missing key and a null one differ).
func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}
