package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// watcher is one WebSocket subscribed to one conversation.
type watcher struct {
	t    *testing.T
	conn *client.Conn
	conv string
	seen []events.Event
}

func watch(t *testing.T, ctx context.Context, c *client.Client, conv, since string) *watcher {
	t.Helper()
	conn, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.Subscribe(conv, since); err != nil {
		t.Fatal(err)
	}
	f, err := conn.Next(ctx)
	if err != nil || f.Type != "subscribed" || f.Conversation != conv {
		t.Fatalf("subscribe %s: %+v %v", conv, f, err)
	}
	return &watcher{t: t, conn: conn, conv: conv}
}

// next returns the next event.
func (w *watcher) next(ctx context.Context) events.Event {
	w.t.Helper()
	for {
		f, err := w.conn.Next(ctx)
		if err != nil {
			w.t.Fatalf("watch %s: %v", w.conv, err)
		}
		if f.Type == "error" {
			w.t.Fatalf("watch %s: error frame %s: %s", w.conv, f.Code, f.Message)
		}
		if f.Event != nil {
			if f.Event.Header().Conversation != w.conv {
				w.t.Fatalf("event of conversation %q on a subscription to %q", f.Event.Header().Conversation, w.conv)
			}
			if f.Event.Header().Cursor == "" {
				w.t.Fatalf("event without cursor: %s", f.Raw)
			}
			w.seen = append(w.seen, f.Event)
			return f.Event
		}
	}
}

// run is what the stream showed of one request.
type run struct {
	text    string
	status  events.Status
	notices int
	started int
	events  []events.Event
}

// until reads events until requestID completes and returns its run.
func (w *watcher) until(ctx context.Context, requestID string) run {
	w.t.Helper()
	var r run
	for {
		e := w.next(ctx)
		if e.Header().RequestID != requestID {
			continue
		}
		r.events = append(r.events, e)
		switch e := e.(type) {
		case *events.RunStartedEvent:
			r.started++
		case *events.TokenEvent:
			r.text += e.Delta
		case *events.NoticeEvent:
			r.notices++
		case *events.RunCompletedEvent:
			r.status = e.Status
			return r
		}
	}
}

func send(t *testing.T, ctx context.Context, c *client.Client, conv, content string) string {
	t.Helper()
	a, err := c.Send(ctx, conv, content, client.SendOptions{})
	if err != nil {
		t.Fatalf("send %q: %v", content, err)
	}
	if a.Status != "queued" || a.Conversation != conv || a.RequestID == "" {
		t.Fatalf("send answer %+v", a)
	}
	return a.RequestID
}

func historyOf(t *testing.T, ctx context.Context, c *client.Client, conv string) []client.Message {
	t.Helper()
	p, err := c.History(ctx, conv, 200, 0)
	if err != nil {
		t.Fatalf("history %s: %v", conv, err)
	}
	return p.Messages
}

