package pushgw

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// sseMessage is one parsed Server-Sent Event (or comment) of a test stream.
type sseMessage struct {
	id, event, data string
	comment         bool
	fr              frame // data decoded
}

// sseStream is a test client's open event stream.
type sseStream struct {
	t    *testing.T
	resp *http.Response
	br   *bufio.Reader
	// retry is the retry field seen, "" before it.
	retry string
}

// eventsURL is the events endpoint of in for conv with the query q.
func (in *instance) eventsURL(conv string, q url.Values) string {
	u := in.srv.URL + "/v1/conversations/" + url.PathEscape(conv) + "/events"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// openSSE GETs u with the bearer tok (none when ""), the headers h and a
// context of its own; it returns the response, whatever its status.
func openSSE(ctx context.Context, t *testing.T, u, tok string, h http.Header) (*sseStream, error) {
	return openSSEWith(ctx, t, http.DefaultClient, u, tok, h)
}

// openSSEWith is openSSE with the HTTP client hc.
func openSSEWith(ctx context.Context, t *testing.T, hc *http.Client, u, tok string, h http.Header) (*sseStream, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return &sseStream{t: t, resp: resp, br: bufio.NewReader(resp.Body)}, nil
}

// mustOpenSSE opens a stream that must answer 200 text/event-stream.
func mustOpenSSE(ctx context.Context, t *testing.T, u, tok string, h http.Header) *sseStream {
	t.Helper()
	return mustOpenSSEWith(ctx, t, http.DefaultClient, u, tok, h)
}

// mustOpenSSEWith is mustOpenSSE with the HTTP client hc.
func mustOpenSSEWith(ctx context.Context, t *testing.T, hc *http.Client, u, tok string, h http.Header) *sseStream {
	t.Helper()
	s, err := openSSEWith(ctx, t, hc, u, tok, h)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	if s.resp.StatusCode != http.StatusOK || !strings.HasPrefix(s.resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(s.resp.Body)
		t.Fatalf("GET events: %d %s %s, want 200 text/event-stream", s.resp.StatusCode, s.resp.Header.Get("Content-Type"), b)
	}
	return s
}

// read returns the next event or comment; io.EOF when the stream ended.
// Events with an id must have a data that decodes strictly and carries the
// id as its cursor.
func (s *sseStream) read() (sseMessage, error) {
	var m sseMessage
	seen := false
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			if err == io.EOF && seen {
				return m, io.ErrUnexpectedEOF
			}
			return m, err
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if !seen {
				continue
			}
			if m.data != "" {
				if err := json.Unmarshal([]byte(m.data), &m.fr); err != nil {
					s.t.Errorf("event data %q is not JSON: %v", m.data, err)
				}
			}
			if m.id != "" {
				if _, err := events.DecodeEvent([]byte(m.data)); err != nil {
					s.t.Errorf("event %s does not decode: %v", m.data, err)
				}
				if m.fr.Cursor != m.id {
					s.t.Errorf("event id %q, its data's cursor %q", m.id, m.fr.Cursor)
				}
				if m.event != m.fr.Type {
					s.t.Errorf("event field %q, its data's type %q", m.event, m.fr.Type)
				}
			}
			return m, nil
		}
		seen = true
		if strings.HasPrefix(line, ":") {
			if m.id == "" && m.event == "" && m.data == "" {
				// A comment stands alone in what the gateway writes.
				return sseMessage{comment: true, data: line}, nil
			}
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			m.id = value
		case "event":
			m.event = value
		case "data":
			if m.data != "" {
				m.data += "\n"
			}
			m.data += value
		case "retry":
			s.retry = value
			seen = false
		default:
			s.t.Errorf("unknown field in line %q", line)
		}
	}
}

// next returns the next event, skipping comments.
func (s *sseStream) next() sseMessage {
	s.t.Helper()
	for {
		m, err := s.read()
		if err != nil {
			s.t.Fatalf("read event: %v", err)
		}
		if !m.comment {
			return m
		}
	}
}

func (s *sseStream) expect(typ string) sseMessage {
	s.t.Helper()
	m := s.next()
	if m.event != typ {
		s.t.Fatalf("got event %q %s, want %q", m.event, m.data, typ)
	}
	return m
}

// subscribed expects the stream's subscribed event; it returns s.
func (s *sseStream) subscribed() *sseStream {
	s.t.Helper()
	s.expect("subscribed")
	return s
}

// events reads n stream events (with an id) as frames.
func (s *sseStream) events(n int) []frame {
	s.t.Helper()
	out := make([]frame, 0, n)
	for len(out) < n {
		m := s.next()
		if m.id == "" {
			s.t.Fatalf("got %q %s, want an event with an id (after %d of %d)", m.event, m.data, len(out), n)
		}
		out = append(out, m.fr)
	}
	return out
}

// heartbeat reads until a heartbeat comment; it fails on the stream's end.
func (s *sseStream) heartbeat() {
	s.t.Helper()
	for {
		m, err := s.read()
		if err != nil {
			s.t.Fatalf("read until a heartbeat: %v", err)
		}
		if m.comment && m.data == ": heartbeat" {
			return
		}
	}
}

