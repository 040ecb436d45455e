package client

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

func TestFrameViewDecode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		frame string
		want  FrameView // byte slices compared as strings
	}{
		{
			name:  "A token event gives every header field and its delta.",
			frame: `{"type":"token","conversation":"c1","request_id":"r-1","run_id":"u-1","seq":7,"ts":1700000000000000001,"delta":"w3 w4 ","agent":"assistant","role":"assistant","cursor":"3-99"}`,
			want: FrameView{Type: "token", Conversation: b("c1"), RequestID: b("r-1"), RunID: b("u-1"), Seq: 7,
				TS: 1700000000000000001, Delta: b("w3 w4 "), Cursor: b("3-99")},
		},
		{
			name:  "A run.completed event gives its status.",
			frame: `{"type":"run.completed","conversation":"c1","request_id":"r-1","run_id":"u-1","seq":9,"ts":5,"status":"complete","cursor":"0-1"}`,
			want:  FrameView{Type: "run.completed", Conversation: b("c1"), RequestID: b("r-1"), RunID: b("u-1"), Seq: 9, TS: 5, Status: b("complete"), Cursor: b("0-1")},
		},
		{
			name:  "A subscribed frame gives its conversation.",
			frame: `{"type":"subscribed","conversation":"c-2"}`,
			want:  FrameView{Type: FrameSubscribed, Conversation: b("c-2")},
		},
		{
			name:  "An error frame gives its code and unescaped message.",
			frame: `{"type":"error","code":"invalid_argument","message":"unknown field \"x\" \\ \/ \u00e9\ud83d\ude00\n"}`,
			want:  FrameView{Type: FrameError, Code: b("invalid_argument"), Message: b("unknown field \"x\" \\ / é😀\n")},
		},
		{
			name:  "A lone surrogate escape decodes to U+FFFD, as encoding/json does.",
			frame: `{"type":"notice","message":"a\ud800b\ud800\u0041"}`,
			want:  FrameView{Type: "notice", Message: b("a\uFFFDb\uFFFDA")},
		},
		{
			name:  "Unknown members of any shape are skipped, white space is allowed.",
			frame: " { \"x\" : [1, {\"y\": \"}\"}, true, null, -2.5e3] , \"type\" : \"pong\" , \"z\":{}} ",
			want:  FrameView{Type: FramePong},
		},
		{
			name:  "An unknown type is kept as it is.",
			frame: `{"type":"future.event","seq":-3}`,
			want:  FrameView{Type: "future.event", Seq: -3},
		},
		{
			name:  "An empty object gives an empty view.",
			frame: `{}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var v FrameView
			if err := v.Decode([]byte(tc.frame)); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if got, want := viewString(&v), viewString(&tc.want); got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

func TestFrameViewDecodeRejectsBrokenJSON(t *testing.T) {
	t.Parallel()
	for _, frame := range []string{
		``, `[]`, `"type"`, `{`, `{"type"`, `{"type":}`, `{"type":"token"`, `{"type":"token",}`,
		`{"type":"tok` + "\x01" + `en"}`, `{"seq":1.5}`, `{"seq":"1"}`, `{"ts":99999999999999999999}`,
		`{"type":"a\q"}`, `{"type":"\u12"}`, `{"x":tru}`, `{"x":[1 2]}`, `{"x":{1:2}}`, `{} x`, `{"type":"token"}}`,
		`{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
	} {
		var v FrameView
		if err := v.Decode([]byte(frame)); err == nil {
			t.Errorf("Decode(%q) = nil error, want one (view %s)", frame, viewString(&v))
		}
	}
}

func TestFrameViewDecodeReusesScratchWithoutClobbering(t *testing.T) {
	t.Parallel()
	var v FrameView
	frame := []byte(`{"type":"token","conversation":"c\u0031","request_id":"r\u0032","delta":"d\u0033"}`)
	for range 3 {
		if err := v.Decode(frame); err != nil {
			t.Fatal(err)
		}
		if string(v.Conversation) != "c1" || string(v.RequestID) != "r2" || string(v.Delta) != "d3" {
			t.Fatalf("got %s", viewString(&v))
		}
	}
}

// TestFrameViewAgreesWithDecodeEvent encodes random events as the gateway
// sends them and checks that the light decoding sees what the strict one does.
func TestFrameViewAgreesWithDecodeEvent(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	var v FrameView
	for i := range 2000 {
		e := randomEvent(rng)
		frame := events.AppendEvent(nil, e)
		if err := v.Decode(frame); err != nil {
			t.Fatalf("event %d %s: Decode: %v", i, frame, err)
		}
		checkAgreement(t, frame, &v)
	}
}

// FuzzFrameView checks that Decode never panics and agrees with DecodeEvent
// on every frame the strict decoder accepts.
func FuzzFrameView(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		f.Add(events.AppendEvent(nil, randomEvent(rng)))
	}
	f.Add([]byte(`{"type":"error","code":"x","message":"\ud83d\ude00"}`))
	f.Add([]byte(`{"x":[{"y":[]}],"type":"pong"}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		var v FrameView
		err := v.Decode(frame)
		if _, serr := events.DecodeEvent(frame); serr == nil {
			if err != nil {
				t.Fatalf("DecodeEvent accepts %q, Decode says %v", frame, err)
			}
			checkAgreement(t, frame, &v)
		}
	})
}

func checkAgreement(t *testing.T, frame []byte, v *FrameView) {
	t.Helper()
	e, err := events.DecodeEvent(frame)
	if err != nil {
		t.Fatalf("DecodeEvent(%s): %v", frame, err)
	}
	m := e.Header()
	want := FrameView{Type: string(e.Type()), Conversation: b(m.Conversation), RequestID: b(m.RequestID), RunID: b(m.RunID),
		Seq: m.Seq, TS: m.TS, Cursor: bOrNil(m.Cursor)}
	switch e := e.(type) {
	case *events.TokenEvent:
		want.Delta = b(e.Delta)
	case *events.NoticeEvent:
		want.Message = b(e.Message)
	case *events.RunCompletedEvent:
		want.Status = b(string(e.Status))
	}
	if got, want := viewString(v), viewString(&want); got != want {
		t.Fatalf("frame %s:\ngot  %s\nwant %s", frame, got, want)
	}
	if !v.IsEvent() {
		t.Fatalf("frame %s: IsEvent false", frame)
	}
}

// randomText mixes plain ASCII with what needs escaping.
func randomText(rng *rand.Rand, n int) string {
	pieces := []string{"w1 ", "a", "\"", "\\", "/", "\n", "\t", "\x01", "é", "😀", "\u2028", "<", "&", " "}
	var sb strings.Builder
	for range rng.IntN(n + 1) {
		sb.WriteString(pieces[rng.IntN(len(pieces))])
	}
	return sb.String()
}

func randomEvent(rng *rand.Rand) events.Event {
	m := events.Meta{Conversation: "c-" + randomID(rng), RequestID: "r-" + randomID(rng), RunID: "u-" + randomID(rng),
		Seq: 1 + rng.Int64N(1<<40), TS: 1 + rng.Int64N(1<<62)}
	if rng.IntN(2) == 0 {
		m.Cursor = "3-" + randomID(rng)
	}
	switch rng.IntN(8) {
	case 4:
		return &events.AgentTransferEvent{Meta: m, From: "desk", To: "booker"}
	case 5:
		return &events.RunInterruptedEvent{Meta: m, Interrupt: events.Interrupt{Agent: "booker", Tool: "confirm", Question: randomText(rng, 20)}}
	case 6:
		return &events.StateChangedEvent{Meta: m, Conversation: []string{"cart"}, User: []string{"plan"}}
	case 7:
		return &events.ArtifactSavedEvent{Meta: m, Artifact: events.ArtifactInfo{Name: "chart.png", Version: 1 + rng.Int64N(9), MIME: "image/png", Size: rng.Int64N(1 << 20)}}
	case 0:
		return &events.RunStartedEvent{Meta: m}
	case 1:
		return &events.TokenEvent{Meta: m, Delta: randomText(rng, 20), Agent: "assistant", Role: "assistant"}
	case 2:
		return &events.NoticeEvent{Meta: m, Message: randomText(rng, 20)}
	}
	return &events.RunCompletedEvent{Meta: m, Status: events.StatusComplete}
}

func randomID(rng *rand.Rand) string {
	const alphabet = "abcXYZ019._:@-"
	b := make([]byte, 1+rng.IntN(12))
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

func b(s string) []byte { return []byte(s) }

func bOrNil(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// viewString renders a view for comparison; nil and empty slices differ.
func viewString(v *FrameView) string {
	q := func(p []byte) string {
		if p == nil {
			return "-"
		}
		return "\"" + string(p) + "\""
	}
	return strings.Join([]string{"type=" + v.Type, "conv=" + q(v.Conversation), "req=" + q(v.RequestID), "run=" + q(v.RunID),
		"seq=" + itoa(v.Seq), "ts=" + itoa(v.TS), "delta=" + q(v.Delta), "status=" + q(v.Status), "code=" + q(v.Code),
		"message=" + q(v.Message), "cursor=" + q(v.Cursor)}, " ")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