func TestPipeline(t *testing.T) {
	s := startStack(t, "")
	ann := s.client(t, "acme", "ann")

	t.Run("a message is answered over the stream and persisted", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		w := watch(t, ctx, ann, "happy", "")
		id := send(t, ctx, ann, "happy", "hello there")
		r := w.until(ctx, id)
		if r.text != "echo #1: hello there" || r.status != events.StatusComplete || r.started != 1 {
			t.Fatalf("streamed %+v", r)
		}
		for i, e := range r.events {
			if e.Header().Seq != int64(i+1) {
				t.Fatalf("seq %d at %d", e.Header().Seq, i)
			}
		}
		// run.completed comes after the turn is durable.
		h := historyOf(t, ctx, ann, "happy")
		if len(h) != 2 || h[0].Role != "user" || h[0].Content != "hello there" || h[1].Content != "echo #1: hello there" ||
			h[1].Status != "complete" || h[1].Incomplete || h[1].RequestID != id || h[0].Seq != 1 || h[1].Seq != 2 {
			t.Fatalf("history %+v", h)
		}
	})

	t.Run("five messages on one conversation are answered in order", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		w := watch(t, ctx, ann, "five", "")
		var ids []string
		for i := 1; i <= 5; i++ {
			ids = append(ids, send(t, ctx, ann, "five", fmt.Sprintf("message %d", i)))
		}
		for i, id := range ids {
			r := w.until(ctx, id)
			if want := fmt.Sprintf("echo #%d: message %d", i+1, i+1); r.text != want || r.status != events.StatusComplete {
				t.Fatalf("answer %d: %+v, want %q", i+1, r, want)
			}
		}
		h := historyOf(t, ctx, ann, "five")
		if len(h) != 10 {
			t.Fatalf("history has %d messages, want 10", len(h))
		}
		for i := 0; i < 5; i++ {
			if h[2*i].Content != fmt.Sprintf("message %d", i+1) || h[2*i+1].Content != fmt.Sprintf("echo #%d: message %d", i+1, i+1) {
				t.Fatalf("turn %d out of order: %+v %+v", i+1, h[2*i], h[2*i+1])
			}
		}
	})

	t.Run("a failing model persists the partial answer as incomplete", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		w := watch(t, ctx, ann, "fails", "")
		id := send(t, ctx, ann, "fails", "one two three four [[fail-after:3]]")
		r := w.until(ctx, id)
		if r.text != "echo #1: one " || r.status != events.StatusIncomplete || r.notices != 1 {
			t.Fatalf("streamed %+v", r)
		}
		h := historyOf(t, ctx, ann, "fails")
		if len(h) != 2 || h[0].Content != "one two three four [[fail-after:3]]" || h[1].Content != "echo #1: one " ||
			h[1].Status != "incomplete" || !h[1].Incomplete {
			t.Fatalf("history %+v", h)
		}
	})

	t.Run("an empty answer leaves nothing persisted", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		w := watch(t, ctx, ann, "empty", "")
		id := send(t, ctx, ann, "empty", "[[empty]]")
		if r := w.until(ctx, id); r.status != events.StatusDiscarded || r.text != "" || r.notices != 0 {
			t.Fatalf("streamed %+v", r)
		}
		if _, err := ann.History(ctx, "empty", 10, 0); !client.IsCode(err, "not_found") {
			t.Fatalf("history of a conversation with only a discarded run: %v, want not_found", err)
		}
		// The next message sees no trace of the discarded one: K counts it out.
		id = send(t, ctx, ann, "empty", "now")
		if r := w.until(ctx, id); r.text != "echo #1: now" {
			t.Fatalf("after a discarded run: %+v", r)
		}
	})

	t.Run("two users with the same conversation name are isolated", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		bob := s.client(t, "acme", "bob")
		eve := s.client(t, "other", "ann") // same user name, another tenant
		wa := watch(t, ctx, ann, "shared", "")
		wb := watch(t, ctx, bob, "shared", "")
		we := watch(t, ctx, eve, "shared", "")
		ida := send(t, ctx, ann, "shared", "from ann")
		idb := send(t, ctx, bob, "shared", "from bob")
		ide := send(t, ctx, eve, "shared", "from eve")
		for _, c := range []struct {
			w    *watcher
			id   string
			want string
		}{{wa, ida, "echo #1: from ann"}, {wb, idb, "echo #1: from bob"}, {we, ide, "echo #1: from eve"}} {
			if r := c.w.until(ctx, c.id); r.text != c.want {
				t.Fatalf("got %+v, want %q", r, c.want)
			}
		}
		for _, c := range []struct {
			w      *watcher
			own    string
			others []string
		}{{wa, ida, []string{idb, ide}}, {wb, idb, []string{ida, ide}}, {we, ide, []string{ida, idb}}} {
			for _, e := range c.w.seen {
				for _, o := range c.others {
					if e.Header().RequestID == o {
						t.Fatalf("a subscriber saw another identity's event %+v", e.Header())
					}
				}
			}
		}
		for _, c := range []struct {
			c    *client.Client
			want string
		}{{ann, "from ann"}, {bob, "from bob"}, {eve, "from eve"}} {
			if h := historyOf(t, ctx, c.c, "shared"); len(h) != 2 || h[0].Content != c.want {
				t.Fatalf("history %+v, want only %q", h, c.want)
			}
		}
	})

	t.Run("a malformed record goes to the dead-letter topic and the next one is processed", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		w := watch(t, ctx, ann, "dlq", "")
		key := "acme/ann/dlq"
		wr := testenv.Producer(t, s.Brokers, "turnpike.requests")
		bad := []byte(`{"v":1,"tenant":"acme","user":"ann","conversation":"dlq","content":"a\u0000b"}`)
		good := []byte(`{"v":1,"tenant":"acme","user":"ann","conversation":"dlq","content":"direct producer"}`)
		if err := wr.WriteMessages(ctx, kafka.Message{Key: []byte(key), Value: bad}, kafka.Message{Key: []byte(key), Value: good}); err != nil {
			t.Fatal(err)
		}
		// The direct producer gave no request id: the worker derives one.
		var r run
		for r.status == "" {
			e := w.next(ctx)
			if tok, ok := e.(*events.TokenEvent); ok {
				r.text += tok.Delta
			}
			if c, ok := e.(*events.RunCompletedEvent); ok {
				r.status = c.Status
				if !strings.HasPrefix(c.RequestID, "d-") {
					t.Fatalf("derived request id %q", c.RequestID)
				}
			}
		}
		if r.text != "echo #1: direct producer" || r.status != events.StatusComplete {
			t.Fatalf("streamed %+v", r)
		}
		dlq := kafka.NewReader(kafka.ReaderConfig{Brokers: s.Brokers, GroupID: testenv.Name(t, "dlq"), Topic: "turnpike.requests.dlq", StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
		defer dlq.Close()
		for {
			m, err := dlq.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("dead-letter topic: %v", err)
			}
			if string(m.Key) != key {
				continue
			}
			if string(m.Value) != string(bad) {
				t.Fatalf("dead-lettered value %q, want the original bytes", m.Value)
			}
			var reason string
			for _, h := range m.Headers {
				if h.Key == "turnpike-dlq-reason" {
					reason = string(h.Value)
				}
			}
			if !strings.Contains(reason, "NUL") {
				t.Fatalf("reason %q", reason)
			}
			return
		}
	})

	t.Run("an idempotency key yields one request id and one turn", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		w := watch(t, ctx, ann, "idem", "")
		var ids []string
		for range 3 {
			a, err := ann.Send(ctx, "idem", "only once", client.SendOptions{IdempotencyKey: "key-1"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, a.RequestID)
		}
		if ids[0] != ids[1] || ids[1] != ids[2] {
			t.Fatalf("request ids %v", ids)
		}
		var started, completed int
		for completed < 3 {
			switch e := w.next(ctx).(type) {
			case *events.RunStartedEvent:
				started++
			case *events.RunCompletedEvent:
				completed++
				if e.Status != events.StatusComplete {
					t.Fatalf("completed %s", e.Status)
				}
			}
		}
		if started != 1 {
			t.Fatalf("the model ran %d times", started)
		}
		if h := historyOf(t, ctx, ann, "idem"); len(h) != 2 {
			t.Fatalf("history %+v: want one turn", h)
		}
	})

	t.Run("resuming from a cursor gives no gap and no duplicate", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		first := watch(t, ctx, ann, "resume", "")
		id1 := send(t, ctx, ann, "resume", "[[tokens:30]]")
		id2 := send(t, ctx, ann, "resume", "[[tokens:30]]")
		all := append(first.until(ctx, id1).events, first.until(ctx, id2).events...)
		for _, cut := range []int{0, 1, 5, len(all) / 2, len(all) - 2} {
			w := watch(t, ctx, ann, "resume", all[cut].Header().Cursor)
			// a request that completes after the resume arrives live
			id3 := send(t, ctx, ann, "resume", fmt.Sprintf("after cut %d", cut))
			var got []events.Event
			for {
				e := w.next(ctx)
				got = append(got, e)
				if c, ok := e.(*events.RunCompletedEvent); ok && c.RequestID == id3 {
					break
				}
			}
			want := all[cut+1:]
			if len(got) < len(want) {
				t.Fatalf("cut %d: got %d events, want at least %d", cut, len(got), len(want))
			}
			for i := range want {
				if got[i].Header().Cursor != want[i].Header().Cursor || got[i].Header().Seq != want[i].Header().Seq {
					t.Fatalf("cut %d: event %d is %+v, want %+v", cut, i, got[i].Header(), want[i].Header())
				}
			}
			seen := map[string]bool{}
			for _, e := range got {
				if seen[e.Header().Cursor] {
					for i, g := range got {
						t.Logf("got[%d] %s %+v", i, g.Type(), g.Header())
					}
					t.Logf("ids %s %s %s", id1, id2, id3)
					t.Fatalf("cut %d: duplicate event %+v", cut, e.Header())
				}
				seen[e.Header().Cursor] = true
			}
			// keep the full list current for the next cut
			all = append(all, got[len(want):]...)
		}
	})

	t.Run("since earliest replays a conversation posted before the subscription", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		live := watch(t, ctx, ann, "late", "")
		id := send(t, ctx, ann, "late", "posted first")
		want := live.until(ctx, id)
		w := watch(t, ctx, ann, "late", "earliest")
		got := w.until(ctx, id)
		if got.text != want.text || len(got.events) != len(want.events) || got.started != 1 {
			t.Fatalf("earliest replay %+v, want %+v", got, want)
		}
	})

	t.Run("requests of a bad token or of another identity are refused", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 30*time.Second)
		bad := *ann
		bad.Token = ann.Token + "x"
		if _, err := bad.Send(ctx, "c", "x", client.SendOptions{}); !client.IsCode(err, "unauthenticated") {
			t.Fatalf("bad token: %v", err)
		}
		if _, err := bad.Dial(ctx); err == nil {
			t.Fatal("WebSocket upgrade with a bad token succeeded")
		}
		mallory := s.client(t, "acme", "mallory")
		if _, err := mallory.History(ctx, "happy", 10, 0); !client.IsCode(err, "not_found") {
			t.Fatalf("another user's conversation: %v, want not_found", err)
		}
		var ae *client.APIError
		if _, err := ann.Send(ctx, "bad/name", "x", client.SendOptions{}); !errors.As(err, &ae) || ae.Status/100 != 4 {
			t.Fatalf("bad conversation id: %v", err)
		}
	})
}