// ended reads until the stream ends, skipping comments; it fails on any
// other event.
func (s *sseStream) ended() {
	s.t.Helper()
	for {
		m, err := s.read()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			s.t.Fatalf("stream ended with %v, want a clean end", err)
		}
		if !m.comment {
			s.t.Fatalf("got %q %s, want the end of the stream", m.event, m.data)
		}
	}
}

func TestEventsStreamEachEventWithItsCursorTypeAndWebSocketFrame(t *testing.T) {
	t.Parallel()
	ctx, f := startedFixture(t)
	conv, id := aliceConv(t)
	tok := token(t, auth.DefaultTenant, "alice")

	ws := f.dial(ctx, tok).subscribed(ctx, conv, "")
	s := mustOpenSSE(ctx, t, f.eventsURL(conv, nil), tok, nil)
	if got := s.expect("subscribed"); got.id != "" || got.fr.Conversation != conv {
		t.Fatalf("subscribed event %+v, want no id and the conversation", got)
	}
	if s.retry != "2000" {
		t.Errorf("retry field %q, want 2000 (the default)", s.retry)
	}
	f.produce(ctx, id, "r", 1, 5)
	f.complete(ctx, id, "r", 6)
	for i := 1; i <= 6; i++ {
		_ = ws.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, wsData, err := ws.conn.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		m := s.next()
		if m.data != string(wsData) {
			t.Fatalf("event %d: data %s, the WebSocket frame %s", i, m.data, wsData)
		}
		if m.fr.Seq != i {
			t.Fatalf("event %d has seq %d", i, m.fr.Seq)
		}
		want := "token"
		if i == 6 {
			want = "run.completed"
		}
		if m.event != want {
			t.Errorf("event %d: type %q, want %q", i, m.event, want)
		}
	}
	checkMetric(t, f.reg, "turnpike_pushgw_sse_connections", 1)
	checkMetric(t, f.reg, "turnpike_pushgw_connections", 2) // one of each
	// Each transport times the 6 live events it wrote (and not the
	// subscribed frames), once they are on the socket or flushed.
	for _, tr := range []string{transportWebSocket, transportSSE} {
		awaitHistogramCount(t, ctx, f.reg, "turnpike_pushgw_client_write_lag_seconds", tr, 6)
	}
}

// TestEveryEventStreamAnswerCarriesTheStreamHeaders: docs/api.md "The
// stream" and docs/pushgw.md "Server-Sent Events behind proxies": every 200
// of the events endpoint is text/event-stream, never cached and not buffered
// by nginx, whether the gateway writes the head itself (HTTP/1.1), through
// the ResponseWriter (HTTP/2), or answers unavailable with one error event.
func TestEveryEventStreamAnswerCarriesTheStreamHeaders(t *testing.T) {
	t.Parallel()
	ctx, f := startedFixture(t)
	conv := testenv.Name(t, "c")
	tok := token(t, auth.DefaultTenant, "alice")
	hc, base := f.http2Events(t)
	v, err := auth.NewVerifier(testSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	idle, err := newGateway(Config{Brokers: []string{"127.0.0.1:1"}}, v, nil, nil) // never runs
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		open func(t *testing.T) (status int, h http.Header)
	}{
		{"A stream over HTTP/1.1, whose head the gateway writes itself, carries them.", func(t *testing.T) (int, http.Header) {
			s := mustOpenSSE(ctx, t, f.eventsURL(conv, nil), tok, nil)
			s.subscribed()
			return s.resp.StatusCode, s.resp.Header
		}},
		{"A stream over HTTP/2, written through the ResponseWriter, carries them.", func(t *testing.T) (int, http.Header) {
			s, err := openSSEWith(ctx, t, hc, base+"/v1/conversations/"+conv+"/events", tok, nil)
			if err != nil {
				t.Fatal(err)
			}
			if s.resp.ProtoMajor != 2 {
				t.Fatalf("%s, want HTTP/2", s.resp.Proto)
			}
			s.subscribed()
			return s.resp.StatusCode, s.resp.Header
		}},
		{"The unavailable answer of a gateway not running carries them.", func(t *testing.T) (int, http.Header) {
			req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/v1/conversations/"+conv+"/events", nil)
			req.SetPathValue("conversation", conv)
			req.Header.Set("Authorization", "Bearer "+tok)
			rec := httptest.NewRecorder()
			idle.ServeEvents(rec, req)
			if !strings.Contains(rec.Body.String(), `"code":"unavailable"`) {
				t.Errorf("body %q, want one unavailable error event", rec.Body)
			}
			return rec.Code, rec.Header()
		}},
	}
	// The cases run one after the other within the fixture's deadline: as
	// parallel subtests they would wait for a free slot behind the
	// package's other parallel tests while that deadline ran.
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, h := tt.open(t)
			if status != http.StatusOK {
				t.Fatalf("status %d, want 200", status)
			}
			for name, want := range map[string]string{
				"Content-Type":      "text/event-stream; charset=utf-8",
				"Cache-Control":     "no-store",
				"X-Accel-Buffering": "no",
			} {
				if got := h.Values(name); len(got) != 1 || got[0] != want {
					t.Errorf("%s: %q, want %q", name, got, want)
				}
			}
		})
	}
}

