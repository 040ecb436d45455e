package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// docs/api.md: clients ignore members they do not know in response bodies;
// later versions add members without a version bump.
func TestAnswersWithMembersTheClientDoesNotKnowAreRead(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "POST /v1/conversations/c1/messages":
			w.WriteHeader(http.StatusAccepted)
			w.Write([]byte(`{"request_id":"r1","conversation":"c1","status":"queued","x_position":3}`))
		case "GET /v1/conversations/c1/messages":
			w.Write([]byte(`{"x_page":{"total":2},"messages":[
				{"seq":1,"role":"user","content":"hi","request_id":"r1","agent":"","created_at":"2026-11-30T00:37:41.123Z","x_edited":false},
				{"seq":2,"role":"assistant","content":"echo #1: hi","request_id":"r1","agent":"assistant","created_at":"2026-11-30T00:37:41.456Z",
				 "status":"interrupted","incomplete":true,"usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4,"cached_tokens":0},
				 "interrupt":{"agent":"assistant","tool":"ask_user","question":"Which one?","options":["a"]},"x_model":"echo"}
			],"next_before":null}`))
		default:
			http.Error(w, `{"error":{"code":"not_found","message":"no"}}`, http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	c := &Client{BaseURL: srv.URL, Token: "t"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	a, err := c.Send(ctx, "c1", "hi", SendOptions{})
	if err != nil {
		t.Fatalf("Send: an answer with an unknown member: %v", err)
	}
	if want := (Accepted{RequestID: "r1", Conversation: "c1", Status: "queued"}); a != want {
		t.Errorf("Send = %+v, want %+v", a, want)
	}

	p, err := c.History(ctx, "c1", 0, 0)
	if err != nil {
		t.Fatalf("History: a page with unknown members: %v", err)
	}
	want := HistoryPage{Messages: []Message{
		{Seq: 1, Role: "user", Content: "hi", RequestID: "r1", CreatedAt: time.Date(2026, 11, 30, 0, 37, 41, 123e6, time.UTC)},
		{Seq: 2, Role: "assistant", Content: "echo #1: hi", RequestID: "r1", Agent: "assistant", CreatedAt: time.Date(2026, 11, 30, 0, 37, 41, 456e6, time.UTC),
			Status: "interrupted", Incomplete: true, Usage: &events.Usage{PromptTokens: 1, CompletionTokens: 3, TotalTokens: 4},
			Interrupt: &events.Interrupt{Agent: "assistant", Tool: "ask_user", Question: "Which one?"}},
	}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("History = %+v, want %+v", p, want)
	}
}

func TestTurnsGroupsAPageByTurnWithOneAssistantMessagePerAgent(t *testing.T) {
	t.Parallel()
	msgs := []Message{
		{Seq: 2, Role: "assistant", RequestID: "r1", Agent: "desk", Content: "cut by the page"},
		{Seq: 3, Role: "user", RequestID: "r2", Content: "where is ORD-7?"},
		{Seq: 4, Role: "assistant", RequestID: "r2", Agent: "orders", Content: "ORD-7 left warehouse B yesterday."},
		{Seq: 5, Role: "assistant", RequestID: "r2", Agent: "desk", Content: "It is on its way.", Usage: &events.Usage{TotalTokens: 41}},
		{Seq: 6, Role: "user", RequestID: "r3", Content: "thanks"},
	}
	got := Turns(msgs)
	var summary []string
	for _, tr := range got {
		s := tr.RequestID + ":"
		if tr.User != nil {
			s += " user " + tr.User.Content + ";"
		}
		for _, a := range tr.Assistant {
			s += " " + a.Agent + " " + a.Content + ";"
		}
		summary = append(summary, s)
	}
	want := []string{"r1: desk cut by the page;", "r2: user where is ORD-7?; orders ORD-7 left warehouse B yesterday.; desk It is on its way.;", "r3: user thanks;"}
	if !reflect.DeepEqual(summary, want) {
		t.Fatalf("Turns = %q, want %q", summary, want)
	}
	if last, ok := got[1].Last(); !ok || last.Usage == nil || last.Agent != "desk" {
		t.Errorf("Last of r2 = %+v, %v; want the desk's message with the usage", last, ok)
	}
	if _, ok := got[2].Last(); ok {
		t.Errorf("Last of a turn without assistant messages reported one")
	}
}

// Reset posts the parts it names to …/state/reset (both when none is
// named), with the Idempotency-Key, and reads the 202.
func TestResetPostsThePartsToTheResetResource(t *testing.T) {
	t.Parallel()
	type seen struct{ path, body, key string }
	got := make(chan seen, 3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method + " " + r.URL.EscapedPath(), string(b), r.Header.Get("Idempotency-Key")}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte(`{"request_id":"r9","conversation":"c 1","status":"queued"}`))
	}))
	t.Cleanup(srv.Close)
	c := &Client{BaseURL: srv.URL, Token: "t"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		o    ResetOptions
		want seen
	}{
		{ResetOptions{}, seen{"POST /v1/conversations/c%201/state/reset", `{"agent":true,"state":true}`, ""}},
		{ResetOptions{Agent: true, IdempotencyKey: "k1"}, seen{"POST /v1/conversations/c%201/state/reset", `{"agent":true,"state":false}`, "k1"}},
		{ResetOptions{State: true}, seen{"POST /v1/conversations/c%201/state/reset", `{"agent":false,"state":true}`, ""}},
	} {
		a, err := c.Reset(ctx, "c 1", tc.o)
		if err != nil || a != (Accepted{RequestID: "r9", Conversation: "c 1", Status: "queued"}) {
			t.Fatalf("Reset(%+v) = %+v, %v", tc.o, a, err)
		}
		if s := <-got; s != tc.want {
			t.Errorf("Reset(%+v) sent %+v, want %+v", tc.o, s, tc.want)
		}
	}
}
