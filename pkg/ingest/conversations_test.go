package ingest

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

const conversationsURL = "/v1/conversations"

func TestListConversationsPage(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	h := &fakeHistory{convPage: history.ConversationPage{
		Conversations: []history.Conversation{
			{Conversation: "c2", UpdatedAt: at.In(time.FixedZone("X", 3600)), Messages: 4},
			{Conversation: "chat.2026-01:a@b", UpdatedAt: at.Add(-time.Hour), Messages: 2},
		},
		Next: history.ConversationCursor{UpdatedAt: at.Add(-time.Hour), Conversation: "chat.2026-01:a@b"},
	}}
	s := newTestService(t, Config{}, nil, h, nil)
	w := s.do(http.MethodGet, conversationsURL, token(t, "acme", "alice"), "", nil)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d; body %s", w.Code, w.Body)
	}
	want := `{"conversations":[` +
		`{"conversation":"c2","updated_at":"2026-01-02T03:04:05.678Z","messages":4},` +
		`{"conversation":"chat.2026-01:a@b","updated_at":"2026-01-02T02:04:05.678Z","messages":2}` +
		`],"next_before":"1767319445678:chat.2026-01:a@b"}`
	if !sameJSON(t, w.Body.String(), want) {
		t.Errorf("body\n%s\nwant\n%s", w.Body, want)
	}
	if c, _ := h.lastConvCall(t); c != (convCall{tenant: "acme", user: "alice", limit: 50}) {
		t.Errorf("Conversations(%+v), want acme/alice from the token, no cursor, the default limit", c)
	}

	// The next_before of a page, passed back, is that page's cursor.
	w = s.do(http.MethodGet, conversationsURL+"?limit=2&before=1767319445678:chat.2026-01:a@b", token(t, "acme", "alice"), "", nil)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d; body %s", w.Code, w.Body)
	}
	c, _ := h.lastConvCall(t)
	if !c.before.UpdatedAt.Equal(at.Add(-time.Hour)) || c.before.Conversation != "chat.2026-01:a@b" || c.limit != 2 {
		t.Errorf("Conversations(%+v): want the cursor of next_before and limit 2", c)
	}
}

func TestListConversationsOfNobodyIsAnEmptyLastPage(t *testing.T) {
	t.Parallel()
	s := newTestService(t, Config{}, nil, &fakeHistory{convPage: history.ConversationPage{Conversations: []history.Conversation{}}}, nil)
	w := s.do(http.MethodGet, conversationsURL, token(t, "acme", "nobody"), "", nil)
	if want := `{"conversations":[],"next_before":null}`; w.Code != http.StatusOK || !sameJSON(t, w.Body.String(), want) {
		t.Errorf("%d %s, want 200 %s", w.Code, w.Body, want)
	}
}