func TestEventsResumeFromLastEventIDOrSinceWithoutGapOrDuplicate(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	conv, id := aliceConv(t)
	f.produce(ctx, id, "r", 1, 10) // only in Kafka
	f.start(ctx, func(c *Config) { c.RingBytes = 1 }, nil)
	tok := token(t, auth.DefaultTenant, "alice")

	s := mustOpenSSE(ctx, t, f.eventsURL(conv, url.Values{"since": {"earliest"}}), tok, nil).subscribed()
	got := s.events(10)
	checkSeqs(t, got, "r", 1, 10)

	// Last-Event-ID wins over the URL's since, as when an EventSource
	// opened with since=earliest reconnects.
	f.produce(ctx, id, "r", 11, 15)
	r := mustOpenSSE(ctx, t, f.eventsURL(conv, url.Values{"since": {"earliest"}}), tok, http.Header{"Last-Event-Id": {got[6].Cursor}}).subscribed()
	checkSeqs(t, r.events(8), "r", 8, 15)

	q := mustOpenSSE(ctx, t, f.eventsURL(conv, url.Values{"since": {got[9].Cursor}}), tok, nil).subscribed()
	checkSeqs(t, q.events(5), "r", 11, 15)
}

func TestAnExpiredLastEventIDGetsACursorExpiredErrorEventAndTheStreamEnds(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	conv, id := aliceConv(t)
	p := partitionOf(id)
	f.produce(ctx, id, "r", 1, 10)
	f.deleteRecordsBefore(ctx, p, 5)
	f.start(ctx, nil, nil)
	tok := token(t, auth.DefaultTenant, "alice")

	s := mustOpenSSE(ctx, t, f.eventsURL(conv, nil), tok, http.Header{"Last-Event-Id": {FormatCursor(p, 3)}})
	m := s.expect("error")
	if m.fr.Code != codeCursorExpired || m.id != "" || m.fr.Conversation != conv {
		t.Fatalf("error event %+v, want cursor_expired without id, naming %s (it ends the stream's replay)", m, conv)
	}
	s.ended()
	ok := mustOpenSSE(ctx, t, f.eventsURL(conv, nil), tok, http.Header{"Last-Event-Id": {FormatCursor(p, 4)}}).subscribed()
	checkSeqs(t, ok.events(5), "r", 6, 10)
}

func TestFollowStreamsOneRequestAndEndsAfterItsRunCompleted(t *testing.T) {
	t.Parallel()
	ctx, f := startedFixture(t)
	conv, id := aliceConv(t)
	tok := token(t, auth.DefaultTenant, "alice")
	f.produce(ctx, id, "r1", 1, 3)
	f.complete(ctx, id, "r1", 4)
	f.produce(ctx, id, "r2", 1, 2) // r2 began before the stream opens

	s := mustOpenSSE(ctx, t, f.eventsURL(conv, url.Values{"follow": {"r2"}}), tok, nil).subscribed()
	checkSeqs(t, s.events(2), "r2", 1, 2)
	f.produce(ctx, id, "r3", 1, 2) // another request meanwhile: not followed
	f.produce(ctx, id, "r2", 3, 4)
	f.complete(ctx, id, "r2", 5)
	f.produce(ctx, id, "r2", 6, 6) // never seen: the stream has ended
	checkSeqs(t, s.events(2), "r2", 3, 4)
	if m := s.expect("run.completed"); m.fr.RequestID != "r2" {
		t.Fatalf("run.completed of %q, want r2", m.fr.RequestID)
	}
	s.ended()
}

