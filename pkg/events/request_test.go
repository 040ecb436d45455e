package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// fullRecord is a request record with every field set, as the ingest
// service writes it.
const fullRecord = `{"v":1,"request_id":"r-1","tenant":"acme","user":"alice","conversation":"c1",` +
	`"content":"hello","strategy":"enqueue","created_at":"2025-01-02T03:04:05.123456789Z"}`

// minimalRecord has only the fields a direct producer must set.
const minimalRecord = `{"v":1,"tenant":"acme","user":"alice","conversation":"c1","content":"hello"}`

// record returns a minimal record with the given extra JSON members spliced in
// after "v" and the named default members replaced: fields maps a member name
// to its raw JSON value, or to "" to drop the member.
func record(fields map[string]string, extra ...string) string {
	members := []struct{ k, v string }{
		{"v", "1"}, {"tenant", `"acme"`}, {"user", `"alice"`}, {"conversation", `"c1"`}, {"content", `"hello"`},
	}
	var parts []string
	for _, m := range members {
		v, ok := fields[m.k]
		if !ok {
			v = m.v
		}
		if v != "" {
			parts = append(parts, fmt.Sprintf("%q:%s", m.k, v))
		}
	}
	for k, v := range fields {
		known := false
		for _, m := range members {
			known = known || m.k == k
		}
		if !known && v != "" {
			parts = append(parts, fmt.Sprintf("%q:%s", k, v))
		}
	}
	parts = append(parts, extra...)
	return "{" + strings.Join(parts, ",") + "}"
}

