package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
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

func TestNextStillDecodesStrictly(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := frameServer(t, 1, tokenFrame, []byte(`{"type":"token","conversation":"c"}`))
	conn, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	f, err := conn.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if te, ok := f.Event.(*events.TokenEvent); !ok || te.Delta != "w41 " || te.Cursor != "7-123456" {
		t.Errorf("first frame: %#v", f.Event)
	}
	if _, err := conn.Next(ctx); err == nil || !strings.Contains(err.Error(), "bad event frame") {
		t.Errorf("incomplete token event: err %v, want a bad event frame error", err)
	}
}

// The decoders on one token frame: the strict one Next uses, and the view.
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