func TestEventsRefuseBadRequestsBeforeStreaming(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	f.start(ctx, func(c *Config) { c.AllowedOrigins = []string{"https://app.example.com"} }, nil)
	conv := testenv.Name(t, "c")
	alice := token(t, auth.DefaultTenant, "alice")
	expired, err := auth.Mint(testSecret, auth.DefaultTenant, "alice", time.Minute, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	other := events.Identity{Tenant: auth.DefaultTenant, User: "alice", Conversation: conv}
	otherPartition := (partitionOf(other) + 1) % testPartitions
	tests := []struct {
		name   string
		conv   string
		q      url.Values
		tok    string
		h      http.Header
		status int
		code   string
	}{
		{"No token is 401.", conv, nil, "", nil, 401, "unauthenticated"},
		{"An expired token is 401.", conv, nil, expired, nil, 401, "unauthenticated"},
		{"A token signed with another secret is 401.", conv, nil, "x.y.z", nil, 401, "unauthenticated"},
		{"A foreign origin is 403.", conv, nil, alice, http.Header{"Origin": {"https://evil.example.net"}}, 403, "permission_denied"},
		{"A foreign origin without a token is 403: the origin is checked first.", conv, nil, "", http.Header{"Origin": {"https://evil.example.net"}}, 403, "permission_denied"},
		{"A bad conversation without a token is 401: the token is checked first.", "a b", nil, "", nil, 401, "unauthenticated"},
		{"A bad conversation is 400.", "a b", nil, alice, nil, 400, "invalid_argument"},
		{"A bad since is 400.", conv, url.Values{"since": {"yesterday"}}, alice, nil, 400, "invalid_argument"},
		{"A bad Last-Event-ID is 400.", conv, nil, alice, http.Header{"Last-Event-Id": {"earliest"}}, 400, "invalid_argument"},
		{"A cursor of another partition is 400.", conv, url.Values{"since": {FormatCursor(otherPartition, 0)}}, alice, nil, 400, "invalid_argument"},
		{"A cursor past the end of the stream is 400.", conv, url.Values{"since": {FormatCursor(partitionOf(other), 1<<40)}}, alice, nil, 400, "invalid_argument"},
		{"A bad follow is 400.", conv, url.Values{"follow": {""}}, alice, nil, 400, "invalid_argument"},
		{"An unknown parameter is 400.", conv, url.Values{"sinc": {"earliest"}}, alice, nil, 400, "invalid_argument"},
		{"A repeated parameter is 400.", conv, url.Values{"since": {"earliest", "earliest"}}, alice, nil, 400, "invalid_argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := openSSE(ctx, t, f.eventsURL(tt.conv, tt.q), tt.tok, tt.h)
			if err != nil {
				t.Fatal(err)
			}
			if s.resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", s.resp.StatusCode, tt.status)
			}
			if code := errorCode(t, s.resp); code != tt.code {
				t.Errorf("code %q, want %q", code, tt.code)
			}
			// docs/api.md "Refusals before the stream": a 401 carries a
			// Bearer challenge, and no other refusal does.
			challenge := ""
			if tt.status == http.StatusUnauthorized {
				challenge = "Bearer"
			}
			if got := s.resp.Header.Get("WWW-Authenticate"); got != challenge {
				t.Errorf("WWW-Authenticate %q, want %q", got, challenge)
			}
		})
	}
	// The token may come as ?access_token= (EventSource sets no header),
	// and an allowed origin gets the CORS header.
	s := mustOpenSSE(ctx, t, f.eventsURL(conv, url.Values{"access_token": {alice}}), "", http.Header{"Origin": {"https://app.example.com"}}).subscribed()
	if got := s.resp.Header.Get("Access-Control-Allow-Origin"); got != "https://app.example.com" {
		t.Errorf("Access-Control-Allow-Origin %q, want the origin", got)
	}
	// A CORS preflight is answered for an allowed origin only.
	for _, o := range []struct {
		origin string
		allow  bool
	}{{"https://app.example.com", true}, {"https://evil.example.net", false}} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodOptions, f.eventsURL(conv, nil), nil)
		req.Header.Set("Origin", o.origin)
		req.Header.Set("Access-Control-Request-Headers", "last-event-id")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := resp.Header.Get("Access-Control-Allow-Origin") + "|" + resp.Header.Get("Access-Control-Allow-Headers")
		want := "|"
		if o.allow {
			want = o.origin + "|Authorization, Last-Event-ID, Cache-Control"
		}
		if resp.StatusCode != http.StatusNoContent || got != want {
			t.Errorf("preflight from %s: %d %q, want 204 %q", o.origin, resp.StatusCode, got, want)
		}
	}
}

func TestEventsNeverCrossIdentities(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	// A conversation whose alice and bob keys share a partition, so that a
	// cursor of alice's passes the partition check for bob.
	var conv string
	for i := 0; ; i++ {
		conv = testenv.Name(t, fmt.Sprintf("c%d", i))
		a := events.Identity{Tenant: auth.DefaultTenant, User: "alice", Conversation: conv}
		b := events.Identity{Tenant: auth.DefaultTenant, User: "bob", Conversation: conv}
		if partitionOf(a) == partitionOf(b) {
			break
		}
	}
	alice := events.Identity{Tenant: auth.DefaultTenant, User: "alice", Conversation: conv}
	bob := events.Identity{Tenant: auth.DefaultTenant, User: "bob", Conversation: conv}
	f.produce(ctx, alice, "secret", 1, 5)
	f.start(ctx, nil, nil)
	aliceTok, bobTok := token(t, auth.DefaultTenant, "alice"), token(t, auth.DefaultTenant, "bob")

	a := mustOpenSSE(ctx, t, f.eventsURL(conv, url.Values{"since": {"earliest"}}), aliceTok, nil).subscribed()
	cursors := a.events(5)
	// bob names alice's conversation, replays from alice's cursor, follows
	// alice's request: he sees his own conversation only.
	for _, q := range []url.Values{{"since": {"earliest"}}, {"since": {cursors[0].Cursor}}, {"follow": {"secret"}}} {
		b := mustOpenSSE(ctx, t, f.eventsURL(conv, q), bobTok, nil).subscribed()
		f.produce(ctx, alice, "secret", 6, 6)
		f.produce(ctx, bob, "mine", 1, 1)
		if q.Has("follow") {
			f.produce(ctx, bob, "secret", 100, 100) // bob's own request of that id
			checkSeqs(t, b.events(1), "secret", 100, 100)
			continue
		}
		got := b.events(1)
		if got[0].RequestID != "mine" {
			t.Fatalf("bob with %v got %+v, want only his own event", q, got[0])
		}
	}
}