func TestDecodeRequestAcceptsGoodRecords(t *testing.T) {
	t.Parallel()
	created := time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)
	base := events.Request{V: 1, Tenant: "acme", User: "alice", Conversation: "c1", Content: "hello"}
	with := func(f func(*events.Request)) events.Request { r := base; f(&r); return r }
	tests := []struct {
		name       string
		in         string
		maxContent int
		want       events.Request
	}{
		{"A record with every field decodes into every field.", fullRecord, 0, with(func(r *events.Request) {
			r.RequestID, r.Strategy, r.CreatedAt = "r-1", events.StrategyEnqueue, created
		})},
		{"A record without request_id, strategy and created_at is accepted.", minimalRecord, 0, base},
		{"An empty request_id counts as absent.", record(map[string]string{"request_id": `""`}), 0, base},
		{"A null created_at counts as absent.", record(map[string]string{"created_at": "null"}), 0, base},
		{"The strategy reject is accepted.", record(map[string]string{"strategy": `"reject"`}), 0,
			with(func(r *events.Request) { r.Strategy = events.StrategyReject })},
		{"The strategy interrupt is accepted.", record(map[string]string{"strategy": `"interrupt"`}), 0,
			with(func(r *events.Request) { r.Strategy = events.StrategyInterrupt })},
		{"An empty strategy is accepted and means enqueue.", record(map[string]string{"strategy": `""`}), 0, base},
		{"created_at with an offset is accepted.", record(map[string]string{"created_at": `"2025-01-02T05:04:05+02:00"`}), 0,
			with(func(r *events.Request) { r.CreatedAt = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) })},
		{"Members may come in any order.", `{"content":"hello","conversation":"c1","user":"alice","tenant":"acme","v":1}`, 0, base},
		{"Whitespace around and inside the object is accepted.", " \n{ \"v\" : 1 ,\"tenant\":\"acme\",\"user\":\"alice\",\"conversation\":\"c1\",\"content\":\"hello\" }\r\n\t", 0, base},
		{"A member name spelt with escapes is the same name.", `{"v":1,"t\u0065nant":"acme","user":"alice","conversation":"c1","content":"hello"}`, 0, base},
		{"Content with escapes decodes to the unescaped text.", record(map[string]string{"content": `"a\"b\\c\n\u00e9\ud83d\ude00"`}), 0,
			with(func(r *events.Request) { r.Content = "a\"b\\c\né😀" })},
		{"An escaped backslash before u is not a surrogate escape.", record(map[string]string{"content": `"\\ud800 \\\ud83d\ude00"`}), 0,
			with(func(r *events.Request) { r.Content = `\ud800 \😀` })},
		{"Content with control characters other than NUL is accepted.", record(map[string]string{"content": `"\u0001\u001f\t"`}), 0,
			with(func(r *events.Request) { r.Content = "\x01\x1f\t" })},
		{"Content of exactly the limit is accepted.", record(map[string]string{"content": `"` + strings.Repeat("x", 16) + `"`}), 16,
			with(func(r *events.Request) { r.Content = strings.Repeat("x", 16) })},
		{"Content of exactly the default limit is accepted.", record(map[string]string{"content": `"` + strings.Repeat("x", events.DefaultMaxContentBytes) + `"`}), 0,
			with(func(r *events.Request) { r.Content = strings.Repeat("x", events.DefaultMaxContentBytes) })},
		{"Multi-byte content is measured in bytes: 4 two-byte runes fit in 8 bytes.", record(map[string]string{"content": `"éééé"`}), 8,
			with(func(r *events.Request) { r.Content = "éééé" })},
		{"Identifiers of 128 bytes are accepted.", record(map[string]string{"tenant": `"` + strings.Repeat("t", 128) + `"`}), 0,
			with(func(r *events.Request) { r.Tenant = strings.Repeat("t", 128) })},
		{"A resume names the interrupted request.", record(map[string]string{"resume_of": `"r-0"`}), 0,
			with(func(r *events.Request) { r.ResumeOf = "r-0" })},
		{"An empty resume_of counts as absent.", record(map[string]string{"resume_of": `""`}), 0, base},
		{"A reset of the state and the agent has no content.", record(map[string]string{"content": "", "reset": `{"state":true,"agent":true}`}), 0,
			with(func(r *events.Request) { r.Content, r.Reset = "", &events.Reset{State: true, Agent: true} })},
		{"A reset may carry an empty content and the enqueue strategy.", record(map[string]string{"content": `""`, "strategy": `"enqueue"`, "reset": `{"agent":true}`}), 0,
			with(func(r *events.Request) {
				r.Content, r.Strategy, r.Reset = "", events.StrategyEnqueue, &events.Reset{Agent: true}
			})},
		{"A reset of the state alone keeps the agent.", record(map[string]string{"content": "", "reset": `{"state":true,"agent":false}`}), 0,
			with(func(r *events.Request) { r.Content, r.Reset = "", &events.Reset{State: true} })},
		{"A null reset counts as absent.", record(map[string]string{"reset": "null"}), 0, base},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := events.DecodeRequest([]byte(tt.in), tt.maxContent)
			if err != nil {
				t.Fatalf("DecodeRequest(%s): %v", truncateForLog(tt.in), err)
			}
			if !requestsEqual(got, tt.want) {
				t.Fatalf("DecodeRequest = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDecodeRequestRejectsBadRecords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		in         string
		maxContent int
		tooLarge   bool // the error must also wrap ErrTooLarge
	}{
		{"A version of 0 is rejected.", record(map[string]string{"v": "0"}), 0, false},
		{"A resume_of breaking the ID rule is rejected.", record(map[string]string{"resume_of": `"r 0"`}), 0, false},
		{"A request resuming itself is rejected.", record(map[string]string{"request_id": `"r-1"`, "resume_of": `"r-1"`}), 0, false},
		{"A version of 2 is rejected.", record(map[string]string{"v": "2"}), 0, false},
		{"A reset that clears nothing is rejected.", record(map[string]string{"content": "", "reset": `{"state":false,"agent":false}`}), 0, false},
		{"An empty reset object is rejected.", record(map[string]string{"content": "", "reset": `{}`}), 0, false},
		{"A reset with content is rejected.", record(map[string]string{"reset": `{"state":true}`}), 0, false},
		{"A reset that is also a resume is rejected.", record(map[string]string{"content": "", "resume_of": `"r-0"`, "reset": `{"state":true}`}), 0, false},
		{"A reset with the reject strategy is rejected.", record(map[string]string{"content": "", "strategy": `"reject"`, "reset": `{"state":true}`}), 0, false},
		{"A reset with the interrupt strategy is rejected.", record(map[string]string{"content": "", "strategy": `"interrupt"`, "reset": `{"state":true}`}), 0, false},
		{"A reset with an unknown member is rejected.", record(map[string]string{"content": "", "reset": `{"state":true,"user":true}`}), 0, false},
		{"A reset with a duplicated member is rejected.", record(map[string]string{"content": "", "reset": `{"state":true,"state":false}`}), 0, false},
		{"A reset given as true is rejected.", record(map[string]string{"content": "", "reset": `true`}), 0, false},
		{"A reset part given as a string is rejected.", record(map[string]string{"content": "", "reset": `{"state":"true"}`}), 0, false},
		{"A missing version is rejected.", record(map[string]string{"v": ""}), 0, false},
		{"A null version is rejected.", record(map[string]string{"v": "null"}), 0, false},
		{"A version given as a string is rejected.", record(map[string]string{"v": `"1"`}), 0, false},
		{"A version given as a fraction is rejected.", record(map[string]string{"v": "1.0"}), 0, false},
		{"A version given with an exponent is rejected.", record(map[string]string{"v": "1e0"}), 0, false},
		{"A missing tenant is rejected.", record(map[string]string{"tenant": ""}), 0, false},
		{"A missing user is rejected.", record(map[string]string{"user": ""}), 0, false},
		{"A missing conversation is rejected.", record(map[string]string{"conversation": ""}), 0, false},
		{"A missing content is rejected.", record(map[string]string{"content": ""}), 0, false},
		{"An empty content is rejected.", record(map[string]string{"content": `""`}), 0, false},
		{"A null content is rejected.", record(map[string]string{"content": "null"}), 0, false},
		{"A tenant with a space is rejected.", record(map[string]string{"tenant": `"ac me"`}), 0, false},
		{"A user with a slash is rejected.", record(map[string]string{"user": `"al/ice"`}), 0, false},
		{"A conversation of 129 bytes is rejected.", record(map[string]string{"conversation": `"` + strings.Repeat("c", 129) + `"`}), 0, false},
		{"A conversation with unicode is rejected.", record(map[string]string{"conversation": `"cé"`}), 0, false},
		{"A request_id breaking the ID rule is rejected.", record(map[string]string{"request_id": `"r 1"`}), 0, false},
		{"A tenant given as a number is rejected.", record(map[string]string{"tenant": "5"}), 0, false},
		{"An unknown field is rejected.", record(nil, `"extra":1`), 0, false},
		{"An unknown null field is rejected.", record(nil, `"agent":null`), 0, false},
		{"A case-variant Tenant is rejected.", record(map[string]string{"tenant": ""}, `"Tenant":"acme"`), 0, false},
		{"A case-variant CONTENT is rejected.", record(map[string]string{"content": ""}, `"CONTENT":"hello"`), 0, false},
		{"A case-variant V is rejected.", record(map[string]string{"v": ""}, `"V":1`), 0, false},
		{"A name matching only under Unicode folding is rejected.", record(nil, `"\u017ftrategy":"reject"`), 0, false},
		{"A duplicated field with the same value is rejected.", record(nil, `"tenant":"acme"`), 0, false},
		{"A duplicated field with another value is rejected.", record(nil, `"user":"mallory"`), 0, false},
		{"A field duplicated through an escaped name is rejected.", record(nil, `"us\u0065r":"mallory"`), 0, false},
		{"A second object after the record is rejected.", minimalRecord + "{}", 0, false},
		{"A trailing word after the record is rejected.", minimalRecord + " x", 0, false},
		{"A trailing closing brace is rejected.", minimalRecord + "}", 0, false},
		{"A trailing number is rejected.", minimalRecord + "1", 0, false},
		{"An array is rejected.", "[" + minimalRecord + "]", 0, false},
		{"null is rejected.", "null", 0, false},
		{"A string is rejected.", `"x"`, 0, false},
		{"Empty input is rejected.", "", 0, false},
		{"A truncated object is rejected.", minimalRecord[:len(minimalRecord)-1], 0, false},
		{"Invalid UTF-8 in content is rejected.", record(map[string]string{"content": "\"a\xffb\""}), 0, false},
		{"Invalid UTF-8 in a member name is rejected.", record(nil, "\"\xff\":1"), 0, false},
		{"A truncated UTF-8 sequence in content is rejected.", record(map[string]string{"content": "\"a\xe2\x82\""}), 0, false},
		{"An unpaired high surrogate escape in content is rejected.", record(map[string]string{"content": `"a\ud800b"`}), 0, false},
		{"An unpaired low surrogate escape in content is rejected.", record(map[string]string{"content": `"a\udc00"`}), 0, false},
		{"A reversed surrogate pair in content is rejected.", record(map[string]string{"content": `"\ude00\ud83d"`}), 0, false},
		{"A high surrogate followed by a non-surrogate escape is rejected.", record(map[string]string{"content": `"\ud83d\u0041"`}), 0, false},
		{"A high surrogate at the end of content is rejected.", record(map[string]string{"content": `"abc\uD83D"`}), 0, false},
		{"An escaped NUL in content is rejected.", record(map[string]string{"content": `"a\u0000b"`}), 0, false},
		{"An escaped NUL at the start of content is rejected.", record(map[string]string{"content": `"\u0000ab"`}), 0, false},
		{"An escaped NUL at the end of content is rejected.", record(map[string]string{"content": `"ab\u0000"`}), 0, false},
		{"Content of a NUL alone is rejected.", record(map[string]string{"content": `"\u0000"`}), 0, false},
		{"A raw NUL in content is rejected.", record(map[string]string{"content": "\"a\x00b\""}), 0, false},
		{"A raw newline in content is rejected as invalid JSON.", record(map[string]string{"content": "\"a\nb\""}), 0, false},
		{"Content one byte over the limit is rejected as too large.", record(map[string]string{"content": `"` + strings.Repeat("x", 17) + `"`}), 16, true},
		{"Content one byte over the default limit is rejected as too large.", record(map[string]string{"content": `"` + strings.Repeat("x", events.DefaultMaxContentBytes+1) + `"`}), 0, true},
		{"Multi-byte content is measured in bytes: 5 two-byte runes overflow 9 bytes.", record(map[string]string{"content": `"ééééé"`}), 9, true},
		{"A record over the record limit is rejected as too large.", record(map[string]string{"content": `"x"`}, `"created_at":"2025-01-02T03:04:05Z"`+strings.Repeat(" ", events.MaxRecordBytes)), 0, true},
		{"A capitalised strategy is rejected.", record(map[string]string{"strategy": `"Enqueue"`}), 0, false},
		{"An unknown strategy is rejected.", record(map[string]string{"strategy": `"drop"`}), 0, false},
		{"A numeric strategy is rejected.", record(map[string]string{"strategy": "1"}), 0, false},
		{"A created_at that is not RFC 3339 is rejected.", record(map[string]string{"created_at": `"yesterday"`}), 0, false},
		{"A created_at given as a number is rejected.", record(map[string]string{"created_at": "1735787045"}), 0, false},
		{"An empty created_at string is rejected.", record(map[string]string{"created_at": `""`}), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := events.DecodeRequest([]byte(tt.in), tt.maxContent)
			if err == nil {
				t.Fatalf("DecodeRequest(%s) = %+v, want an error", truncateForLog(tt.in), got)
			}
			if !errors.Is(err, events.ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if errors.Is(err, events.ErrTooLarge) != tt.tooLarge {
				t.Errorf("errors.Is(%v, ErrTooLarge) = %v, want %v", err, !tt.tooLarge, tt.tooLarge)
			}
			if !requestsEqual(got, events.Request{}) {
				t.Errorf("DecodeRequest returned %+v with an error, want the zero Request", got)
			}
		})
	}
}

func TestRequestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	r := events.Request{V: 2, RequestID: "r 1", Tenant: "", User: "a/b", Conversation: "c", Content: "", Strategy: "drop"}
	err := r.Validate(0)
	if err == nil {
		t.Fatal("Validate() = nil, want an error")
	}
	for _, want := range []string{"v:", "request_id", "tenant", "user", "content", "strategy"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() error %q does not mention %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "conversation") {
		t.Errorf("Validate() error %q mentions the valid conversation", err)
	}
}

func TestValidateContent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		content  string
		max      int
		ok       bool
		tooLarge bool
	}{
		{"One byte is enough.", "x", 0, true, false},
		{"Exactly the limit is accepted.", "abcd", 4, true, false},
		{"One over the limit is too large.", "abcde", 4, false, true},
		{"A non-positive limit means the default limit.", strings.Repeat("x", events.DefaultMaxContentBytes), -1, true, false},
		{"Over the default limit is too large.", strings.Repeat("x", events.DefaultMaxContentBytes+1), 0, false, true},
		{"Empty content is invalid but not too large.", "", 0, false, false},
		{"A NUL at the start is invalid.", "\x00abc", 0, false, false},
		{"A NUL in the middle is invalid.", "ab\x00c", 0, false, false},
		{"A NUL at the end is invalid.", "abc\x00", 0, false, false},
		{"A NUL alone is invalid.", "\x00", 0, false, false},
		{"A NUL after multi-byte text is invalid.", "é😀\x00", 0, false, false},
		{"Other control characters at the start are content.", "\x01\x1f\tabc", 0, true, false},
		{"Other control characters in the middle are content.", "ab\x07\x1b[0mc", 0, true, false},
		{"Other control characters at the end are content.", "abc\r\n\x7f", 0, true, false},
		{"Invalid UTF-8 at the start is invalid.", "\xffabc", 0, false, false},
		{"Invalid UTF-8 in the middle is invalid.", "ab\xc3(c", 0, false, false},
		{"Invalid UTF-8 is invalid.", "a\xc3", 0, false, false},
		{"A UTF-8 encoded surrogate is invalid.", "a\xed\xa0\x80", 0, false, false},
		{"Directives of the echo model are content like any other.", "[[fail-after:2]] hi", 0, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := events.ValidateContent(tt.content, tt.max)
			if (err == nil) != tt.ok {
				t.Fatalf("ValidateContent = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, events.ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if errors.Is(err, events.ErrTooLarge) != tt.tooLarge {
				t.Errorf("errors.Is(%v, ErrTooLarge) != %v", err, tt.tooLarge)
			}
		})
	}
}

