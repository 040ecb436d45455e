package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// tokenFrame is a token event as the push gateway sends it.
var tokenFrame = events.AppendEvent(nil, &events.TokenEvent{
	Meta: events.Meta{Conversation: "loadgen-20260101t000000-ab12cd-17", RequestID: "r-0123456789abcdef0123456789abcdef",
		RunID: "u-0123456789abcdef", Seq: 42, TS: 1767225600123456789, Cursor: "7-123456"},
	Delta: "w41 ", Agent: "assistant", Role: "assistant",
})

// frameServer serves a WebSocket that sends frames n times, then closes
// normally (n < 0: then waits for the client to go away).
func frameServer(t testing.TB, n int, frames ...[]byte) *Client {
	t.Helper()
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		for i := 0; i < n; i++ {
			for _, f := range frames {
				if err := ws.WriteMessage(websocket.TextMessage, f); err != nil {
					return
				}
			}
		}
		if n < 0 {
			_, _, _ = ws.ReadMessage()
			return
		}
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	}))
	t.Cleanup(srv.Close)
	return &Client{StreamURL: "ws" + strings.TrimPrefix(srv.URL, "http"), Token: "t"}
}

func TestNextRawReadsFramesIntoTheGivenBuffer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	big := []byte(`{"type":"notice","message":"` + strings.Repeat("x", 5000) + `"}`)
	c := frameServer(t, 2, []byte(`{"type":"pong"}`), tokenFrame, big)
	conn, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 0, 64)
	for i := range 2 {
		for _, want := range [][]byte{[]byte(`{"type":"pong"}`), tokenFrame, big} {
			got, err := conn.NextRaw(ctx, buf)
			if err != nil {
				t.Fatalf("round %d: NextRaw: %v", i, err)
			}
			if string(got) != string(want) {
				t.Fatalf("round %d: got %.80s, want %.80s", i, got, want)
			}
			buf = got
		}
	}
	if cap(buf) < len(big) {
		t.Errorf("buffer capacity %d: not grown to the largest frame", cap(buf))
	}
	_, err = conn.NextRaw(ctx, buf)
	if code := CloseCode(err); code != websocket.CloseNormalClosure {
		t.Errorf("after the last frame: err %v (close code %d), want a normal close", err, code)
	}
}

func TestNextRawReturnsWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	c := frameServer(t, -1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	readCtx, stop := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, stop)
	if _, err := conn.NextRaw(readCtx, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("NextRaw after cancel: %v, want context.Canceled", err)
	}
}

// everyEvent is one event of each type, with every member AppendEvent
// writes (usage and interrupt included) and a cursor.
func everyEvent() []events.Event {
	m := events.Meta{Conversation: "c1", RequestID: "r1", RunID: "u1", Seq: 3, TS: 1767225600123456789, Cursor: "7-123"}
	return []events.Event{
		&events.RunStartedEvent{Meta: m},
		&events.TokenEvent{Meta: m, Delta: "w1 ", Agent: "assistant", Role: "assistant"},
		&events.NoticeEvent{Meta: m, Message: "retrying"},
		&events.AgentTransferEvent{Meta: m, From: "supervisor", To: "researcher"},
		&events.RunInterruptedEvent{Meta: m, Interrupt: events.Interrupt{Agent: "assistant", Tool: "ask_user", Question: "Which one?"}},
		&events.StateChangedEvent{Meta: m, Conversation: []string{"cart"}, User: []string{"language"}},
		&events.ArtifactSavedEvent{Meta: m, Artifact: events.ArtifactInfo{Name: "chart.png", Version: 2, MIME: "image/png", Size: 5120}},
		&events.RunCompletedEvent{Meta: m, Status: events.StatusComplete, Usage: &events.Usage{PromptTokens: 5, CompletionTokens: 7, TotalTokens: 12}},
	}
}

// withUnknownMembers adds members a later version of the gateway might send
// to an encoded event: one first, one last, and one inside usage and
// interrupt.
func withUnknownMembers(frame []byte) []byte {
	s := `{"x_first":{"nested":[1,"two",null]},` + strings.TrimPrefix(string(frame), "{")
	s = strings.TrimSuffix(s, "}") + `,"x_last":"later"}`
	s = strings.Replace(s, `"usage":{`, `"usage":{"cached_tokens":3,`, 1)
	s = strings.Replace(s, `"interrupt":{`, `"interrupt":{"options":["a","b"],`, 1)
	s = strings.Replace(s, `"keys":{`, `"keys":{"app":["x"],`, 1)
	s = strings.Replace(s, `"artifact":{`, `"artifact":{"etag":"e1",`, 1)
	return []byte(s)
}