// TestASlowEventStreamIsCutOffWhileOthersGetEveryEvent: a stream whose
// reader stalls is ended when its queue fills, while a WebSocket client
// and another stream of the same conversation get every event; the slow
// one resumes with Last-Event-ID and misses nothing.
func TestASlowEventStreamIsCutOffWhileOthersGetEveryEvent(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 40*time.Second)
	f := newFixture(t, ctx)
	f.start(ctx, func(c *Config) { c.QueueSize = 16 }, func(l net.Listener) net.Listener { return smallBuffers{l} })
	conv, id := aliceConv(t)
	tok := token(t, auth.DefaultTenant, "alice")

	slowClient := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4 << 10)
		}
		return c, err
	}}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.eventsURL(conv, nil), nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := slowClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	slow := &sseStream{t: t, resp: resp, br: bufio.NewReaderSize(resp.Body, 16)}
	slow.expect("subscribed")
	fast := mustOpenSSE(ctx, t, f.eventsURL(conv, nil), tok, nil).subscribed()
	ws := f.dial(ctx, tok).subscribed(ctx, conv, "")

	// Each event is produced once the other two have the one before:
	// their queues never hold more than one, however slowly they are
	// scheduled, while the slow stream's fills up.
	const total = 300
	for n := 1; n <= total; n++ {
		f.produceLarge(ctx, id, n, n)
		checkSeqs(t, ws.events(ctx, 1), "r", n, n)
		checkSeqs(t, fast.events(1), "r", n, n)
	}

	// The slow stream now reads: a prefix, then its end.
	n, last := 0, ""
	for {
		m, err := slow.read()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("slow stream: %v after %d events, want its end", err, n)
			}
			break
		}
		if m.comment {
			continue
		}
		n++
		if m.fr.Seq != n {
			t.Fatalf("slow stream event %d has seq %d", n, m.fr.Seq)
		}
		last = m.id
	}
	if n >= total {
		t.Fatalf("the slow stream got all %d events; it should have been cut off", n)
	}
	checkMetric(t, f.reg, "turnpike_pushgw_slow_disconnects_total", 1)
	h, q := http.Header{"Last-Event-Id": {last}}, url.Values(nil)
	if last == "" { // cut off before its first event
		h, q = nil, url.Values{"since": {"earliest"}}
	}
	again := mustOpenSSE(ctx, t, f.eventsURL(conv, q), tok, h).subscribed()
	checkSeqs(t, again.events(total-n), "r", n+1, total)
}

func TestEventStreamsEndWhenTheGatewayStopsAndAnswerUnavailableBeforeRun(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	f.start(ctx, func(c *Config) { c.SSEHeartbeat = 20 * time.Millisecond }, nil)
	conv := testenv.Name(t, "c")
	tok := token(t, auth.DefaultTenant, "alice")
	s := mustOpenSSE(ctx, t, f.eventsURL(conv, url.Values{"since": {"earliest"}}), tok, nil).subscribed()
	s.heartbeat()
	f.stop()
	s.ended()
	if err := <-f.runErr; err != nil {
		t.Fatalf("Run = %v", err)
	}
	f.runErr <- nil                                             // for the cleanup
	checkMetric(t, f.reg, "turnpike_pushgw_sse_connections", 0) // after Run returned
	// A stopped gateway still answers 200 with an unavailable event, so
	// that an EventSource keeps reconnecting.
	u := mustOpenSSE(ctx, t, f.eventsURL(conv, nil), tok, nil)
	if m := u.expect("error"); m.fr.Code != codeUnavailable {
		t.Fatalf("error event %+v, want unavailable", m)
	}
	u.ended()
}

// TestTheAccessTokenIsNeverLogged runs a stream with the token in the
// query and everything logged.
func TestTheAccessTokenIsNeverLogged(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	var logs syncBuffer
	f.launchLogged = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f.start(ctx, func(c *Config) { c.QueueSize = 1 }, nil)
	conv, id := aliceConv(t)
	tok := token(t, auth.DefaultTenant, "alice")
	mustOpenSSE(ctx, t, f.eventsURL(conv, url.Values{"access_token": {tok}}), "", nil).subscribed()
	f.produce(ctx, id, "r", 1, 50) // a queue of one: shed, and logged at info
	testenv.Eventually(t, ctx, "the slow stream is cut off", func() bool {
		return testenv.MetricValue(t, f.reg, "turnpike_pushgw_slow_disconnects_total") == 1
	})
	testenv.Eventually(t, ctx, "the stream's end is logged", func() bool { return strings.Contains(logs.String(), "client closed") })
	if strings.Contains(logs.String(), tok) || strings.Contains(logs.String(), "access_token") {
		t.Fatalf("the logs hold the token:\n%s", logs.String())
	}
}

// syncBuffer is a log destination safe for concurrent writers, which a
// test can wait on.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	// Guarded by mu.
	written chan struct{} // closed by the next Write; nil while no one waits
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.b.Write(p)
	if b.written != nil {
		close(b.written)
		b.written = nil
	}
	return n, err
}

