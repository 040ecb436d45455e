package pushgw

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

func TestDecodeRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    request
		wantErr string // substring; empty: success
	}{
		{"A ping decodes.", `{"op":"ping"}`, request{Op: "ping"}, ""},
		{"A live subscribe decodes.", `{"op":"subscribe","conversation":"c1"}`, request{Op: "subscribe", Conversation: "c1", hasConv: true}, ""},
		{"A subscribe with since decodes.", `{"since":"earliest","op":"subscribe","conversation":"c1"}`,
			request{Op: "subscribe", Conversation: "c1", Since: "earliest", hasConv: true, hasSince: true}, ""},
		{"An unsubscribe decodes.", ` {"op":"unsubscribe","conversation":"c1"} `, request{Op: "unsubscribe", Conversation: "c1", hasConv: true}, ""},
		{"Invalid JSON is refused.", `{"op":`, request{}, "invalid JSON"},
		{"An array is refused.", `["ping"]`, request{}, "JSON object"},
		{"Trailing data is refused.", `{"op":"ping"}{}`, request{}, "after"},
		{"An unknown op is refused.", `{"op":"dance"}`, request{}, "unknown op"},
		{"A missing op is refused.", `{"conversation":"c1"}`, request{}, "missing op"},
		{"An unknown field is refused.", `{"op":"ping","x":"y"}`, request{}, "unknown field"},
		{"A field in another case is refused.", `{"OP":"ping"}`, request{}, "unknown field"},
		{"A duplicate field is refused.", `{"op":"ping","op":"ping"}`, request{}, "duplicate"},
		{"A non-string value is refused.", `{"op":"subscribe","conversation":1}`, request{}, "must be a string"},
		{"A null value is refused.", `{"op":"subscribe","conversation":"c","since":null}`, request{}, "must be a string"},
		{"A subscribe without conversation is refused.", `{"op":"subscribe"}`, request{}, "missing conversation"},
		{"A conversation with a slash is refused.", `{"op":"subscribe","conversation":"bob/c1"}`, request{}, "conversation"},
		{"An empty conversation is refused.", `{"op":"subscribe","conversation":""}`, request{}, "conversation"},
		{"A too long conversation is refused.", `{"op":"subscribe","conversation":"` + strings.Repeat("a", 129) + `"}`, request{}, "conversation"},
		{"An unsubscribe with since is refused.", `{"op":"unsubscribe","conversation":"c","since":"earliest"}`, request{}, "since"},
		{"A ping with a conversation is refused.", `{"op":"ping","conversation":"c"}`, request{}, "ping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := decodeRequest([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("decodeRequest(%s) error = %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("decodeRequest(%s) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{`{"op":"ping"}`, `{"op":"subscribe","conversation":"c1","since":"1-0-5"}`, `{"op":"unsubscribe","conversation":"c"}`, `{`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRequest(b)
		if err != nil {
			// The error frame quotes the client's bytes: still valid JSON
			// in valid UTF-8.
			if frame := errorFrame(codeInvalidArgument, err.Error()); !utf8.Valid(frame) || !json.Valid(frame) {
				t.Fatalf("error frame %q for %q is not valid JSON in UTF-8", frame, b)
			}
			return
		}
		// What is accepted reads the same with a standard decoder.
		var std map[string]string
		if err := json.Unmarshal(b, &std); err != nil || std["op"] != r.Op || std["conversation"] != r.Conversation || std["since"] != r.Since {
			t.Fatalf("accepted %q as %+v; encoding/json reads %v (%v)", b, r, std, err)
		}
		switch r.Op {
		case opPing, opSubscribe, opUnsubscribe:
		default:
			t.Fatalf("accepted op %q", r.Op)
		}
		if r.hasConv {
			if err := events.ValidateID("conversation", r.Conversation); err != nil {
				t.Fatalf("accepted conversation %q: %v", r.Conversation, err)
			}
		}
		if !json.Valid(b) {
			t.Fatalf("accepted invalid JSON %q", b)
		}
		if r.Op == opSubscribe {
			_, _ = parseSince(r)
		}
	})
}

func TestEventFrameAppendsTheCursor(t *testing.T) {
	t.Parallel()
	value := events.MarshalEvent(&events.NoticeEvent{Meta: events.Meta{Conversation: "c1", RequestID: "r1", RunID: "u1", Seq: 3, TS: 42}, Message: `say "hi"`})
	frame := eventFrame(value, 2, 17)
	e, err := events.DecodeEvent(frame)
	if err != nil {
		t.Fatalf("the event frame %s does not decode: %v", frame, err)
	}
	if got := e.Header().Cursor; got != "1-2-17" {
		t.Fatalf("cursor = %q, want 1-2-17", got)
	}
	if n, ok := e.(*events.NoticeEvent); !ok || n.Message != `say "hi"` || n.Seq != 3 {
		t.Fatalf("decoded %#v, want the original notice", e)
	}
}

func TestValidValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{"An object with a member is valid.", `{"type":"token"}`, true},
		{"An object ending in a nested object is valid.", `{"a":{}}`, true},
		{"An empty object is not.", `{}`, false},
		{"An object of blanks is not.", "{ \n}", false},
		{"An array is not.", `["a"]`, false},
		{"Trailing space is not.", `{"a":1} `, false},
		{"A truncated object is not.", `{"a":1`, false},
		{"Nothing is not.", ``, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := validValue([]byte(tt.in)); got != tt.want {
				t.Fatalf("validValue(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestErrorFrameEscapesTheMessage(t *testing.T) {
	t.Parallel()
	var got struct{ Type, Code, Message string }
	if err := json.Unmarshal(errorFrame("invalid_argument", `bad "x"`), &got); err != nil {
		t.Fatal(err)
	}
	if got.Type != "error" || got.Code != "invalid_argument" || got.Message != `bad "x"` {
		t.Fatalf("error frame = %+v", got)
	}
}

func TestAnErrorFrameNamesItsConversationOnlyWhenGivenOne(t *testing.T) {
	t.Parallel()
	if got, want := string(conversationErrorFrame("c1", "cursor_expired", "gone")), `{"type":"error","code":"cursor_expired","message":"gone","conversation":"c1"}`; got != want {
		t.Errorf("with a conversation: %s, want %s", got, want)
	}
	if got, want := string(errorFrame("invalid_argument", "invalid JSON")), `{"type":"error","code":"invalid_argument","message":"invalid JSON"}`; got != want {
		t.Errorf("without: %s, want %s", got, want)
	}
}
