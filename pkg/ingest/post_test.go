package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

const messagesURL = "/v1/conversations/c1/messages"

// padTo pads a JSON object body with trailing whitespace inside the object
// to exactly n bytes.
func padTo(t *testing.T, body string, n int) string {
	t.Helper()
	if len(body) > n {
		t.Fatalf("body of %d bytes already over %d", len(body), n)
	}
	return body[:len(body)-1] + strings.Repeat(" ", n-len(body)) + "}"
}

func TestPostMessageErrors(t *testing.T) {
	t.Parallel()
	tok := token(t, "acme", "alice")
	maxContent := strings.Repeat("a", events.DefaultMaxContentBytes)
	tests := []struct {
		name     string
		path     string
		body     string
		header   map[string]string
		producer recordProducer
		status   int
		code     string
	}{
		{name: "A conversation breaking the ID rule is rejected.", path: "/v1/conversations/a%2Fb/messages", body: `{"content":"hi"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A conversation of 129 bytes is rejected.", path: "/v1/conversations/" + strings.Repeat("c", 129) + "/messages", body: `{"content":"hi"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A conversation with a space is rejected.", path: "/v1/conversations/a%20b/messages", body: `{"content":"hi"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A text/plain Content-Type is rejected.", body: `{"content":"hi"}`, header: map[string]string{"Content-Type": "text/plain"}, status: 400, code: server.CodeInvalidArgument},
		{name: "A JSON Content-Type in latin1 is rejected.", body: `{"content":"hi"}`, header: map[string]string{"Content-Type": "application/json; charset=latin1"}, status: 400, code: server.CodeInvalidArgument},
		{name: "A malformed Content-Type is rejected.", body: `{"content":"hi"}`, header: map[string]string{"Content-Type": "application/json; ;"}, status: 400, code: server.CodeInvalidArgument},
		{name: "An empty body is rejected.", body: ``, status: 400, code: server.CodeInvalidArgument},
		{name: "A body that is not JSON is rejected.", body: `content=hi`, status: 400, code: server.CodeInvalidArgument},
		{name: "A JSON array is rejected.", body: `[{"content":"hi"}]`, status: 400, code: server.CodeInvalidArgument},
		{name: "A JSON string is rejected.", body: `"hi"`, status: 400, code: server.CodeInvalidArgument},
		{name: "JSON null is rejected.", body: `null`, status: 400, code: server.CodeInvalidArgument},
		{name: "An unknown field is rejected.", body: `{"content":"hi","extra":1}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A tenant in the body is rejected, not trusted.", body: `{"content":"hi","tenant":"evil"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A case variant of a field name is rejected.", body: `{"Content":"hi"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A duplicate field is rejected.", body: `{"content":"hi","content":"there"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "Trailing data after the object is rejected.", body: `{"content":"hi"}{}`, status: 400, code: server.CodeInvalidArgument},
		{name: "Trailing garbage after the object is rejected.", body: `{"content":"hi"} x`, status: 400, code: server.CodeInvalidArgument},
		{name: "A truncated object is rejected.", body: `{"content":"hi"`, status: 400, code: server.CodeInvalidArgument},
		{name: "Content as a number is rejected.", body: `{"content":5}`, status: 400, code: server.CodeInvalidArgument},
		{name: "Content as null is rejected.", body: `{"content":null}`, status: 400, code: server.CodeInvalidArgument},
		{name: "Content as an object is rejected.", body: `{"content":{"text":"hi"}}`, status: 400, code: server.CodeInvalidArgument},
		{name: "Strategy as a boolean is rejected.", body: `{"content":"hi","strategy":true}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A missing content is rejected.", body: `{"strategy":"enqueue"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "Empty content is rejected.", body: `{"content":""}`, status: 400, code: server.CodeInvalidArgument},
		{name: "Content with an escaped NUL is rejected.", body: `{"content":"a\u0000b"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "Content starting with an escaped NUL is rejected.", body: `{"content":"\u0000ab"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "Content ending with an escaped NUL is rejected.", body: `{"content":"ab\u0000"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "Content of a NUL alone is rejected.", body: `{"content":"\u0000"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "Content with invalid UTF-8 is rejected, not repaired.", body: "{\"content\":\"a\xffb\"}", status: 400, code: server.CodeInvalidArgument},
		{name: "Content with a truncated UTF-8 sequence is rejected.", body: "{\"content\":\"a\xe2\x82\"}", status: 400, code: server.CodeInvalidArgument},
		{name: "Content one byte over the limit is too large.", body: `{"content":"` + maxContent + `b"}`, status: 413, code: server.CodePayloadTooLarge},
		{name: "A body one byte over the limit is too large.", body: padTo(t, `{"content":"hi"}`, DefaultMaxBodyBytes+1), status: 413, code: server.CodePayloadTooLarge},
		{name: "A body far over the limit is too large.", body: `{"content":"` + strings.Repeat("x", 1<<20) + `"}`, status: 413, code: server.CodePayloadTooLarge},
		{name: "An unknown strategy is rejected.", body: `{"content":"hi","strategy":"later"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A strategy in capitals is rejected.", body: `{"content":"hi","strategy":"ENQUEUE"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "An empty strategy is rejected: leave it out for enqueue.", body: `{"content":"hi","strategy":""}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A lone high surrogate is rejected, not stored as U+FFFD.", body: `{"content":"a\ud800b"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A lone high surrogate at the end is rejected.", body: `{"content":"a\uD800"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A lone low surrogate is rejected.", body: `{"content":"a\udc00b"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "Two high surrogates are rejected.", body: `{"content":"\ud83d\ud83d"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "A high surrogate before another escape is rejected.", body: `{"content":"\ud83d\n"}`, status: 400, code: server.CodeInvalidArgument},
		{name: "An Idempotency-Key breaking the ID rule is rejected.", body: `{"content":"hi"}`, header: map[string]string{"Idempotency-Key": "a/b"}, status: 400, code: server.CodeInvalidArgument},
		{name: "An Idempotency-Key of 129 bytes is rejected.", body: `{"content":"hi"}`, header: map[string]string{"Idempotency-Key": strings.Repeat("k", 129)}, status: 400, code: server.CodeInvalidArgument},
		{name: "An empty Idempotency-Key is rejected.", body: `{"content":"hi"}`, header: map[string]string{"Idempotency-Key": ""}, status: 400, code: server.CodeInvalidArgument},
		{name: "A failing producer is unavailable.", body: `{"content":"hi"}`, producer: &fakeProducer{err: errors.New("broker down")}, status: 503, code: server.CodeUnavailable},
		{name: "A producer that does not finish in time is unavailable.", body: `{"content":"hi"}`, producer: &fakeProducer{block: true}, status: 503, code: server.CodeUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newTestService(t, Config{ProduceTimeout: 20 * time.Millisecond}, tt.producer, nil, nil)
			path := tt.path
			if path == "" {
				path = messagesURL
			}
			w := s.do(http.MethodPost, path, tok, tt.body, tt.header)
			checkError(t, w, tt.status, tt.code)
			wantRetry := ""
			if tt.status == http.StatusServiceUnavailable {
				wantRetry = "1"
			}
			if got := w.Header().Get("Retry-After"); got != wantRetry {
				t.Errorf("Retry-After %q, want %q", got, wantRetry)
			}
			if n := len(s.producer.all()); n != 0 {
				t.Errorf("%d records produced for a rejected request", n)
			}
		})
	}
}

func TestPostMessageTwoIdempotencyKeysAreRejected(t *testing.T) {
	t.Parallel()
	s := newTestService(t, Config{}, nil, nil, nil)
	r := httptest.NewRequestWithContext(s.ctx, http.MethodPost, messagesURL, strings.NewReader(`{"content":"hi"}`))
	r.Header.Set("Authorization", "Bearer "+token(t, "acme", "alice"))
	r.Header.Add("Idempotency-Key", "k1")
	r.Header.Add("Idempotency-Key", "k2")
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	checkError(t, w, http.StatusBadRequest, server.CodeInvalidArgument)
}

var randomID = regexp.MustCompile(`^r-[0-9a-f]{32}$`)

func TestPostMessageAccepted(t *testing.T) {
	t.Parallel()
	maxContent := strings.Repeat("é", events.DefaultMaxContentBytes/2) // 2 bytes each
	tests := []struct {
		name         string
		body         string
		header       map[string]string
		wantContent  string
		wantStrategy string
	}{
		{name: "A minimal message is queued with strategy enqueue.", body: `{"content":"hello"}`, wantContent: "hello", wantStrategy: "enqueue"},
		{name: "Each strategy is passed on.", body: `{"strategy":"interrupt","content":"hello"}`, wantContent: "hello", wantStrategy: "interrupt"},
		{name: "Reject is passed on.", body: `{"content":"hello","strategy":"reject"}`, wantContent: "hello", wantStrategy: "reject"},
		{name: "An explicit enqueue is passed on.", body: `{"content":"hello","strategy":"enqueue"}`, wantContent: "hello", wantStrategy: "enqueue"},
		{name: "A surrogate pair is the character it encodes.", body: `{"content":"hi \ud83d\ude00"}`, wantContent: "hi \U0001F600", wantStrategy: "enqueue"},
		{name: "The first surrogate pair is U+10000.", body: `{"content":"\ud800\udc00"}`, wantContent: "\U00010000", wantStrategy: "enqueue"},
		{name: "The last surrogate pair is U+10FFFF.", body: `{"content":"\udbff\udfff"}`, wantContent: "\U0010FFFF", wantStrategy: "enqueue"},
		{name: "An escaped backslash before u is no escape.", body: `{"content":"\\ud800"}`, wantContent: `\ud800`, wantStrategy: "enqueue"},
		{name: "Content is sent verbatim, echo directives included.", body: `{"content":"[[delay:5ms]] [[tokens:3]] <b>&amp;</b> \"q\" \\ \u2028 😀"}`, wantContent: "[[delay:5ms]] [[tokens:3]] <b>&amp;</b> \"q\" \\ \u2028 😀", wantStrategy: "enqueue"},
		{name: "Content of exactly the limit is accepted.", body: `{"content":"` + maxContent + `"}`, wantContent: maxContent, wantStrategy: "enqueue"},
		// '<' is 6 bytes in an HTML-escaped record and U+2028 always is: the
		// record must still be one the worker accepts (checked below).
		{name: "Content of the limit in characters JSON may escape is accepted.", body: `{"content":"` + strings.Repeat("<", events.DefaultMaxContentBytes) + `"}`, wantContent: strings.Repeat("<", events.DefaultMaxContentBytes), wantStrategy: "enqueue"},
		{name: "Content of line separators up to the limit is accepted.", body: `{"content":"` + strings.Repeat("\u2028", events.DefaultMaxContentBytes/3) + `"}`, wantContent: strings.Repeat("\u2028", events.DefaultMaxContentBytes/3), wantStrategy: "enqueue"},
		{name: "A body of exactly the limit is accepted.", body: padTo(t, `{"content":"hi"}`, DefaultMaxBodyBytes), wantContent: "hi", wantStrategy: "enqueue"},
		{name: "curl's default form Content-Type is accepted, the body still parsed as JSON.", body: `{"content":"hi"}`, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, wantContent: "hi", wantStrategy: "enqueue"},
		{name: "A JSON Content-Type with charset utf-8 is accepted.", body: `{"content":"hi"}`, header: map[string]string{"Content-Type": "Application/JSON; charset=UTF-8"}, wantContent: "hi", wantStrategy: "enqueue"},
		{name: "Whitespace around the object is accepted.", body: "\n {\"content\" : \"hi\" } \n", wantContent: "hi", wantStrategy: "enqueue"},
		{name: "Control characters other than NUL, at the start, middle and end, are content.", body: `{"content":"\u0001a\u001bb\u007f"}`, wantContent: "\x01a\x1bb\x7f", wantStrategy: "enqueue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newTestService(t, Config{}, nil, nil, nil)
			w := s.do(http.MethodPost, messagesURL, token(t, "acme", "alice"), tt.body, tt.header)
			if w.Code != http.StatusAccepted {
				t.Fatalf("status %d, want 202; body %s", w.Code, w.Body)
			}
			var resp map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
				t.Fatal(err)
			}
			id, _ := resp["request_id"].(string)
			if !randomID.MatchString(id) {
				t.Errorf("request_id %q, want r- and 32 hex digits", id)
			}
			want := map[string]any{"request_id": id, "conversation": "c1", "status": "queued"}
			if !jsonEqual(resp, want) {
				t.Errorf("body %v, want %v", resp, want)
			}
			recs := s.producer.all()
			if len(recs) != 1 {
				t.Fatalf("%d records, want 1", len(recs))
			}
			if got := string(recs[0].key); got != "acme/alice/c1" {
				t.Errorf("key %q, want acme/alice/c1", got)
			}
			if !recs[0].deadline {
				t.Error("Produce ran without a deadline")
			}
			var rec map[string]any
			if err := json.Unmarshal(recs[0].value, &rec); err != nil {
				t.Fatal(err)
			}
			wantRec := map[string]any{
				"v": 1.0, "request_id": id, "tenant": "acme", "user": "alice", "conversation": "c1",
				"content": tt.wantContent, "strategy": tt.wantStrategy,
				"created_at": "2026-03-14T14:09:26.535897932Z",
			}
			if !jsonEqual(rec, wantRec) {
				t.Errorf("record %s,\nwant %v", recs[0].value, wantRec)
			}
			// The worker must accept what ingest accepted.
			if _, err := events.DecodeRequest(recs[0].value, 0); err != nil {
				t.Errorf("DecodeRequest of the produced record: %v", err)
			}
		})
	}
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func TestPostMessageRequestIDs(t *testing.T) {
	t.Parallel()
	post := func(t *testing.T, s *testService, tenant, user, conv, key string) string {
		t.Helper()
		var h map[string]string
		if key != "" {
			h = map[string]string{"Idempotency-Key": key}
		}
		w := s.do(http.MethodPost, "/v1/conversations/"+conv+"/messages", token(t, tenant, user), `{"content":"hi"}`, h)
		if w.Code != http.StatusAccepted {
			t.Fatalf("status %d; body %s", w.Code, w.Body)
		}
		var resp struct {
			RequestID string `json:"request_id"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
			t.Fatal(err)
		}
		return resp.RequestID
	}
	s := newTestService(t, Config{}, nil, nil, nil)
	sum := sha256.Sum256([]byte("acme\x00alice\x00c1\x00key-1"))
	want := "i-" + hex.EncodeToString(sum[:])[:32]

	first := post(t, s, "acme", "alice", "c1", "key-1")
	if first != want {
		t.Errorf("keyed request_id %q, want %q", first, want)
	}
	if again := post(t, s, "acme", "alice", "c1", "key-1"); again != first {
		t.Errorf("the same identity and key gave %q, then %q", first, again)
	}
	other := newTestService(t, Config{}, nil, nil, nil)
	if elsewhere := post(t, other, "acme", "alice", "c1", "key-1"); elsewhere != first {
		t.Errorf("another ingest instance gave %q for the same key, want %q", elsewhere, first)
	}
	for _, c := range []struct{ name, tenant, user, conv, key string }{
		{"another user", "acme", "bob", "c1", "key-1"},
		{"another tenant", "globex", "alice", "c1", "key-1"},
		{"another conversation", "acme", "alice", "c2", "key-1"},
		{"another key", "acme", "alice", "c1", "key-2"},
		{"shifted separators", "acme", "alice", "c1", "key-1x"},
	} {
		if got := post(t, s, c.tenant, c.user, c.conv, c.key); got == first {
			t.Errorf("%s gave the same request_id %q", c.name, got)
		}
	}

	recs := s.producer.all()
	var rec events.Request
	if err := json.Unmarshal(recs[0].value, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.RequestID != first {
		t.Errorf("record request_id %q, want the answered %q", rec.RequestID, first)
	}

	r1, r2 := post(t, s, "acme", "alice", "c1", ""), post(t, s, "acme", "alice", "c1", "")
	if !randomID.MatchString(r1) || r1 == r2 {
		t.Errorf("unkeyed request ids %q and %q: want two different r- ids", r1, r2)
	}
	fixed := newTestService(t, Config{}, nil, nil, bytes.NewReader(bytes.Repeat([]byte{0xab}, 16)))
	if got := post(t, fixed, "acme", "alice", "c1", ""); got != "r-"+strings.Repeat("ab", 16) {
		t.Errorf("request_id from a fixed random source %q", got)
	}
	// The fixed source is now empty: no id, no record, a 500.
	w := fixed.do(http.MethodPost, messagesURL, token(t, "acme", "alice"), `{"content":"hi"}`, nil)
	checkError(t, w, http.StatusInternalServerError, server.CodeInternal)
	if n := len(fixed.producer.all()); n != 1 {
		t.Errorf("%d records, want only the first", n)
	}
}

func TestPostMessageIdentityComesFromTheToken(t *testing.T) {
	t.Parallel()
	s := newTestService(t, Config{}, nil, nil, nil)
	for _, c := range []struct{ tenant, user, wantKey string }{
		{"acme", "alice", "acme/alice/c1"},
		{"globex", "alice", "globex/alice/c1"},
		{"acme", "bob", "acme/bob/c1"},
		{"default", "carol", "default/carol/c1"},
	} {
		w := s.do(http.MethodPost, messagesURL, token(t, c.tenant, c.user), `{"content":"hi"}`, nil)
		if w.Code != http.StatusAccepted {
			t.Fatalf("status %d; body %s", w.Code, w.Body)
		}
		recs := s.producer.all()
		last := recs[len(recs)-1]
		if string(last.key) != c.wantKey {
			t.Errorf("key %q, want %q", last.key, c.wantKey)
		}
		var rec events.Request
		if err := json.Unmarshal(last.value, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Tenant != c.tenant || rec.User != c.user || rec.Conversation != "c1" {
			t.Errorf("record identity %s, want %s", rec.Identity(), c.wantKey)
		}
	}
}

func TestPostMessageProducesEvenWhenTheClientGoesAway(t *testing.T) {
	t.Parallel()
	s := newTestService(t, Config{}, nil, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, messagesURL, strings.NewReader(`{"content":"hi"}`))
	r.Header.Set("Authorization", "Bearer "+token(t, "acme", "alice"))
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	if w.Code != http.StatusAccepted || len(s.producer.all()) != 1 {
		t.Errorf("status %d with %d records; want 202 and the record produced", w.Code, len(s.producer.all()))
	}
}

func TestPostMessageLogsFailuresWithoutContent(t *testing.T) {
	t.Parallel()
	const secret = "SECRET-CONTENT-7f3a"
	s := newTestService(t, Config{}, &fakeProducer{err: errors.New("broker down")}, nil, nil)
	w := s.do(http.MethodPost, messagesURL, token(t, "acme", "alice"), `{"content":"`+secret+`"}`, nil)
	checkError(t, w, http.StatusServiceUnavailable, server.CodeUnavailable)
	logs := s.logs.String()
	for _, want := range []string{"broker down", "tenant=acme", "user=alice", "conversation=c1", "request_id=r-"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log %q: want %q", logs, want)
		}
	}
	if strings.Contains(logs, secret) {
		t.Errorf("log %q contains the message content", logs)
	}
	if strings.Contains(w.Body.String(), "broker down") {
		t.Errorf("body %s leaks the internal error", w.Body)
	}
}

// An unknown field is named in the error, clipped after 32 bytes: a name
// of exactly 32 whole, a longer one as its first 32 and an ellipsis.
func TestPostMessageNamesAnUnknownFieldClippedAfter32Bytes(t *testing.T) {
	t.Parallel()
	s := newTestService(t, Config{}, nil, nil, nil)
	for _, name := range []string{strings.Repeat("x", 32), strings.Repeat("y", 33)} {
		w := s.do(http.MethodPost, messagesURL, token(t, "acme", "alice"), `{"content":"hi","`+name+`":1}`, nil)
		want := name
		if len(name) > 32 {
			want = name[:32] + "…"
		}
		var body struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != http.StatusBadRequest ||
			!strings.HasSuffix(body.Error.Message, fmt.Sprintf("unknown field %q", want)) {
			t.Errorf("a %d-byte unknown field: %d %s, want 400 naming %q", len(name), w.Code, w.Body, want)
		}
	}
}