// await returns once what was written holds s; it fails t when ctx ends
// first.
func (b *syncBuffer) await(ctx context.Context, t testing.TB, s string) {
	t.Helper()
	for {
		b.mu.Lock()
		if strings.Contains(b.b.String(), s) {
			b.mu.Unlock()
			return
		}
		if b.written == nil {
			b.written = make(chan struct{})
		}
		written := b.written
		b.mu.Unlock()
		select {
		case <-written:
		case <-ctx.Done():
			t.Fatalf("the logs never held %q:\n%s", s, b.String())
		}
	}
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// http2Events serves the events endpoint of f's gateway over HTTP/2 (with
// TLS), which cannot hand its connection over: the stream writes through
// the ResponseWriter. It returns the client that trusts the server and the
// server's base URL.
func (f *fixture) http2Events(t *testing.T) (*http.Client, string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc(EventsPath, f.gw.ServeEvents)
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Client(), srv.URL
}

// TestEventsOverHTTP2StreamThroughTheResponseWriter: HTTP/2 cannot hand
// its connection over, so the stream writes through the ResponseWriter;
// it streams, resumes and ends alike.
func TestEventsOverHTTP2StreamThroughTheResponseWriter(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	f.start(ctx, func(c *Config) { c.SSEHeartbeat = 20 * time.Millisecond }, nil)
	hc, base := f.http2Events(t)
	conv, id := aliceConv(t)
	tok := token(t, auth.DefaultTenant, "alice")
	u := base + "/v1/conversations/" + conv + "/events"

	s, err := openSSEWith(ctx, t, hc, u, tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.resp.ProtoMajor != 2 || s.resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %d, want HTTP/2 200", s.resp.Proto, s.resp.StatusCode)
	}
	s.expect("subscribed")
	f.produce(ctx, id, "r", 1, 5)
	got := s.events(5)
	checkSeqs(t, got, "r", 1, 5)
	s.heartbeat()
	f.produce(ctx, id, "r", 6, 8)
	again, err := openSSEWith(ctx, t, hc, u, tok, http.Header{"Last-Event-Id": {got[2].Cursor}})
	if err != nil {
		t.Fatal(err)
	}
	again.expect("subscribed")
	checkSeqs(t, again.events(5), "r", 4, 8)
	checkSeqs(t, s.events(3), "r", 6, 8)
	f.stop()
	s.ended()
	again.ended()
}

// TestEventStreamsCountAgainstTheUsersConnectAndSubscribeRates: a stream is
// one connect and one subscribe, shared with the user's WebSockets.
func TestEventStreamsCountAgainstTheUsersConnectAndSubscribeRates(t *testing.T) {
	t.Parallel()
	// badStatus: a bad request of that user then, in docs/api.md's order
	// ("Refusals before the stream"): past the connect rate it is still
	// 429, past the subscribe rate it is 400 (the request is checked before
	// the subscribe rate). rejected counts the rate's refusals.
	tests := []struct {
		name      string
		mod       func(*Config)
		reason    string
		badStatus int
		rejected  float64
	}{
		{"Past the connect burst a stream is 429 connect_rate.", func(c *Config) { c.ConnectBurst, c.ConnectPerMinute = 2, 1 }, rejectConnectRate, 429, 2},
		{"Past the subscribe burst a stream is 429 subscribe_rate.", func(c *Config) { c.SubscribeBurst, c.SubscribePerMinute = 2, 1 }, rejectSubscribeRate, 400, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 30*time.Second)
			f := newFixture(t, ctx)
			f.start(ctx, tt.mod, nil)
			conv := testenv.Name(t, "c")
			alice := token(t, auth.DefaultTenant, "alice")
			ws := f.dial(ctx, alice) // a WebSocket connect and subscribe take from the same buckets
			ws.subscribed(ctx, conv+"-ws", "")
			mustOpenSSE(ctx, t, f.eventsURL(conv, nil), alice, nil).expect("subscribed")
			s, err := openSSE(ctx, t, f.eventsURL(conv, nil), alice, nil)
			if err != nil {
				t.Fatal(err)
			}
			if s.resp.StatusCode != http.StatusTooManyRequests || errorCode(t, s.resp) != "rate_limited" || s.resp.Header.Get("Retry-After") == "" {
				t.Fatalf("third within a burst of 2: %d, want 429 rate_limited with Retry-After", s.resp.StatusCode)
			}
			bad, err := openSSE(ctx, t, f.eventsURL(conv, url.Values{"since": {"yesterday"}}), alice, nil)
			if err != nil {
				t.Fatal(err)
			}
			if bad.resp.StatusCode != tt.badStatus {
				t.Errorf("a bad since past the rate: %d, want %d", bad.resp.StatusCode, tt.badStatus)
			}
			mustOpenSSE(ctx, t, f.eventsURL(conv, nil), token(t, auth.DefaultTenant, "bob"), nil).expect("subscribed") // another user
			if v := labelledValue(t, f.reg, "turnpike_pushgw_rejected_total", "reason", tt.reason); v != tt.rejected {
				t.Errorf("rejected_total{reason=%s} = %v, want %v", tt.reason, v, tt.rejected)
			}
		})
	}
}

// follow reads a frame's request_id straight from the frame when it begins
// as events.AppendEvent writes it, and decodes any other frame, so that
// both agree.
func TestFrameRequestIDReadsEveryFramesRequestID(t *testing.T) {
	t.Parallel()
	ev := &events.TokenEvent{Meta: events.Meta{Conversation: "c1", RequestID: "r0", RunID: "u", Seq: 1}, Delta: `"request_id":"no"`}
	for f, want := range map[string]string{
		string(eventFrame(events.MarshalEvent(ev), 0, 1)):                         "r0",
		`{"conversation":"c1","type":"token","request_id":"r2"}`:                  "r2",
		`{"type":"token","conversation":"c\"1","request_id":"r3"}`:                "r3",
		`{"type":"token","conversation":"c1","request_id":"r\u0034"}`:             "r4",
		`{"type":"token","conversation":"c1","run_id":"x","request_id":"r5"}`:     "r5",
		`{"type":"token","conversation":"c1","delta":"\",\"request_id\":\"no\""}`: "",
		`not JSON`: "",
	} {
		if got := string(frameRequestID([]byte(f))); got != want {
			t.Errorf("%s: request_id %q, want %q", f, got, want)
		}
	}
}

