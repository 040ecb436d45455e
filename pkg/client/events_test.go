package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// sseFrame is a token event of request r, seq n, with its cursor.
func sseFrame(n int) []byte {
	return events.MarshalEvent(&events.TokenEvent{
		Meta:  events.Meta{Conversation: "c1", RequestID: "r", RunID: "u", Seq: int64(n), TS: 1, Cursor: fmt.Sprintf("1-0-%d", n)},
		Delta: fmt.Sprintf("w%d ", n), Agent: "echo", Role: "assistant",
	})
}

// sseServer serves the events endpoint with handle.
func sseServer(t *testing.T, handle func(w http.ResponseWriter, r *http.Request)) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/conversations/c1/events" || r.Header.Get("Authorization") != "Bearer t" {
			http.Error(w, `{"error":{"code":"invalid_argument","message":"bad path or token"}}`, 400)
			return
		}
		handle(w, r)
	}))
	t.Cleanup(srv.Close)
	return &Client{StreamURL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/stream", Token: "t"}
}

func streamHead(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
}

func TestEventStreamReadsTheEventStreamFormat(t *testing.T) {
	t.Parallel()
	c := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		streamHead(w)
		f1, f2 := sseFrame(1), sseFrame(2)
		cut := strings.Index(string(f1), `,"request_id"`) + 1 // between two members
		// A retry field, comments, CRLF line ends, data split over two
		// lines (joined with "\n", which JSON reads as a space), a field
		// without a space after the colon, an unknown field.
		fmt.Fprintf(w, "retry: 1500\n\n: heartbeat\n\nevent: subscribed\ndata: {\"type\":\"subscribed\",\"conversation\":\"c1\"}\n\n")
		fmt.Fprintf(w, "id: 1-0-1\r\nevent: token\r\ndata: %s\r\ndata: %s\r\n\r\n", f1[:cut], f1[cut:])
		fmt.Fprintf(w, ": between\nid:1-0-2\nfoo: bar\nevent:token\ndata:%s\n\n", f2)
		fmt.Fprintf(w, "event: error\ndata: {\"type\":\"error\",\"code\":\"cursor_expired\",\"message\":\"gone\"}\n\n")
	})
	ctx := context.Background()
	s, err := c.Events(ctx, "c1", EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := []string{"subscribed", "token 1", "token 2", "error cursor_expired"}
	for i, w := range want {
		f, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		got := f.Type
		if f.Event != nil {
			got += fmt.Sprintf(" %d", f.Event.Header().Seq)
		}
		if f.Code != "" {
			got += " " + f.Code
		}
		if got != w {
			t.Fatalf("frame %d = %q, want %q", i, got, w)
		}
	}
	if _, err := s.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last event: %v, want io.EOF", err)
	}
	if s.Retry() != 1500*time.Millisecond {
		t.Errorf("Retry = %v, want 1.5s", s.Retry())
	}
}

func TestEventStreamCutMidEventIsAnUnexpectedEOF(t *testing.T) {
	t.Parallel()
	c := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		streamHead(w)
		fmt.Fprintf(w, "id: 1-0-1\nevent: token\ndata: %s", sseFrame(1))
	})
	s, err := c.Events(context.Background(), "c1", EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if f, err := s.Next(context.Background()); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Next = %+v, %v; want io.ErrUnexpectedEOF (a half event is never delivered)", f, err)
	}
}

func TestEventsSendsThePositionAndReportsRefusals(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	c := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.RawQuery+"|"+r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		if r.URL.Query().Get("follow") == "refuse" {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(429)
			io.WriteString(w, `{"error":{"code":"rate_limited","message":"slow down"}}`)
			return
		}
		streamHead(w)
	})
	ctx := context.Background()
	for _, o := range []EventsOptions{{}, {Since: "earliest"}, {Since: "1-0-7", Follow: "r1"}} {
		s, err := c.Events(ctx, "c1", o)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	_, err := c.Events(ctx, "c1", EventsOptions{Follow: "refuse"})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 429 || ae.Code != "rate_limited" || ae.RetryAfter != 3*time.Second {
		t.Fatalf("refused: %v, want an APIError 429 rate_limited with Retry-After 3s", err)
	}
	want := []string{"|", "since=earliest|", "follow=r1|1-0-7", "follow=refuse|"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("requests %q, want %q", got, want)
	}
}

