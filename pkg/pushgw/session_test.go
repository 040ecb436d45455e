package pushgw

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/auth"
)

// A frame popped while the session is open is the writer's to write; once
// the session is closing, it is released from the queue's bounds and
// counted as dropped, for either transport.
func TestAFramePoppedAfterTheSessionClosedIsReleasedAndCountedDropped(t *testing.T) {
	t.Parallel()
	v, err := auth.NewVerifier(testSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	gw, err := newGateway(Config{Brokers: []string{"127.0.0.1:1"}}, v, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var s session
	s.init(gw, nil, auth.Token{}, "default/alice", "test")
	pop := func() []byte {
		t.Helper()
		if !s.out.tryPush([]byte("frame")) {
			t.Fatal("push refused")
		}
		f, ok := s.out.pop()
		if !ok {
			t.Fatal("nothing to pop")
		}
		return f
	}

	f := pop()
	if s.dropIfClosed(f) {
		t.Fatal("an open session dropped its frame")
	}
	s.out.sent(len(f)) // written
	f = pop()
	s.fail(0, "gone")
	if !s.dropIfClosed(f) {
		t.Fatal("a closing session kept its frame")
	}
	if n, b := s.out.size(); n != 0 || b != 0 {
		t.Errorf("queue holds %d frames, %d bytes after the drop, want none", n, b)
	}
	checkMetric(t, reg, "turnpike_pushgw_frames_dropped_total", 1)
}

// A session tearing down counts the frames its queue still held as
// dropped (turnpike_pushgw_frames_dropped_total, docs/pushgw.md
// "Metrics"), and logs its end at info when it shed a slow consumer, at
// debug otherwise.
func TestATearDownCountsTheQueuedFramesDroppedAndLogsASlowConsumerAtInfo(t *testing.T) {
	t.Parallel()
	v, err := auth.NewVerifier(testSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		end     func(s *session)
		logged  bool
		dropped float64
	}{
		{"shed", func(s *session) { s.shed("too slow") }, true, 2},
		{"gone", func(s *session) { s.fail(websocket.CloseGoingAway, "bye") }, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			var logs syncBuffer
			gw, err := newGateway(Config{Brokers: []string{"127.0.0.1:1"}}, v, reg, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
			if err != nil {
				t.Fatal(err)
			}
			var s session
			s.init(gw, nil, auth.Token{}, "default/alice", "test")
			for range 2 {
				if !s.out.tryPush([]byte("frame")) {
					t.Fatal("push refused")
				}
			}
			tc.end(&s)
			s.endSubscriptions()
			s.logClosed()
			checkMetric(t, reg, "turnpike_pushgw_frames_dropped_total", tc.dropped)
			if got := strings.Contains(logs.String(), "client closed"); got != tc.logged {
				t.Errorf("logged at info: %v, want %v:\n%s", got, tc.logged, logs.String())
			}
		})
	}
}

// TestACursorIsValidUpToThePartitionsLastRecordAndRefusedAtOnceFromItsEndOffset
// pins the bounds of a cursor (docs/api.md "Frames" and "Refusals before
// the stream": a cursor past the end of its partition is invalid_argument,
// 400 over HTTP; DESIGN.md "Replicas": refused at once). A cursor names one
// record: the partition's last record is a valid position with nothing
// after it yet, and the subscription goes live. The end offset, the offset
// the next record will get, names no record, and no replica can have handed
// it out (a reader sees only offsets below it): it is past the end, as is
// every offset above it. The refusal does not wait for a live reader, on a
// replica that has dispatched the partition's last record and on one that
// has dispatched nothing: both wait an hour (CursorWait) for a cursor they
// have not reached, so only the end-offset check can answer in time.
func TestACursorIsValidUpToThePartitionsLastRecordAndRefusedAtOnceFromItsEndOffset(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	conv, id := aliceConv(t)
	p := partitionOf(id)
	tok := token(t, auth.DefaultTenant, "alice")
	hourWait := func(c *Config) { c.CursorWait = time.Hour }
	caughtUp := f.launch(ctx, hourWait, nil, nil)
	hook, release := holdBack(t)
	behind := f.launch(ctx, hourWait, nil, hook)              // dispatches nothing until release
	f.dialURL(ctx, behind.url, tok).subscribed(ctx, conv, "") // its reader opens before the records
	watcher := f.dialURL(ctx, caughtUp.url, tok).subscribed(ctx, conv, "")
	f.produce(ctx, id, "r", 1, 3)
	seen := watcher.events(ctx, 3) // caughtUp has dispatched the partition's last record
	_, last, err := ParseCursor(seen[2].Cursor)
	if err != nil {
		t.Fatal(err)
	}
	if end, err := caughtUp.gw.endOffset(ctx, p); err != nil || end != last+1 {
		t.Fatalf("end offset of partition %d = %d, %v; want %d, one past its last record", p, end, err, last+1)
	}

	refused := []struct {
		name   string
		cursor string
	}{
		{"The end offset, the next record's, names no record yet and is refused.", FormatCursor(p, last+1)},
		{"One past the end offset is refused.", FormatCursor(p, last+2)},
	}
	replicas := []struct {
		name string
		in   *instance
	}{
		{"a replica that has dispatched the last record", caughtUp},
		{"a replica that has dispatched nothing", behind},
	}
	for _, r := range replicas {
		ws := f.dialURL(ctx, r.in.url, tok)
		for _, tt := range refused {
			ws.subscribe(conv, tt.cursor)
			fr, err := ws.read(ctx)
			if err != nil {
				t.Fatalf("%s On %s, a WebSocket subscribe is not answered (%v): it waits for the live reader instead of being refused at once", tt.name, r.name, err)
			}
			if fr.Type != "error" || fr.Code != codeInvalidArgument || fr.Conversation != conv {
				t.Errorf("%s On %s, a WebSocket subscribe: %+v, want an invalid_argument error naming %s", tt.name, r.name, fr, conv)
			}
			for _, pos := range []struct {
				how string
				q   url.Values
				h   http.Header
			}{
				{"Last-Event-ID", nil, http.Header{"Last-Event-Id": {tt.cursor}}},
				{"?since=", url.Values{"since": {tt.cursor}}, nil},
			} {
				s, err := openSSE(ctx, t, r.in.eventsURL(conv, pos.q), tok, pos.h)
				if err != nil {
					t.Fatalf("%s On %s, an event stream from %s is not answered (%v): it waits for the live reader instead of being refused at once", tt.name, r.name, pos.how, err)
				}
				if s.resp.StatusCode != http.StatusBadRequest {
					t.Errorf("%s On %s, an event stream from %s: status %d, want 400", tt.name, r.name, pos.how, s.resp.StatusCode)
					continue
				}
				if code := errorCode(t, s.resp); code != codeInvalidArgument {
					t.Errorf("%s On %s, an event stream from %s: code %q, want invalid_argument", tt.name, r.name, pos.how, code)
				}
			}
		}
		ws.ping(ctx) // nothing else was queued
	}

	// The last record is a valid cursor on both: nothing to replay, then
	// live. The replica that is behind waits for its live reader to reach it.
	lastCursor := FormatCursor(p, last)
	ws := []*wsClient{f.dialURL(ctx, caughtUp.url, tok).subscribed(ctx, conv, lastCursor)}
	waiting := f.dialURL(ctx, behind.url, tok)
	waiting.subscribe(conv, lastCursor)
	awaitCursorWaiter(t, ctx, behind, p)
	release()
	waiting.expect(ctx, "subscribed")
	ws = append(ws, waiting)
	lei := mustOpenSSE(ctx, t, caughtUp.eventsURL(conv, nil), tok, http.Header{"Last-Event-Id": {lastCursor}}).subscribed()
	since := mustOpenSSE(ctx, t, caughtUp.eventsURL(conv, url.Values{"since": {lastCursor}}), tok, nil).subscribed()
	f.produce(ctx, id, "r", 4, 4)
	for _, c := range ws {
		checkSeqs(t, c.events(ctx, 1), "r", 4, 4) // not seq 3 again
	}
	checkSeqs(t, lei.events(1), "r", 4, 4)
	checkSeqs(t, since.events(1), "r", 4, 4)
}

// TestACursorOfAnotherPartitionIsRefusedEvenWhereItNamesARecord: a cursor
// of another partition than the conversation's is refused (docs/api.md
// "Cursors": invalid_argument, over HTTP 400), even when it names a record
// the gateway has dispatched and its offset lies within the conversation's
// own partition, where it would otherwise pass for a position.
func TestACursorOfAnotherPartitionIsRefusedEvenWhereItNamesARecord(t *testing.T) {
	t.Parallel()
	ctx, f := startedFixture(t)
	conv, id := aliceConv(t)
	tok := token(t, auth.DefaultTenant, "alice")
	other := id
	for i := 0; partitionOf(other) == partitionOf(id); i++ {
		other.Conversation = fmt.Sprintf("%s-%d", conv, i)
	}
	mine := f.dial(ctx, tok).subscribed(ctx, conv, "")
	theirs := f.dial(ctx, tok).subscribed(ctx, other.Conversation, "")
	f.produce(ctx, id, "r", 1, 3)
	f.produce(ctx, other, "o", 1, 3)
	mine.events(ctx, 3)
	foreign := theirs.events(ctx, 3)[1].Cursor // dispatched, in a partition with records at offsets 0..2, as the conversation's has
	if p, _, err := ParseCursor(foreign); err != nil || p == partitionOf(id) {
		t.Fatalf("cursor %s (%v) is not of another partition", foreign, err)
	}

	ws := f.dial(ctx, tok)
	ws.subscribe(conv, foreign)
	if fr := ws.expect(ctx, "error"); fr.Code != codeInvalidArgument || fr.Conversation != conv {
		t.Errorf("A WebSocket subscribe from another partition's cursor: %+v, want an invalid_argument error naming %s", fr, conv)
	}
	ws.ping(ctx)
	for _, tt := range []struct {
		name string
		q    url.Values
		h    http.Header
	}{
		{"An event stream with another partition's Last-Event-ID is 400.", nil, http.Header{"Last-Event-Id": {foreign}}},
		{"An event stream since another partition's cursor is 400.", url.Values{"since": {foreign}}, nil},
	} {
		s, err := openSSE(ctx, t, f.eventsURL(conv, tt.q), tok, tt.h)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if s.resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d", tt.name, s.resp.StatusCode)
			continue
		}
		if code := errorCode(t, s.resp); code != codeInvalidArgument {
			t.Errorf("%s: code %q", tt.name, code)
		}
	}
}

// TestAnUnsubscribeDuringAReplayIsAnsweredByNoFrame: an unsubscribe is
// answered by no frame (docs/api.md "Frames"), also when it ends a replay
// in progress: the replay it stops is no failure to report. Here the
// replay waits for the only replay slot, which another connection's
// replay holds: that connection reads nothing, so its replay waits for
// room in its queue for good.
func TestAnUnsubscribeDuringAReplayIsAnsweredByNoFrame(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	// No ring: every replay reads Kafka, one at a time; writes never time out.
	f.start(ctx, func(c *Config) { c.RingBytes, c.ReplayConcurrency, c.QueueSize, c.WriteTimeout = 1, 1, 16, time.Hour },
		func(l net.Listener) net.Listener { return smallBuffers{l} })
	conv, id := aliceConv(t)
	tok := token(t, auth.DefaultTenant, "alice")
	f.produceLarge(ctx, id, 1, 200) // far more than a queue and socket buffers hold

	d := websocket.Dialer{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4 << 10)
		}
		return c, err
	}}
	conn, _, err := d.DialContext(ctx, f.url, http.Header{"Authorization": {"Bearer " + tok}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stuck := &wsClient{t: t, conn: conn}
	stuck.subscribe(conv, "earliest") // and never reads
	testenv.Eventually(t, ctx, "a replay holds the only replay slot", func() bool { return len(f.gw.replaySlots) == 1 })

	c := f.dial(ctx, tok)
	first := FormatCursor(partitionOf(id), 0)
	c.subscribed(ctx, conv, first) // its replay now waits for the slot
	c.send(`{"op":"unsubscribe","conversation":"` + conv + `"}`)
	c.ping(ctx) // the next frame is the pong: nothing answered the unsubscribe
	c.subscribed(ctx, conv, "")
	c.ping(ctx)
	// Only the stuck replay ever had the slot: the unsubscribe ended the
	// other while it waited for it.
	checkMetric(t, f.reg, "turnpike_pushgw_replays_total", 1)
}