// An event's data is its frame on one line: a raw line break between a
// frame's JSON tokens (a value some other producer wrote) becomes a space.
func TestAnEventsDataIsItsFrameOnOneLine(t *testing.T) {
	t.Parallel()
	cursor := FormatCursor(1, 7)
	for value, data := range map[string]string{
		`{"type":"token","seq":1}`:             `{"type":"token","seq":1,"cursor":"` + cursor + `"}`,
		"{\"type\":\"token\",\r\n\"seq\":1\n}": "{\"type\":\"token\",  \"seq\":1 ,\"cursor\":\"" + cursor + "\"}",
		"{\"type\":\"token\",\r\"seq\":1}":     "{\"type\":\"token\", \"seq\":1,\"cursor\":\"" + cursor + "\"}",
	} {
		ev, last := sseEvent(eventFrame([]byte(value), 1, 7), "")
		want := "id: " + cursor + "\nevent: token\ndata: " + data + "\n\n"
		if string(ev) != want || last {
			t.Errorf("event of %q = %q (last %v), want %q", value, ev, last, want)
		}
	}
}

// docs/api.md "Shard hints": an event stream requested without a shard hint
// is answered 307 to the same URL (a query-only reference, every other
// parameter kept, ?access_token= too) with its conversation's shard as
// ?shard= (the home partition of the token's identity), not cached, and
// before the connect rate counts it. The redirect of a request that carries
// its token in the query is followed with no other credential and streams.
func TestAnEventStreamWithoutAShardHintIsRedirectedToTheSameURLWithIt(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	f.start(ctx, func(c *Config) { c.ConnectBurst, c.ConnectPerMinute = 1, 1 }, nil)
	_, alice := aliceConv(t)
	tok := token(t, auth.DefaultTenant, "alice")
	want := strconv.Itoa(partitionOf(alice))
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var location string
	for _, tt := range []struct {
		name   string
		q      url.Values
		bearer string
		wantQ  url.Values
	}{
		{"A request without a hint is redirected.", url.Values{"since": {"earliest"}}, tok,
			url.Values{"since": {"earliest"}, "shard": {want}}},
		{"A request with its token in the query is redirected with the token.", url.Values{"since": {"earliest"}, "access_token": {tok}}, "",
			url.Values{"since": {"earliest"}, "access_token": {tok}, "shard": {want}}},
	} {
		s, err := openSSEWith(ctx, t, noFollow, f.eventsURL(alice.Conversation, tt.q), tt.bearer, nil)
		if err != nil {
			t.Fatal(err)
		}
		loc := s.resp.Header.Get("Location")
		if s.resp.StatusCode != http.StatusTemporaryRedirect || s.resp.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("%s Got %d %v, want 307 with Cache-Control no-store", tt.name, s.resp.StatusCode, s.resp.Header)
		}
		if !strings.HasPrefix(loc, "?") {
			t.Fatalf("%s Location %q, want a query-only reference", tt.name, loc)
		}
		if got, err := url.ParseQuery(loc[1:]); err != nil || got.Encode() != tt.wantQ.Encode() {
			t.Fatalf("%s Location %q, want ?%s", tt.name, loc, tt.wantQ.Encode())
		}
		location = loc
	}
	// One connect a minute: none of the redirects took it. The last
	// Location, with the token in the query and no header, streams.
	base := f.eventsURL(alice.Conversation, nil)
	s := mustOpenSSEWith(ctx, t, noFollow, base+location, "", nil)
	if fr := s.expect("subscribed").fr; fr.Shard == nil || strconv.Itoa(*fr.Shard) != want {
		t.Fatalf("the subscribed event names shard %v, want %s", fr.Shard, want)
	}
	checkMetric(t, f.reg, "turnpike_pushgw_shard_redirects_total", 2)
}

// docs/api.md "Shard hints": a request that carries a shard hint is served,
// whatever its value (its own shard, another user's, one past the partition
// count, no number): a redirect happens at most once. The subscribed event
// names the conversation's own shard whatever the hint said.
func TestAnEventStreamWithAShardHintIsServedWhateverItsValue(t *testing.T) {
	t.Parallel()
	ctx, f := startedFixture(t)
	alice, bob := aliceAndBobApart(t)
	tok := token(t, auth.DefaultTenant, "alice")
	own := partitionOf(alice)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tt := range []struct{ name, hint string }{
		{"A hint naming its own shard is served.", strconv.Itoa(own)},
		{"A hint naming another user's shard is served.", strconv.Itoa(partitionOf(bob))},
		{"A hint past the partition count is served.", strconv.Itoa(testPartitions + 3)},
		{"A hint that is no number is served.", "x"},
	} {
		s, err := openSSEWith(ctx, t, noFollow, f.eventsURL(alice.Conversation, url.Values{"shard": {tt.hint}}), tok, nil)
		if err != nil {
			t.Fatal(err)
		}
		if s.resp.StatusCode != http.StatusOK {
			t.Fatalf("%s Got %d (Location %q), want 200", tt.name, s.resp.StatusCode, s.resp.Header.Get("Location"))
		}
		if fr := s.expect("subscribed").fr; fr.Shard == nil || *fr.Shard != own {
			t.Fatalf("%s The subscribed event names shard %v, want %d", tt.name, fr.Shard, own)
		}
		_ = s.resp.Body.Close()
	}
	checkMetric(t, f.reg, "turnpike_pushgw_shard_redirects_total", 0)
}