// docs/api.md: clients ignore members they do not know in server-to-client
// JSON; later versions add members without a version bump.
func TestNextIgnoresMembersItDoesNotKnow(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var frames [][]byte
	for _, e := range everyEvent() {
		frames = append(frames, withUnknownMembers(events.MarshalEvent(e)))
	}
	frames = append(frames,
		[]byte(`{"type":"subscribed","conversation":"c1","x_replica":"gw-2"}`),
		[]byte(`{"type":"pong","x_load":0.5}`),
		[]byte(`{"type":"error","code":"cursor_expired","message":"gone","conversation":"c1","x_detail":{"oldest":"7-9"}}`),
		// What the client knows is still checked: a token event without its
		// delta is refused, an unknown member or not.
		[]byte(`{"type":"token","conversation":"c1","request_id":"r1","run_id":"u1","seq":1,"ts":1,"agent":"a","role":"assistant","x":1}`),
	)
	c := frameServer(t, 1, frames...)
	conn, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, want := range everyEvent() {
		f, err := conn.Next(ctx)
		if err != nil {
			t.Fatalf("%s with unknown members: %v", want.Type(), err)
		}
		if f.Type != string(want.Type()) || !reflect.DeepEqual(f.Event, want) {
			t.Errorf("%s with unknown members decoded as %q %#v, want %#v", want.Type(), f.Type, f.Event, want)
		}
	}
	for _, want := range []Frame{
		{Type: "subscribed", Conversation: "c1", Shard: -1},
		{Type: "pong", Shard: -1},
		{Type: "error", Code: "cursor_expired", Message: "gone", Conversation: "c1", Shard: -1},
	} {
		f, err := conn.Next(ctx)
		if err != nil {
			t.Fatalf("%s frame with an unknown member: %v", want.Type, err)
		}
		f.Raw = nil
		if !reflect.DeepEqual(f, want) {
			t.Errorf("%s frame with an unknown member: %+v, want %+v", want.Type, f, want)
		}
	}
	if _, err := conn.Next(ctx); err == nil || !strings.Contains(err.Error(), "missing delta") {
		t.Errorf("a token event without its delta: err %v, want a bad event frame (missing delta)", err)
	}
}

// The decoders on one token frame: the checking one Next uses (a frame
// without unknown members takes events.DecodeEvent alone), and the view.
func BenchmarkDecodeEventTokenFrame(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(tokenFrame)))
	for b.Loop() {
		if _, err := events.DecodeEvent(tokenFrame); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFrameViewTokenFrame(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(tokenFrame)))
	var v FrameView
	for b.Loop() {
		if err := v.Decode(tokenFrame); err != nil {
			b.Fatal(err)
		}
	}
}

