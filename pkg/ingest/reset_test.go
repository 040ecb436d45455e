package ingest

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

const resetURL = "/v1/conversations/c1/state/reset"

func TestPostResetErrors(t *testing.T) {
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
		{name: "A reset that clears nothing is rejected.", body: `{"state":false,"agent":false}`, status: 400, code: server.CodeInvalidArgument},
		{name: "An empty object clears nothing and is rejected.", body: `{}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A null body clears nothing and is rejected.", body: `null`, status: 400, code: server.CodeInvalidArgument},
		{name: "An unknown field is rejected.", body: `{"state":true,"user":true}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A duplicate field is rejected.", body: `{"state":true,"state":false}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A part given as a string is rejected.", body: `{"state":"yes"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A body that is not an object is rejected.", body: `[true]`, status: 400, code: server.CodeInvalidArgument},
		{name: "Trailing data is rejected.", body: `{"state":true}{}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A bad conversation is rejected.", path: "/v1/conversations/a%2Fb/state/reset", status: 400, code: server.CodeInvalidArgument},
		{name: "A bad Idempotency-Key is rejected.", header: map[string]string{"Idempotency-Key": "a b"}, status: 400, code: server.CodeInvalidArgument},
		{name: "A body over 1 KiB is too large.", body: `{"state":true` + string(make([]byte, 2048)) + `}`, status: 413, code: server.CodePayloadTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newTestService(t, Config{}, nil, nil, nil)
			path := tt.path
			if path == "" {
				path = resetURL
			}
			checkError(t, s.do(http.MethodPost, path, tok, tt.body, tt.header), tt.status, tt.code)
			if n := len(s.producer.all()); n != 0 {
				t.Errorf("%d records produced for a rejected reset", n)
			}
		})
	}
}

// A reset is queued as a reset record of the token's identity: the
// conversation of the path is only ever the caller's own.
func TestPostResetQueuesAResetOfTheCallersConversation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		want       events.Reset
	}{
		{"Without a body both parts are reset.", "", events.Reset{State: true, Agent: true}},
		{"The state alone.", `{"state":true}`, events.Reset{State: true}},
		{"The agent alone.", `{"agent":true,"state":false}`, events.Reset{Agent: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newTestService(t, Config{}, nil, nil, nil)
			for _, who := range []string{"alice", "bob"} {
				w := s.do(http.MethodPost, resetURL, token(t, "acme", who), tc.body, nil)
				if w.Code != http.StatusAccepted {
					t.Fatalf("%s: status %d, want 202: %s", who, w.Code, w.Body)
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
				rec := recs[len(recs)-1]
				if string(rec.key) != "acme/"+who+"/c1" {
					t.Fatalf("%s's reset keyed %q, want acme/%s/c1", who, rec.key, who)
				}
				req, err := events.DecodeRequest(rec.value, 0)
				if err != nil {
					t.Fatalf("the worker cannot decode the record: %v", err)
				}
				if req.Reset == nil || *req.Reset != tc.want || req.User != who || req.Tenant != "acme" || req.Content != "" || req.RequestID != resp.RequestID {
					t.Fatalf("%s's record %+v (reset %+v), want a reset %+v of acme/%s", who, req, req.Reset, tc.want, who)
				}
			}
		})
	}
	s := newTestService(t, Config{}, nil, nil, nil)
	if w := s.do(http.MethodGet, resetURL, token(t, "acme", "alice"), "", nil); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET %s: %d, want 405", resetURL, w.Code)
	}
	if w := s.do(http.MethodPost, resetURL, "", "", nil); w.Code != http.StatusUnauthorized {
		t.Errorf("POST without a token: %d, want 401", w.Code)
	}
}