func TestEventsURLDefaultsToTheStreamURLsHost(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, stream, events, want string }{
		{"ws gives http.", "ws://gw:8081/v1/stream", "", "http://gw:8081/v1/conversations/c%201/events"},
		{"wss gives https.", "wss://gw.example.com/v1/stream", "", "https://gw.example.com/v1/conversations/c%201/events"},
		{"EventsURL wins.", "ws://gw:8081/v1/stream", "https://sse.example.com/", "https://sse.example.com/v1/conversations/c%201/events"},
	}
	for _, tt := range tests {
		c := &Client{StreamURL: tt.stream, EventsURL: tt.events}
		got, err := c.eventsURL("c 1")
		if err != nil || got != tt.want {
			t.Errorf("%s: %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

// TestASubscriptionOverSSEResumesWithLastEventID: the server cuts every
// stream after two events; the subscription reconnects with the last
// cursor as Last-Event-ID and the caller sees every event once.
func TestASubscriptionOverSSEResumesWithLastEventID(t *testing.T) {
	t.Parallel()
	const total = 7
	var mu sync.Mutex
	var ids []string
	c := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		last := r.Header.Get("Last-Event-ID")
		mu.Lock()
		ids = append(ids, last)
		mu.Unlock()
		from := 1
		if last != "" {
			fmt.Sscanf(last, "1-0-%d", &from)
			from++
		}
		streamHead(w)
		fmt.Fprint(w, "event: subscribed\ndata: {\"type\":\"subscribed\",\"conversation\":\"c1\"}\n\n")
		for n := from; n < from+2 && n <= total; n++ {
			fmt.Fprintf(w, "id: 1-0-%d\nevent: token\ndata: %s\n\n", n, sseFrame(n))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub, err := c.Subscribe(ctx, "c1", SubscribeOptions{SSE: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for n := 1; n <= total; n++ {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("event %d: %v", n, err)
		}
		if e.Header().Seq != int64(n) {
			t.Fatalf("event %d has seq %d", n, e.Header().Seq)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"", "1-0-2", "1-0-4", "1-0-6"}; strings.Join(ids, " ") != strings.Join(want, " ") {
		t.Fatalf("Last-Event-IDs %q, want %q", ids, want)
	}
}

func TestEventStreamReadsLongLinesWithinItsBound(t *testing.T) {
	t.Parallel()
	long := events.MarshalEvent(&events.TokenEvent{
		Meta:  events.Meta{Conversation: "c1", RequestID: "r", RunID: "u", Seq: 1, TS: 1, Cursor: "1-0-1"},
		Delta: strings.Repeat("x", 8<<10), Agent: "echo", Role: "assistant",
	})
	c := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		streamHead(w)
		fmt.Fprintf(w, "event: token\ndata: %s\n\n", long)
		fmt.Fprintf(w, "event: token\ndata: %s\n\n", strings.Repeat("y", maxEventBytes+1))
	})
	s, err := c.Events(context.Background(), "c1", EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, err := s.Next(context.Background())
	if err != nil || len(f.Event.(*events.TokenEvent).Delta) != 8<<10 {
		t.Fatalf("an 8 KiB event (over the reader's 4 KiB buffer): %v", err)
	}
	if _, err := s.Next(context.Background()); err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("an event over the bound: %v, want an error", err)
	}
}

func TestEventStreamNextReturnsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	c := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		streamHead(w)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // a quiet stream
	})
	s, err := c.Events(context.Background(), "c1", EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Cancelled once Next waits on its context (asks for Done), not after
	// a guessed time; the test's own context bounds the wait.
	bound := testenv.Context(t, 30*time.Second)
	inner, cancel := context.WithCancel(bound)
	ctx, asked := testenv.WatchDone(inner)
	go func() {
		select {
		case <-asked:
		case <-bound.Done():
		}
		cancel()
	}()
	if _, err := s.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next = %v, want context.Canceled", err)
	}
}

func TestEventStreamBoundIsPerEventNotPerIdleStretch(t *testing.T) {
	t.Parallel()
	// More heartbeats between two events than maxEventBytes holds: a quiet
	// stream (15 s heartbeats for about two weeks), not one big event.
	beats := strings.Repeat(": heartbeat\n\n", maxEventBytes/len(": heartbeat\n\n")+1)
	c := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		streamHead(w)
		fmt.Fprintf(w, "%sevent: token\ndata: %s\n\n", beats, sseFrame(1))
	})
	s, err := c.Events(context.Background(), "c1", EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, err := s.Next(context.Background())
	if err != nil || f.Event == nil || f.Event.Header().Seq != 1 {
		t.Fatalf("Next after %d bytes of heartbeats = %+v, %v; want the event", len(beats), f, err)
	}
}

