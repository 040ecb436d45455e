package ingest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"unicode/utf8"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// FuzzPostMessage sends arbitrary bodies, Content-Types and conversation
// names through the whole handler. Whatever comes in: the answer is 202,
// 400 or 413; an error is in the JSON error shape with the code of its
// status; a 202 produced exactly one record whose content is what a
// standard JSON decoder reads from the body, valid UTF-8.
func FuzzPostMessage(f *testing.F) {
	for _, seed := range []struct{ conv, ctype, body string }{
		{"c1", "application/json", `{"content":"hello"}`},
		{"c1", "", `{"content":"hi","strategy":"interrupt"}`},
		{"c1", "application/json", `{"content":"a\ud800b"}`},
		{"c1", "application/json", `{"content":"\ud83d\ude00","strategy":""}`},
		{"c1", "application/json", `{"content":"x","Content":"y"}`},
		{"..", "text/plain", `{"content":"x"}`},
		{"c1", "application/json; charset=latin1", "{\"content\":\"\xff\"}"},
	} {
		f.Add(seed.conv, seed.ctype, []byte(seed.body))
	}
	tok := token(f, "acme", "alice")
	f.Fuzz(func(t *testing.T, conv, ctype string, body []byte) {
		s := newTestService(t, Config{RatePerSecond: -1}, nil, nil, nil)
		hdr := map[string]string{}
		if ctype != "" {
			hdr["Content-Type"] = ctype
		}
		w := s.do(http.MethodPost, "/v1/conversations/"+url.PathEscape(conv)+"/messages", tok, string(body), hdr)
		records := s.producer.all()
		switch w.Code {
		case http.StatusAccepted:
			if len(records) != 1 {
				t.Fatalf("202 with %d records", len(records))
			}
			req, err := events.DecodeRequest(records[0].value, 0)
			if err != nil {
				t.Fatalf("202 produced a record that does not decode: %v", err)
			}
			var std struct{ Content string }
			if err := json.Unmarshal(body, &std); err != nil || std.Content != req.Content || !utf8.ValidString(req.Content) {
				t.Fatalf("202 for %q stored content %q; a standard decoder reads %q (%v)", body, req.Content, std.Content, err)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusNotFound:
			if len(records) != 0 {
				t.Fatalf("status %d with %d records", w.Code, len(records))
			}
			checkError(t, w, w.Code, server.CodeFor(w.Code))
		default:
			t.Fatalf("status %d for %q: want 202, 400, 404 or 413", w.Code, body)
		}
	})
}

// FuzzDecodeStringFields checks the strict decoder against encoding/json:
// whatever it accepts, a standard decoder reads the same strings from.
func FuzzDecodeStringFields(f *testing.F) {
	for _, seed := range []string{`{"request_id":"r-1","answer":"yes"}`, `{"answer":"\u00e9","request_id":""}`,
		`{"request_id":"a","request_id":"b","answer":""}`, `{"Answer":"x"}`, `{"answer":"\udfff","request_id":"r"}`, `[]`, `{"answer":1}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeStringFields(b, []string{"request_id"}, []string{"answer"})
		if err != nil {
			return
		}
		var std map[string]any
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&std); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", b, err)
		}
		if len(std) != len(got) {
			t.Fatalf("accepted %q as %v; encoding/json reads %v", b, got, std)
		}
		for k, v := range got {
			if std[k] != v || !utf8.ValidString(v) {
				t.Fatalf("accepted %q: %s = %q; encoding/json reads %q", b, k, v, std[k])
			}
		}
	})
}