func TestEncodeRequestRoundTrips(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		r    events.Request
	}{
		{"A record with every field round-trips.", events.Request{V: 1, RequestID: "i-0123", Tenant: "acme", User: "alice",
			Conversation: "c1", Content: "hello", Strategy: events.StrategyInterrupt,
			CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)}},
		{"A record without optional fields round-trips.", events.Request{V: 1, Tenant: "t", User: "u", Conversation: "c", Content: "x"}},
		{"Content needing escapes round-trips.", events.Request{V: 1, Tenant: "t", User: "u", Conversation: "c",
			Content: "<script>&\"\\\n\r\t\b\f\x01\u2028\u2029\x7fé😀"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := events.EncodeRequest(tt.r)
			if err != nil {
				t.Fatalf("EncodeRequest: %v", err)
			}
			if bytes.HasSuffix(b, []byte("\n")) {
				t.Errorf("EncodeRequest output ends with a newline: %q", b)
			}
			got, err := events.DecodeRequest(b, 0)
			if err != nil {
				t.Fatalf("DecodeRequest(%s): %v", b, err)
			}
			if !requestsEqual(got, tt.r) {
				t.Fatalf("round trip = %+v, want %+v", got, tt.r)
			}
		})
	}
}

func TestEncodeRequestOmitsAbsentOptionalFields(t *testing.T) {
	t.Parallel()
	b, err := events.EncodeRequest(events.Request{V: 1, Tenant: "t", User: "u", Conversation: "c", Content: "<&>"})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"v":1,"tenant":"t","user":"u","conversation":"c","content":"<&>"}`
	if string(b) != want {
		t.Fatalf("EncodeRequest = %s, want %s", b, want)
	}
}

// A record that ingest accepts must be one the worker accepts: content at
// the limit escaped throughout (control characters take 6 bytes each) must
// still fit the record limit, or it would be dead-lettered.
func TestMaximalContentEscapedThroughoutStillDecodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		content    string
		maxContent int
	}{
		{"Control characters at the default limit decode.", strings.Repeat("\x01", events.DefaultMaxContentBytes), 0},
		{"Quotes at the default limit decode.", strings.Repeat(`"`, events.DefaultMaxContentBytes), 0},
		{"HTML characters at the default limit decode.", strings.Repeat("<&>", events.DefaultMaxContentBytes/3), 0},
		{"Line separators at the default limit decode.", strings.Repeat("\u2028", events.DefaultMaxContentBytes/3), 0},
		{"Control characters at a raised limit decode.", strings.Repeat("\x1f", 100_000), 100_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := events.Request{V: 1, RequestID: strings.Repeat("r", 128), Tenant: strings.Repeat("t", 128),
				User: strings.Repeat("u", 128), Conversation: strings.Repeat("c", 128), Content: tt.content,
				Strategy: events.StrategyInterrupt, CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 999999999, time.FixedZone("", -9*3600-30*60))}
			b, err := events.EncodeRequest(r)
			if err != nil {
				t.Fatal(err)
			}
			got, err := events.DecodeRequest(b, tt.maxContent)
			if err != nil {
				t.Fatalf("DecodeRequest of a %d-byte encoding: %v", len(b), err)
			}
			if got.Content != tt.content {
				t.Fatal("content changed in the round trip")
			}
		})
	}
}

func TestDecodeRequestMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	got, err := events.DecodeRequest([]byte(fullRecord), 0)
	if err != nil {
		t.Fatal(err)
	}
	var want events.Request
	if err := json.Unmarshal([]byte(fullRecord), &want); err != nil {
		t.Fatal(err)
	}
	if !requestsEqual(got, want) {
		t.Fatalf("DecodeRequest = %+v, encoding/json = %+v", got, want)
	}
}

func TestRequestIdentity(t *testing.T) {
	t.Parallel()
	r := events.Request{Tenant: "acme", User: "alice", Conversation: "c1"}
	if got := r.Identity().Key(); got != "acme/alice/c1" {
		t.Fatalf("Identity().Key() = %q, want acme/alice/c1", got)
	}
}

func TestDerivedRequestID(t *testing.T) {
	t.Parallel()
	ts := time.UnixMilli(1_700_000_000_123)
	id := events.DerivedRequestID(3, 42, ts)
	if id != "d-3-42-1700000000123" {
		t.Fatalf("DerivedRequestID = %q, want d-3-42-1700000000123", id)
	}
	if err := events.ValidateID("request_id", id); err != nil {
		t.Fatalf("derived id breaks the ID rule: %v", err)
	}
	if again := events.DerivedRequestID(3, 42, ts.Add(999*time.Microsecond)); again != id {
		t.Errorf("the same record (same millisecond) yields %q, then %q", id, again)
	}
	distinct := map[string]string{
		id: "original",
	}
	for name, other := range map[string]string{
		"another partition":                events.DerivedRequestID(4, 42, ts),
		"another offset":                   events.DerivedRequestID(3, 43, ts),
		"a recreated topic (another time)": events.DerivedRequestID(3, 42, ts.Add(time.Hour)),
		"partition and offset swapped":     events.DerivedRequestID(42, 3, ts),
	} {
		if prev, dup := distinct[other]; dup {
			t.Errorf("%s collides with %s: %q", name, prev, other)
		}
		distinct[other] = name
	}
	maxID := events.DerivedRequestID(1<<31-1, 1<<63-1, time.UnixMilli(-1<<62))
	if err := events.ValidateID("request_id", maxID); err != nil {
		t.Errorf("an extreme derived id breaks the ID rule: %v", err)
	}
}