func TestListConversationsQuery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		query      string
		cfg        Config
		wantStatus int
		wantLimit  int
		wantBefore history.ConversationCursor
	}{
		{name: "Without parameters the newest default page is read.", query: "", wantStatus: 200, wantLimit: 50},
		{name: "The configured default page size is used.", query: "", cfg: Config{HistoryDefaultLimit: 7}, wantStatus: 200, wantLimit: 7},
		{name: "A limit of the maximum is accepted.", query: "?limit=200", wantStatus: 200, wantLimit: 200},
		{name: "An escaped cursor is accepted.", query: "?before=1000%3Ac1", wantStatus: 200, wantLimit: 50, wantBefore: history.ConversationCursor{UpdatedAt: time.UnixMilli(1000).UTC(), Conversation: "c1"}},
		{name: "A limit of 0 is rejected.", query: "?limit=0", wantStatus: 400},
		{name: "A limit over the maximum is rejected.", query: "?limit=201", wantStatus: 400},
		{name: "A cursor without a separator is rejected.", query: "?before=1000", wantStatus: 400},
		{name: "A cursor without a time is rejected.", query: "?before=:c1", wantStatus: 400},
		{name: "A cursor at time 0 is rejected.", query: "?before=0:c1", wantStatus: 400},
		{name: "A cursor at a negative time is rejected.", query: "?before=-5:c1", wantStatus: 400},
		{name: "A cursor past year 9999 is rejected.", query: "?before=253402300800000:c1", wantStatus: 400},
		{name: "A cursor without a conversation is rejected.", query: "?before=1000:", wantStatus: 400},
		{name: "A cursor whose conversation breaks the ID rule is rejected.", query: "?before=1000:c%241", wantStatus: 400},
		{name: "A sequence number is not a cursor.", query: "?before=5", wantStatus: 400},
		{name: "A cursor given twice is rejected.", query: "?before=1000:c1&before=1000:c2", wantStatus: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := &fakeHistory{}
			s := newTestService(t, tt.cfg, nil, h, nil)
			w := s.do(http.MethodGet, conversationsURL+tt.query, token(t, "acme", "alice"), "", nil)
			if tt.wantStatus != http.StatusOK {
				checkError(t, w, tt.wantStatus, server.CodeInvalidArgument)
				if len(h.convCalls) != 0 {
					t.Error("history read for a rejected query")
				}
				return
			}
			if w.Code != http.StatusOK {
				t.Fatalf("status %d; body %s", w.Code, w.Body)
			}
			c, _ := h.lastConvCall(t)
			if c.limit != tt.wantLimit || !c.before.UpdatedAt.Equal(tt.wantBefore.UpdatedAt) || c.before.Conversation != tt.wantBefore.Conversation {
				t.Errorf("Conversations(%+v), want limit %d before %+v", c, tt.wantLimit, tt.wantBefore)
			}
		})
	}
}

func TestListConversationsErrors(t *testing.T) {
	t.Parallel()
	t.Run("Without a token it is unauthenticated and reads nothing.", func(t *testing.T) {
		t.Parallel()
		h := &fakeHistory{}
		s := newTestService(t, Config{}, nil, h, nil)
		checkError(t, s.do(http.MethodGet, conversationsURL, "", "", nil), http.StatusUnauthorized, server.CodeUnauthenticated)
		if len(h.convCalls) != 0 {
			t.Error("history read without a token")
		}
	})
	t.Run("A store failure is internal and does not leak.", func(t *testing.T) {
		t.Parallel()
		s := newTestService(t, Config{}, nil, &fakeHistory{err: errors.New("mongo: 10.0.0.7 refused")}, nil)
		msg := checkError(t, s.do(http.MethodGet, conversationsURL, token(t, "acme", "alice"), "", nil), http.StatusInternalServerError, server.CodeInternal)
		if strings.Contains(msg, "10.0.0.7") {
			t.Errorf("message %q leaks the store error", msg)
		}
		if logs := s.logs.String(); !strings.Contains(logs, "10.0.0.7") {
			t.Errorf("log %q: want the store error", logs)
		}
	})
	t.Run("POST is a JSON 405 with Allow.", func(t *testing.T) {
		t.Parallel()
		s := newTestService(t, Config{}, nil, nil, nil)
		w := s.do(http.MethodPost, conversationsURL, token(t, "acme", "alice"), "{}", nil)
		checkError(t, w, http.StatusMethodNotAllowed, server.CodeMethodNotAllowed)
		if got := w.Header().Get("Allow"); got != "GET, HEAD" {
			t.Errorf("Allow %q, want GET, HEAD", got)
		}
	})
}

func TestConversationCursorRoundTrips(t *testing.T) {
	t.Parallel()
	for _, c := range []history.ConversationCursor{
		{UpdatedAt: time.UnixMilli(1).UTC(), Conversation: "a"},
		{UpdatedAt: time.Date(2026, 11, 30, 0, 37, 42, 456_000_000, time.UTC), Conversation: "x:y:z"},
		{UpdatedAt: time.UnixMilli(maxCursorMillis).UTC(), Conversation: strings.Repeat("z", 128)},
	} {
		s := formatCursor(c)
		got, err := cursorParam(map[string][]string{"before": {s}}, "before")
		if err != nil || !got.UpdatedAt.Equal(c.UpdatedAt) || got.Conversation != c.Conversation {
			t.Errorf("cursorParam(formatCursor(%+v) = %q) = %+v, %v", c, s, got, err)
		}
	}
}