// alternatingEdge is an edge in front of several replicas that sends each
// request to the next one in turn, whatever its shard hint: the worst case
// of replicas that each compute another shard for the conversation.
type alternatingEdge struct {
	mu       sync.Mutex
	replicas []*url.URL
	n        int
}

func (e *alternatingEdge) RoundTrip(r *http.Request) (*http.Response, error) {
	e.mu.Lock()
	to := e.replicas[e.n%len(e.replicas)]
	e.n++
	e.mu.Unlock()
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host, r.Host = to.Scheme, to.Host, ""
	return http.DefaultTransport.RoundTrip(r)
}

// docs/api.md "Shard hints": replicas that disagree on the stream topic's
// partition count (while partitions are added, before each has read the
// new count) compute different shards for one conversation. An event
// stream sent from one to the other is redirected once, by the first, and
// served by the second with the first's hint; it is not sent back and forth.
func TestAnEventStreamIsRedirectedOnceWhenReplicasDisagreeOnThePartitionCount(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	f.start(ctx, nil, nil)
	// The other replica reads a topic of another partition count.
	const otherPartitions = testPartitions + 3
	wider := newFixtureOn(t, ctx, f.brokers)
	wider.topic = testenv.Name(t, "wider")
	if err := topic.Ensure(ctx, f.brokers, otherPartitions, wider.topic); err != nil {
		t.Fatal(err)
	}
	wider.start(ctx, nil, nil)
	var alice events.Identity
	for i := 0; ; i++ {
		alice = events.Identity{Tenant: auth.DefaultTenant, User: "alice", Conversation: fmt.Sprintf("%s-%d", testenv.Name(t, "c"), i)}
		if topic.Home([]byte(alice.Key()), otherPartitions) != partitionOf(alice) {
			break
		}
	}
	edge := &alternatingEdge{}
	for _, in := range []*instance{f.instance, wider.instance} {
		u, err := url.Parse(in.srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		edge.replicas = append(edge.replicas, u)
	}
	redirects := 0
	hc := &http.Client{Transport: edge, CheckRedirect: func(_ *http.Request, via []*http.Request) error {
		redirects = len(via)
		if len(via) > 3 {
			return fmt.Errorf("%d redirects", len(via))
		}
		return nil
	}}
	s, err := openSSEWith(ctx, t, hc, f.eventsURL(alice.Conversation, nil), token(t, auth.DefaultTenant, "alice"), nil)
	if err != nil {
		t.Fatalf("GET events through the edge: %v", err)
	}
	if s.resp.StatusCode != http.StatusOK || redirects != 1 {
		t.Fatalf("Got %d after %d redirects, want 200 after 1", s.resp.StatusCode, redirects)
	}
	if got, want := s.resp.Request.URL.Query().Get("shard"), strconv.Itoa(partitionOf(alice)); got != want {
		t.Errorf("served with ?shard=%s, want the first replica's %s", got, want)
	}
	if fr := s.expect("subscribed").fr; fr.Shard == nil || *fr.Shard != topic.Home([]byte(alice.Key()), otherPartitions) {
		t.Errorf("the second replica's subscribed event names shard %v, want its own %d", fr.Shard, topic.Home([]byte(alice.Key()), otherPartitions))
	}
	checkMetric(t, f.reg, "turnpike_pushgw_shard_redirects_total", 1)
	checkMetric(t, wider.reg, "turnpike_pushgw_shard_redirects_total", 0)
}

// docs/api.md "Shard hints": the hint is never trusted. Alice's stream
// opened with bob's shard as hint, redirect followed, carries alice's
// events only, and bob's the same way.
func TestAShardHintNeverChoosesWhoseEventsAStreamCarries(t *testing.T) {
	t.Parallel()
	ctx, f := startedFixture(t)
	alice, bob := aliceAndBobApart(t)
	streams := map[string]*sseStream{}
	for _, tt := range []struct{ id, other events.Identity }{{alice, bob}, {bob, alice}} {
		q := url.Values{"shard": {strconv.Itoa(partitionOf(tt.other))}}
		streams[tt.id.User] = mustOpenSSE(ctx, t, f.eventsURL(tt.id.Conversation, q), token(t, auth.DefaultTenant, tt.id.User), nil).subscribed()
	}
	f.produce(ctx, bob, "bob", 1, 2)
	f.produce(ctx, alice, "alice", 1, 2)
	checkSeqs(t, streams["alice"].events(2), "alice", 1, 2)
	checkSeqs(t, streams["bob"].events(2), "bob", 1, 2)
}