func TestStrategyValidate(t *testing.T) {
	t.Parallel()
	for _, s := range []events.Strategy{"", events.StrategyEnqueue, events.StrategyReject, events.StrategyInterrupt} {
		if err := s.Validate(); err != nil {
			t.Errorf("Strategy(%q).Validate() = %v", s, err)
		}
	}
	for _, s := range []events.Strategy{"ENQUEUE", "drop", " enqueue", "enqueue\x00"} {
		if err := s.Validate(); !errors.Is(err, events.ErrInvalid) {
			t.Errorf("Strategy(%q).Validate() = %v, want ErrInvalid", s, err)
		}
	}
}

// requestsEqual compares requests, comparing times as instants.
func requestsEqual(a, b events.Request) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return false
	}
	a.CreatedAt, b.CreatedAt = time.Time{}, time.Time{}
	if (a.Reset == nil) != (b.Reset == nil) || a.Reset != nil && *a.Reset != *b.Reset {
		return false
	}
	a.Reset, b.Reset = nil, nil
	return a == b
}

func truncateForLog(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// LoneSurrogate finds the first \u escape of an unpaired UTF-16 surrogate,
// pairs pass, and text that is not (yet) valid JSON neither panics nor is
// reported (ingest scans a body before decoding it).
func TestLoneSurrogateFindsTheFirstUnpairedEscape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, text string
		want       int
	}{
		{"A pair is a character.", `{"c":"\ud83d\ude00"}`, -1},
		{"An escaped backslash before u is no escape.", `{"c":"\\ud800"}`, -1},
		{"A lone high half is found.", `{"c":"a\ud800b"}`, 7},
		{"A lone low half is found.", `{"c":"\udc00"}`, 6},
		{"A high half before another escape is found.", `{"c":"\ud83d\n"}`, 6},
		{"Two high halves: the first is found.", `{"c":"\ud83d\ud83d"}`, 6},
		{"A high half at the end of truncated text is found.", `{"c":"\ud800`, 6},
		{"A high half before a trailing backslash is found.", `{"c":"\ud800\`, 6},
		{"A truncated escape is left to the decoder.", `{"c":"\ud8`, -1},
		{"A trailing backslash is left to the decoder.", `{"c":"\`, -1},
		{"A malformed escape is left to the decoder.", `{"c":"\uzzzz"}`, -1},
	}
	for _, tt := range tests {
		if got := events.LoneSurrogate([]byte(tt.text)); got != tt.want {
			t.Errorf("%s LoneSurrogate(%s) = %d, want %d", tt.name, tt.text, got, tt.want)
		}
	}
}