// docs/api.md: clients ignore members they do not know, in events and
// frames; an event stream's data is a frame.
func TestEventStreamIgnoresMembersItDoesNotKnow(t *testing.T) {
	t.Parallel()
	all := everyEvent()
	c := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		streamHead(w)
		fmt.Fprintf(w, "event: subscribed\ndata: {\"type\":\"subscribed\",\"conversation\":\"c1\",\"x_replica\":\"gw-2\"}\n\n")
		for _, e := range all {
			fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", e.Header().Cursor, e.Type(), withUnknownMembers(events.MarshalEvent(e)))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.Events(ctx, "c1", EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if f, err := s.Next(ctx); err != nil || f.Type != "subscribed" || f.Conversation != "c1" {
		t.Fatalf("subscribed with an unknown member: %+v, %v", f, err)
	}
	for _, want := range all {
		f, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("%s with unknown members: %v", want.Type(), err)
		}
		if !reflect.DeepEqual(f.Event, want) {
			t.Errorf("%s with unknown members decoded as %#v, want %#v", want.Type(), f.Event, want)
		}
	}
	if _, err := s.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last event: %v, want io.EOF", err)
	}
}

// docs/api.md "Shard hints": a Subscription over event streams keeps the
// shard the gateway's subscribed frame named (Subscription.Shard) and
// reconnects with it as ?shard=, so an edge routing by shard sends it to
// the replica reading its partition and the gateway need not redirect.
func TestASubscriptionOverSSEReconnectsWithItsConversationsShardHint(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var hints []string
	c := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hints = append(hints, r.URL.Query().Get("shard"))
		mu.Unlock()
		n := 1
		if r.Header.Get("Last-Event-ID") != "" {
			n = 2
		}
		streamHead(w)
		fmt.Fprint(w, "event: subscribed\ndata: {\"type\":\"subscribed\",\"conversation\":\"c1\",\"shard\":3}\n\n")
		fmt.Fprintf(w, "id: 1-0-%d\nevent: token\ndata: %s\n\n", n, sseFrame(n))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub, err := c.Subscribe(ctx, "c1", SubscribeOptions{SSE: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if sub.Shard() != 3 {
		t.Fatalf("Shard() = %d once subscribed, want 3", sub.Shard())
	}
	for n := 1; n <= 2; n++ {
		if e, err := sub.Next(ctx); err != nil || e.Header().Seq != int64(n) {
			t.Fatalf("event %d: %v, %v", n, e, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(hints, ",") != ",3" {
		t.Fatalf("shard hints of the requests %q, want none on the first and 3 on the reconnection", hints)
	}
}
