package ingest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

const resumeURL = "/v1/conversations/c1/resume"

func TestPostResumeErrors(t *testing.T) {
	t.Parallel()
	tok := token(t, "acme", "alice")
	tests := []struct {
		name   string
		path   string
		body   string
		header map[string]string
		status int
		code   string
	}{
		{name: "A body without request_id is rejected.", body: `{"answer":"yes"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A body without answer is rejected.", body: `{"request_id":"r-1"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "An empty answer is rejected.", body: `{"request_id":"r-1","answer":""}`, status: 400, code: server.CodeInvalidArgument},
		{name: "An answer with NUL is rejected.", body: `{"request_id":"r-1","answer":"a\u0000"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A request_id breaking the ID rule is rejected.", body: `{"request_id":"r 1","answer":"yes"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "An unknown field is rejected.", body: `{"request_id":"r-1","answer":"yes","content":"x"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A duplicate field is rejected.", body: `{"request_id":"r-1","answer":"yes","answer":"no"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A numeric answer is rejected.", body: `{"request_id":"r-1","answer":5}`, status: 400, code: server.CodeInvalidArgument},
		{name: "Trailing data is rejected.", body: `{"request_id":"r-1","answer":"yes"}{}`, status: 400, code: server.CodeInvalidArgument},
		{name: "Invalid UTF-8 is rejected.", body: "{\"request_id\":\"r-1\",\"answer\":\"\xff\"}", status: 400, code: server.CodeInvalidArgument},
		{name: "An answer over the content limit is too large.", body: `{"request_id":"r-1","answer":"` + strings.Repeat("a", events.DefaultMaxContentBytes+1) + `"}`, status: 413, code: server.CodePayloadTooLarge},
		{name: "A bad conversation is rejected.", path: "/v1/conversations/a%2Fb/resume", body: `{"request_id":"r-1","answer":"yes"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A bad Idempotency-Key is rejected.", body: `{"request_id":"r-1","answer":"yes"}`, header: map[string]string{"Idempotency-Key": "a b"}, status: 400, code: server.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newTestService(t, Config{}, nil, nil, nil)
			path := tt.path
			if path == "" {
				path = resumeURL
			}
			checkError(t, s.do(http.MethodPost, path, tok, tt.body, tt.header), tt.status, tt.code)
			if n := len(s.producer.all()); n != 0 {
				t.Errorf("%d records produced for a rejected resume", n)
			}
		})
	}
}

func TestPostResumeQueuesARecordThatResumesTheRequest(t *testing.T) {
	t.Parallel()
	s := newTestService(t, Config{}, nil, nil, nil)
	tok := token(t, "acme", "alice")
	w := s.do(http.MethodPost, resumeURL, tok, `{"request_id":"r-0","answer":"Paris, please"}`, nil)
	if w.Code != http.StatusAccepted {
		t.Fatalf("status %d, want 202: %s", w.Code, w.Body)
	}
	var resp struct {
		RequestID    string `json:"request_id"`
		Conversation string `json:"conversation"`
		Status       string `json:"status"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || !randomID.MatchString(resp.RequestID) || resp.Conversation != "c1" || resp.Status != "queued" {
		t.Fatalf("202 body %s (%v)", w.Body, err)
	}
	recs := s.producer.all()
	if len(recs) != 1 || string(recs[0].key) != "acme/alice/c1" {
		t.Fatalf("records %+v", recs)
	}
	req, err := events.DecodeRequest(recs[0].value, 0)
	if err != nil {
		t.Fatalf("the worker cannot decode the record: %v", err)
	}
	if req.ResumeOf != "r-0" || req.Content != "Paris, please" || req.RequestID != resp.RequestID || req.Strategy != events.StrategyEnqueue {
		t.Fatalf("record %+v", req)
	}
	if w := s.do(http.MethodGet, resumeURL, tok, "", nil); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET %s: %d, want 405", resumeURL, w.Code)
	}
	if w := s.do(http.MethodPost, resumeURL, "", `{"request_id":"r-0","answer":"x"}`, nil); w.Code != http.StatusUnauthorized {
		t.Errorf("POST without a token: %d, want 401", w.Code)
	}
}

func TestResumeIdempotencyKeysDoNotCollideWithMessages(t *testing.T) {
	t.Parallel()
	s := newTestService(t, Config{}, nil, nil, nil)
	tok := token(t, "acme", "alice")
	key := map[string]string{"Idempotency-Key": "k-1"}
	ids := map[string]bool{}
	for _, call := range []struct{ path, body string }{
		{messagesURL, `{"content":"hi"}`},
		{resumeURL, `{"request_id":"r-0","answer":"yes"}`},
		{resumeURL, `{"request_id":"r-0","answer":"yes"}`},
	} {
		w := s.do(http.MethodPost, call.path, tok, call.body, key)
		var resp struct {
			RequestID string `json:"request_id"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != http.StatusAccepted {
			t.Fatalf("%s: %d %s", call.path, w.Code, w.Body)
		}
		ids[resp.RequestID] = true
	}
	if len(ids) != 2 {
		t.Fatalf("request ids %v: want the message's and one for both resumes", ids)
	}
}
