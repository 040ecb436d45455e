package events_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		fullRecord,
		minimalRecord,
		`{"v":1,"request_id":"i-5f2b","tenant":"default","user":"alice","conversation":"support:42","content":"[[fail-after:3]] why?","strategy":"interrupt","created_at":"2025-06-01T10:00:00.5+02:00"}`,
		`{"v":1,"tenant":"acme","user":"bob","conversation":"c1","content":"<b>&amp;</b> \u2028 \ud83d\ude00 \"q\" \\ \n","strategy":"reject"}`,
		`{"v":1,"tenant":"acme","user":"bob","conversation":"c1","content":"\ud800"}`,
		`{"v":1,"tenant":"acme","Tenant":"evil","user":"bob","conversation":"c1","content":"x"}`,
		`{"v":1,"tenant":"acme","user":"bob","conversation":"c1","content":"x"} {}`,
		`{"v":2}`,
		`[]`,
		`{"v":1,"request_id":"r-2","tenant":"acme","user":"bob","conversation":"c1","content":"yes, Paris","resume_of":"r-1"}`,
		`{"v":1,"request_id":"r-1","tenant":"acme","user":"bob","conversation":"c1","content":"x","resume_of":"r-1"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := events.DecodeRequest(b, 0)
		if err != nil {
			if !errors.Is(err, events.ErrInvalid) {
				t.Fatalf("DecodeRequest error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if err := r.Validate(0); err != nil {
			t.Fatalf("decoded request does not validate: %v", err)
		}
		enc, err := events.EncodeRequest(r)
		if err != nil {
			// Only a created_at outside years 0..9999 cannot be encoded,
			// and RFC 3339 cannot express one.
			t.Fatalf("EncodeRequest(%+v): %v", r, err)
		}
		again, err := events.DecodeRequest(enc, 0)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		if !requestsEqual(r, again) {
			t.Fatalf("round trip changed the request:\n%+v\n%+v", r, again)
		}
		enc2, err := events.EncodeRequest(again)
		if err != nil || string(enc2) != string(enc) {
			t.Fatalf("encoding is not stable: %s then %s (%v)", enc, enc2, err)
		}
	})
}

func FuzzDecodeEvent(f *testing.F) {
	for _, seed := range []string{
		runStartedJSON, tokenJSON, noticeJSON, runCompletedJSON, tokenCursorJSON, transferJSON, interruptedJSON, usageJSON,
		artifactJSON, stateJSON,
		`{"type":"artifact.saved","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":2,"ts":1,"artifact":{"name":"user:a\u00e9","version":9007199254740993,"mime_type":"a/b; q=\"x\"","size":0},"cursor":"1-2"}`,
		`{"type":"run.interrupted","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":3,"ts":1,"interrupt":{"agent":"a","tool":"t","question":"\u2028\ud83d\ude00é","Tool":"x"}}`,
		`{"type":"run.completed","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":4,"ts":1,"status":"interrupted","usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0},"cursor":"1-2-3"}`,
		`{"type":"agent.transfer","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":2,"ts":1,"from":"","to":"b","usage":null}`,
		`{"type":"token","conversation":"c1","request_id":"r-1","run_id":"run-2","seq":9,"ts":1,"delta":"\u2028\b\f\u0001\\\"é😀","agent":"","role":"assistant","cursor":"2-99"}`,
		`{"type":"run.completed","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":2,"ts":5,"status":"rejected","cursor":null}`,
		`{"type":"token","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":2,"ts":5,"delta":"\ud83d","agent":"a","role":"r"}`,
		`{"type":"notice","type":"token"}`,
		`{"type":"subscribed","conversation":"c1"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := events.DecodeEvent(b)
		if err != nil {
			if e != nil {
				t.Fatalf("DecodeEvent returned %#v with error %v", e, err)
			}
			if !errors.Is(err, events.ErrInvalid) {
				t.Fatalf("DecodeEvent error %v does not wrap ErrInvalid", err)
			}
			return
		}
		enc := events.MarshalEvent(e)
		again, err := events.DecodeEvent(enc)
		if err != nil {
			t.Fatalf("re-decoding %q (from %q): %v", enc, b, err)
		}
		if !reflect.DeepEqual(e, again) {
			t.Fatalf("round trip changed the event:\n%#v\n%#v", e, again)
		}
		if enc2 := events.MarshalEvent(again); string(enc2) != string(enc) {
			t.Fatalf("encoding is not stable:\n%q\n%q", enc, enc2)
		}
	})
}

func FuzzParseKey(f *testing.F) {
	for _, seed := range []string{
		"acme/alice/c1", "default/bob@example.com/support:42", "a/b", "a/b/c/d", "//", "", "a/b/c\x00", "a/b/\xff",
		strings.Repeat("t", 128) + "/u/c", strings.Repeat("t", 129) + "/u/c",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		id, err := events.ParseKey(key)
		// Reference: exactly three parts, each following the ID rule.
		parts := strings.Split(key, "/")
		wantOK := len(parts) == 3
		for _, p := range parts {
			wantOK = wantOK && events.ValidateID("part", p) == nil
		}
		if (err == nil) != wantOK {
			t.Fatalf("ParseKey(%q) error = %v, want ok=%v", key, err, wantOK)
		}
		if err != nil {
			if !errors.Is(err, events.ErrInvalid) {
				t.Fatalf("ParseKey error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if id.Key() != key {
			t.Fatalf("ParseKey(%q).Key() = %q", key, id.Key())
		}
		if id != (events.Identity{Tenant: parts[0], User: parts[1], Conversation: parts[2]}) {
			t.Fatalf("ParseKey(%q) = %+v", key, id)
		}
	})
}

func FuzzDecodeControl(f *testing.F) {
	f.Add([]byte(`{"v":1,"type":"cancel","tenant":"t","user":"u","conversation":"c","partition":3,"before":17,"at":"2026-11-30T00:00:00Z"}`))
	f.Add([]byte(`{"v":1,"type":"cancel","tenant":"t","user":"u","conversation":"c","request_id":"r-1","at":"2026-11-30T00:00:00Z"}`))
	f.Add([]byte(`{"v":1,"type":"completed","tenant":"t","user":"u","conversation":"c","request_id":"r-1","status":"complete","at":"2026-11-30T00:00:00Z"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := events.DecodeControl(b)
		if err != nil {
			return
		}
		again, err := events.EncodeControl(c)
		if err != nil {
			t.Fatal(err)
		}
		if c2, err := events.DecodeControl(again); err != nil || c2.Identity() != c.Identity() || c2.Type != c.Type {
			t.Fatalf("re-decoding %s: %+v, %v", again, c2, err)
		}
	})
}