// Reading token frames off a loopback WebSocket: Next against NextRaw with
// a reused buffer and a FrameView. The server's writes are included in
// both.
func BenchmarkConnNext(b *testing.B) {
	ctx := context.Background()
	conn, err := frameServer(b, b.N, tokenFrame).Dial(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := conn.Next(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkConnNextRawView(b *testing.B) {
	ctx := context.Background()
	conn, err := frameServer(b, b.N, tokenFrame).Dial(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	var (
		buf []byte
		v   FrameView
	)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if buf, err = conn.NextRaw(ctx, buf); err != nil {
			b.Fatal(err)
		}
		if err := v.Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func TestAnErrorFrameKeepsTheConversationItNames(t *testing.T) {
	t.Parallel()
	f, err := decodeFrame([]byte(`{"type":"error","code":"cursor_expired","message":"gone","conversation":"c1"}`))
	if err != nil || f.Type != "error" || f.Code != "cursor_expired" || f.Message != "gone" || f.Conversation != "c1" {
		t.Errorf("decodeFrame: %+v, %v", f, err)
	}
}

// docs/api.md "Shard hints": a WebSocket Subscription reconnects with the
// shard its subscribed frame named as ?shard= on the upgrade URL; a frame
// without one (an older gateway) is -1.
func TestAWebSocketSubscriptionReconnectsWithItsConversationsShardHint(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	var hints []string
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hints = append(hints, r.URL.Query().Get("shard"))
		n := len(hints)
		mu.Unlock()
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		if _, _, err := ws.ReadMessage(); err != nil { // the subscribe
			return
		}
		_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"subscribed","conversation":"c1","shard":2}`))
		e := events.AppendEvent(nil, &events.TokenEvent{Meta: events.Meta{Conversation: "c1", RequestID: "r", RunID: "u", Seq: int64(n), TS: 1,
			Cursor: fmt.Sprintf("1-2-%d", n)}, Delta: "w", Agent: "echo", Role: "assistant"})
		_ = ws.WriteMessage(websocket.TextMessage, e)
	}))
	t.Cleanup(srv.Close)
	c := &Client{StreamURL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/stream", Token: "t"}
	sub, err := c.Subscribe(ctx, "c1", SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for n := 1; n <= 2; n++ {
		if e, err := sub.Next(ctx); err != nil || e.Header().Seq != int64(n) {
			t.Fatalf("event %d: %v, %v", n, e, err)
		}
	}
	mu.Lock()
	got := strings.Join(hints, ",")
	mu.Unlock()
	if got != ",2" || sub.Shard() != 2 {
		t.Fatalf("shard hints of the upgrades %q and Shard() %d; want none then 2, and 2", got, sub.Shard())
	}
	if f, err := decodeFrame([]byte(`{"type":"subscribed","conversation":"c1"}`)); err != nil || f.Shard != -1 {
		t.Fatalf("a subscribed frame without shard: %+v, %v; want Shard -1", f, err)
	}
}

// docs/api.md: clients ignore event types they do not know (a later server
// adds types without a version bump). A Subscription skips such an event
// and, reconnecting, resumes after it rather than receiving it again.
func TestASubscriptionSkipsAnEventOfATypeItDoesNotKnowAndResumesAfterIt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	future := []byte(`{"type":"future.event","conversation":"c1","request_id":"r","run_id":"u","seq":2,"ts":1,"anything":{"x":[1]},"cursor":"1-2-2"}`)
	token := func(seq int64) []byte {
		return events.AppendEvent(nil, &events.TokenEvent{Meta: events.Meta{Conversation: "c1", RequestID: "r", RunID: "u", Seq: seq, TS: 1,
			Cursor: fmt.Sprintf("1-2-%d", seq)}, Delta: "w", Agent: "echo", Role: "assistant"})
	}
	var mu sync.Mutex
	var sinces []string
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		var sub struct{ Since string }
		if err := ws.ReadJSON(&sub); err != nil {
			return
		}
		mu.Lock()
		sinces = append(sinces, sub.Since)
		first := len(sinces) == 1
		mu.Unlock()
		_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"subscribed","conversation":"c1"}`))
		if first {
			// Token 1, the unknown event, then the connection breaks.
			_ = ws.WriteMessage(websocket.TextMessage, token(1))
			_ = ws.WriteMessage(websocket.TextMessage, future)
			return
		}
		_ = ws.WriteMessage(websocket.TextMessage, token(3))
		_, _, _ = ws.ReadMessage()
	}))
	t.Cleanup(srv.Close)
	c := &Client{StreamURL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/stream", Token: "t"}
	sub, err := c.Subscribe(ctx, "c1", SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for _, want := range []int64{1, 3} {
		if e, err := sub.Next(ctx); err != nil || e.Header().Seq != want {
			t.Fatalf("want the token of seq %d: %v, %v", want, e, err)
		}
	}
	mu.Lock()
	got := strings.Join(sinces, ",")
	mu.Unlock()
	if got != ",1-2-2" {
		t.Fatalf("subscribed since %q, want from the start, then after the unknown event (1-2-2)", got)
	}
	f, err := decodeFrame(future)
	if err != nil || f.Event != nil || f.Type != "future.event" || f.Cursor != "1-2-2" || f.Conversation != "c1" {
		t.Fatalf("decodeFrame of an unknown event type = %+v, %v; want no event and no error, with its cursor", f, err)
	}
}
