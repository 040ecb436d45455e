package pushgw

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

const (
	testSecret     = "pushgw-test-secret-0123456789abcdef"
	testPartitions = 4
)

// fixture is a stream topic on a test broker, a producer, and (after start)
// a running gateway behind an httptest server. More gateways on the same
// topic (replicas) come from launch.
type fixture struct {
	t       testing.TB
	brokers []string
	topic   string
	writer  *kafka.Writer
	// launchLogged, if set, is the logger of the gateways launched next.
	launchLogged *slog.Logger
	// dialKafka, if set, opens the live readers' broker connections of the
	// gateways launched next.
	dialKafka topic.DialFunc
	// clock, if set, is the clock tokens expire on in the gateways
	// launched next (WithClock); else the system clock.
	clock Clock

	*instance // the gateway of start
}

// instance is one running gateway.
type instance struct {
	gw     *gateway
	reg    *prometheus.Registry
	srv    *httptest.Server
	url    string
	stop   context.CancelFunc
	runErr chan error
}

func newFixture(t testing.TB, ctx context.Context) *fixture {
	t.Helper()
	return newFixtureOn(t, ctx, testenv.Kafka(t))
}

// startedFixture is a fixture whose gateway runs on the default
// configuration, and the test's context (30 s).
func startedFixture(t *testing.T) (context.Context, *fixture) {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	f.start(ctx, nil, nil)
	return ctx, f
}

// newFixtureOn is newFixture on the given brokers.
func newFixtureOn(t testing.TB, ctx context.Context, brokers []string) *fixture {
	t.Helper()
	f := &fixture{t: t, brokers: brokers, topic: testenv.Name(t, "stream")}
	if err := topic.Ensure(ctx, f.brokers, testPartitions, f.topic); err != nil {
		t.Fatalf("ensure topic: %v", err)
	}
	f.writer = testenv.Producer(t, f.brokers, f.topic)
	return f
}

// start runs the fixture's gateway on its topic; mod adjusts its config and
// wrap (optional) the httptest listener.
func (f *fixture) start(ctx context.Context, mod func(*Config), wrap func(net.Listener) net.Listener) {
	f.t.Helper()
	f.instance = f.launch(ctx, mod, wrap, nil)
}

// launch runs a gateway on the fixture's topic and waits until it is ready.
// hook, if set, runs before each live record is dispatched.
func (f *fixture) launch(ctx context.Context, mod func(*Config), wrap func(net.Listener) net.Listener, hook func(partition int, offset int64)) *instance {
	t := f.t
	t.Helper()
	cfg := Config{Brokers: f.brokers, Topic: f.topic}
	if mod != nil {
		mod(&cfg)
	}
	clock := f.clock
	if clock == nil {
		clock = systemClock{}
	}
	v, err := auth.NewVerifier(testSecret, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{reg: prometheus.NewRegistry()}
	level := slog.LevelWarn
	if testing.Verbose() {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if f.launchLogged != nil {
		log = f.launchLogged
	}
	in.gw, err = newGateway(cfg, v, in.reg, log)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	in.gw.clock = clock
	in.gw.beforeDispatch = hook
	in.gw.dialKafka = f.dialKafka
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	in.stop = stop
	in.runErr = make(chan error, 1)
	go func() { in.runErr <- in.gw.Run(runCtx) }()
	mux := http.NewServeMux()
	mux.Handle("/v1/stream", in.gw)
	mux.HandleFunc(EventsPath, in.gw.ServeEvents)
	in.srv = httptest.NewUnstartedServer(mux)
	if wrap != nil {
		in.srv.Listener = wrap(in.srv.Listener)
	}
	in.srv.Start()
	in.url = "ws" + strings.TrimPrefix(in.srv.URL, "http") + "/v1/stream"
	t.Cleanup(func() {
		in.stop()
		select {
		case err := <-in.runErr:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return within 30s of its context ending")
		}
		in.srv.Close()
	})
	for {
		if err := in.gw.Ready(ctx); err == nil {
			return in
		}
		select {
		case <-ctx.Done():
			t.Fatalf("gateway not ready: %v", ctx.Err())
		case err := <-in.runErr:
			in.runErr <- err
			t.Fatalf("Run returned early: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func token(t testing.TB, tenant, user string) string {
	t.Helper()
	tok, err := auth.Mint(testSecret, tenant, user, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// aliceConv is a fresh conversation and alice's identity in it (default
// tenant).
func aliceConv(t testing.TB) (string, events.Identity) {
	conv := testenv.Name(t, "c")
	return conv, events.Identity{Tenant: auth.DefaultTenant, User: "alice", Conversation: conv}
}

// event is a token event of a test run: request req, seq n.
func event(conv, req string, n int) []byte {
	return events.MarshalEvent(&events.TokenEvent{
		Meta:  events.Meta{Conversation: conv, RequestID: req, RunID: req + "-run", Seq: int64(n), TS: time.Now().UnixNano()},
		Delta: fmt.Sprintf("w%d ", n), Agent: "echo", Role: "assistant",
	})
}

// produce writes events seq from..to of id (request id req) in order.
func (f *fixture) produce(ctx context.Context, id events.Identity, req string, from, to int) {
	f.t.Helper()
	var msgs []kafka.Message
	for n := from; n <= to; n++ {
		msgs = append(msgs, kafka.Message{Key: []byte(id.Key()), Value: event(id.Conversation, req, n)})
	}
	if err := f.writer.WriteMessages(ctx, msgs...); err != nil {
		f.t.Errorf("produce: %v", err)
	}
}

// produceLarge writes events seq from..to of id (request r), of ~2 KiB
// each, one produce call each.
func (f *fixture) produceLarge(ctx context.Context, id events.Identity, from, to int) {
	for n := from; n <= to; n++ {
		v := events.MarshalEvent(&events.TokenEvent{Meta: events.Meta{Conversation: id.Conversation, RequestID: "r", RunID: "u", Seq: int64(n), TS: 1},
			Delta: strings.Repeat("x", 2<<10), Agent: "echo", Role: "assistant"})
		if err := f.writer.WriteMessages(ctx, kafka.Message{Key: []byte(id.Key()), Value: v}); err != nil {
			f.t.Errorf("produce: %v", err)
			return
		}
	}
}

// complete writes the run.completed (status complete) of request req of id,
// seq seq.
func (f *fixture) complete(ctx context.Context, id events.Identity, req string, seq int) {
	e := &events.RunCompletedEvent{Meta: events.Meta{Conversation: id.Conversation, RequestID: req, RunID: req + "-run", Seq: int64(seq), TS: 1}, Status: events.StatusComplete}
	if err := f.writer.WriteMessages(ctx, kafka.Message{Key: []byte(id.Key()), Value: events.MarshalEvent(e)}); err != nil {
		f.t.Errorf("produce: %v", err)
	}
}

// partitionOf is the partition the producer writes id to.
func partitionOf(id events.Identity) int {
	ids := make([]int, testPartitions)
	for i := range ids {
		ids[i] = i
	}
	return kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: []byte(id.Key())}, ids...)
}

// wsClient is a test WebSocket client.
type wsClient struct {
	t    testing.TB
	conn *websocket.Conn
}

// frame is any server frame.
type frame struct {
	Type         string `json:"type"`
	Code         string `json:"code"`
	Message      string `json:"message"`
	Conversation string `json:"conversation"`
	RequestID    string `json:"request_id"`
	RunID        string `json:"run_id"`
	Seq          int    `json:"seq"`
	Cursor       string `json:"cursor"`
	Shard        *int   `json:"shard"`
}

func (f *fixture) dial(ctx context.Context, tok string) *wsClient {
	f.t.Helper()
	return f.dialURL(ctx, f.url, tok)
}

// dialURL connects to the gateway at url (for replicas).
func (f *fixture) dialURL(ctx context.Context, url, tok string) *wsClient {
	f.t.Helper()
	conn, resp, err := websocket.DefaultDialer.DialContext(ctx, url, http.Header{"Authorization": {"Bearer " + tok}})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		f.t.Fatalf("dial: %v (HTTP %d)", err, status)
	}
	f.t.Cleanup(func() { _ = conn.Close() })
	return &wsClient{t: f.t, conn: conn}
}

func (c *wsClient) send(s string) {
	c.t.Helper()
	_ = c.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := c.conn.WriteMessage(websocket.TextMessage, []byte(s)); err != nil {
		c.t.Fatalf("send %s: %v", s, err)
	}
}

func (c *wsClient) subscribe(conv, since string) {
	c.t.Helper()
	if since == "" {
		c.send(fmt.Sprintf(`{"op":"subscribe","conversation":%q}`, conv))
		return
	}
	c.send(fmt.Sprintf(`{"op":"subscribe","conversation":%q,"since":%q}`, conv, since))
}

// subscribed subscribes c to conv from since and expects the subscribed
// frame; it returns c.
func (c *wsClient) subscribed(ctx context.Context, conv, since string) *wsClient {
	c.t.Helper()
	c.subscribe(conv, since)
	c.expect(ctx, "subscribed")
	return c
}

// ping sends a ping and expects the pong.
func (c *wsClient) ping(ctx context.Context) {
	c.t.Helper()
	c.send(`{"op":"ping"}`)
	c.expect(ctx, "pong")
}

// read returns the next frame or the read error. Event frames must decode
// strictly, cursor included.
func (c *wsClient) read(ctx context.Context) (frame, error) {
	c.t.Helper()
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(20 * time.Second)
	}
	_ = c.conn.SetReadDeadline(dl)
	typ, data, err := c.conn.ReadMessage()
	if err != nil {
		return frame{}, err
	}
	if typ != websocket.TextMessage {
		c.t.Errorf("got a frame of type %d, want text", typ)
	}
	var fr frame
	if err := json.Unmarshal(data, &fr); err != nil {
		c.t.Fatalf("frame %q is not JSON: %v", data, err)
	}
	if fr.Cursor != "" || fr.Seq != 0 {
		if _, err := events.DecodeEvent(data); err != nil {
			c.t.Errorf("event frame %s does not decode: %v", data, err)
		}
		if _, _, err := ParseCursor(fr.Cursor); err != nil {
			c.t.Errorf("event frame %s: %v", data, err)
		}
	}
	return fr, nil
}

func (c *wsClient) next(ctx context.Context) frame {
	c.t.Helper()
	fr, err := c.read(ctx)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return fr
}

func (c *wsClient) expect(ctx context.Context, typ string) frame {
	c.t.Helper()
	fr := c.next(ctx)
	if fr.Type != typ {
		c.t.Fatalf("got frame %+v, want type %q", fr, typ)
	}
	return fr
}

// events reads n event frames.
func (c *wsClient) events(ctx context.Context, n int) []frame {
	c.t.Helper()
	out := make([]frame, 0, n)
	for len(out) < n {
		fr := c.next(ctx)
		if fr.Cursor == "" {
			c.t.Fatalf("got frame %+v, want an event (after %d of %d)", fr, len(out), n)
		}
		out = append(out, fr)
	}
	return out
}

// closeCode reads until the connection closes and returns its close code.
func (c *wsClient) closeCode(ctx context.Context) int {
	c.t.Helper()
	for {
		_, err := c.read(ctx)
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code
		}
		c.t.Fatalf("read ended with %v, want a close frame", err)
	}
}

// checkMetric fails t (and goes on) unless the gauge or counter name of
// reg has the value want.
func checkMetric(t *testing.T, reg *prometheus.Registry, name string, want float64) {
	t.Helper()
	if v := testenv.MetricValue(t, reg, name); v != want {
		t.Errorf("%s = %v, want %v", name, v, want)
	}
}

// checkSeqs fails unless frames are events of req with seqs from..to in order.
func checkSeqs(t *testing.T, frames []frame, req string, from, to int) {
	t.Helper()
	if len(frames) != to-from+1 {
		t.Fatalf("got %d events, want %d (seq %d..%d)", len(frames), to-from+1, from, to)
	}
	for i, fr := range frames {
		if fr.RequestID != req || fr.Seq != from+i {
			t.Fatalf("event %d = %s seq %d, want %s seq %d", i, fr.RequestID, fr.Seq, req, from+i)
		}
	}
}

func TestLiveSubscriptionReceivesLaterEventsInOrderWithCursors(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	conv, id := aliceConv(t)
	f.produce(ctx, id, "old", 1, 3) // before the gateway starts: never delivered live
	f.start(ctx, nil, nil)

	c := f.dial(ctx, token(t, auth.DefaultTenant, "alice"))
	c.subscribe(conv, "")
	if fr := c.expect(ctx, "subscribed"); fr.Conversation != conv {
		t.Fatalf("subscribed to %q, want %q", fr.Conversation, conv)
	}
	f.produce(ctx, id, "new", 1, 10)
	bad := []kafka.Message{
		{Key: []byte(id.Key()), Value: []byte("not json")},
		{Key: []byte(id.Key()), Value: []byte("{}")},
		{Key: []byte("not-a-key"), Value: event(conv, "new", 99)},
	}
	if err := f.writer.WriteMessages(ctx, bad...); err != nil {
		t.Fatal(err)
	}
	f.produce(ctx, id, "new", 11, 20)
	got := c.events(ctx, 20)
	checkSeqs(t, got, "new", 1, 20)
	if n := testenv.MetricValue(t, f.reg, "turnpike_pushgw_bad_records_total"); n < 2 {
		t.Errorf("bad_records_total = %v, want at least the 2 bad records of this partition", n)
	}
	wantPartition := partitionOf(id)
	prev := int64(-1)
	for _, fr := range got {
		p, o, err := ParseCursor(fr.Cursor)
		if err != nil || p != wantPartition || o <= prev {
			t.Fatalf("cursor %q: partition %d offset %d (%v); want partition %d, offset above %d", fr.Cursor, p, o, err, wantPartition, prev)
		}
		prev = o
	}
	if n := testenv.MetricValue(t, f.reg, "turnpike_pushgw_events_out_total"); n < 20 {
		t.Errorf("events_out_total = %v, want >= 20", n)
	}
	checkMetric(t, f.reg, "turnpike_pushgw_subscriptions", 1)
	for _, h := range []string{"turnpike_pushgw_fanout_seconds", "turnpike_pushgw_delivery_lag_seconds"} {
		if n := histogramCount(t, f.reg, h); n != 20 {
			t.Errorf("%s counts %d records, want the 20 delivered", h, n)
		}
	}
	// The writer answers a subscribe after every frame queued before it,
	// and times each live frame once it is on the socket: by the answer,
	// the 20 events are timed, and only they (not the subscribed frames).
	c.subscribe(conv+"-other", "")
	c.expect(ctx, "subscribed")
	if n := histogramCountOf(t, f.reg, "turnpike_pushgw_client_write_lag_seconds", transportWebSocket); n != 20 {
		t.Errorf("client_write_lag_seconds{transport=websocket} counts %d frames, want the 20 events written", n)
	}
}

// histogramCountOf is the sample count of the series of the histogram name
// whose one label has the value label.
func histogramCountOf(t *testing.T, reg *prometheus.Registry, name, label string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	t.Fatalf("histogram %s{%s} not registered", name, label)
	return 0
}

// awaitHistogramCount waits until the series label of the histogram name
// counts want samples, and fails t if it counts more or ctx ends first.
func awaitHistogramCount(t *testing.T, ctx context.Context, reg *prometheus.Registry, name, label string, want uint64) {
	t.Helper()
	for {
		n := histogramCountOf(t, reg, name, label)
		if n == want {
			return
		}
		if n > want {
			t.Fatalf("%s{%s} counts %d samples, want %d", name, label, n, want)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s{%s} counts %d samples, want %d", name, label, n, want)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("histogram %s not registered", name)
	return 0
}

func TestSinceEarliestReplaysRetainedEventsThenGoesLive(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	conv, id := aliceConv(t)
	other := events.Identity{Tenant: auth.DefaultTenant, User: "alice", Conversation: conv + "-other"}
	f.produce(ctx, id, "r1", 1, 10)
	f.produce(ctx, other, "x", 1, 5)
	f.start(ctx, nil, nil)
	f.produce(ctx, id, "r1", 11, 15) // after start, before subscribing: live or replayed, never both

	c := f.dial(ctx, token(t, auth.DefaultTenant, "alice")).subscribed(ctx, conv, "earliest")
	checkSeqs(t, c.events(ctx, 15), "r1", 1, 15)
	f.produce(ctx, id, "r1", 16, 25)
	checkSeqs(t, c.events(ctx, 10), "r1", 16, 25)
	checkMetric(t, f.reg, "turnpike_pushgw_replays_total", 1)
}

// TestSinceCursorHandsOverWithoutGapOrDuplicate resumes from random cursors
// while a producer keeps writing, so replays overlap live traffic.
func TestSinceCursorHandsOverWithoutGapOrDuplicate(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 50*time.Second)
	f := newFixture(t, ctx)
	conv, id := aliceConv(t)
	noise := events.Identity{Tenant: auth.DefaultTenant, User: "bob", Conversation: conv}
	const before, total, cuts = 50, 250, 6
	f.produce(ctx, id, "r", 1, before)
	f.produce(ctx, noise, "noise", 1, before)
	f.start(ctx, func(c *Config) { c.ReplayConcurrency = 2 }, nil)
	tok := token(t, auth.DefaultTenant, "alice")

	// The watcher sees every event and publishes its cursor.
	var mu sync.Mutex
	cursors := []string{""} // cursors[seq]
	seen := make(chan struct{}, 1)
	watcher := f.dial(ctx, tok).subscribed(ctx, conv, "earliest")
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 1; n <= total; n++ {
			fr, err := watcher.read(ctx)
			if err != nil || fr.Seq != n {
				t.Errorf("watcher: frame %+v, %v; want seq %d", fr, err, n)
				return
			}
			mu.Lock()
			cursors = append(cursors, fr.Cursor)
			mu.Unlock()
			select {
			case seen <- struct{}{}:
			default:
			}
		}
	})
	wg.Go(func() {
		for n := before + 1; n <= total; n++ {
			f.produce(ctx, id, "r", n, n)
			if n%3 == 0 {
				f.produce(ctx, noise, "noise", n, n)
			}
		}
	})
	for i := range cuts {
		select {
		case <-seen:
		case <-ctx.Done():
			t.Fatalf("the watcher stopped seeing events: %v", ctx.Err())
		}
		time.Sleep(time.Duration(i*7%23) * time.Millisecond)
		mu.Lock()
		k := len(cursors) - 1 // the newest cursor: the replay range is empty or tiny
		if i%2 == 0 {
			k = 1 + int(time.Now().UnixNano()%int64(k)) // a random earlier one
		}
		cursor := cursors[k]
		mu.Unlock()
		wg.Go(func() {
			c := f.dial(ctx, tok)
			c.subscribe(conv, cursor)
			if fr, err := c.read(ctx); err != nil || fr.Type != "subscribed" {
				t.Errorf("cut %d: frame %+v, %v; want subscribed", k, fr, err)
				return
			}
			for want := k + 1; want <= total; want++ {
				fr, err := c.read(ctx)
				if err != nil || fr.RequestID != "r" || fr.Seq != want {
					t.Errorf("resumed after seq %d: got %+v, %v; want seq %d", k, fr, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestIdentitiesAreIsolated(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	// A conversation name whose alice and bob keys share a partition, so
	// bob's cursors are valid positions for alice's conversation too.
	base := testenv.Name(t, "c")
	var conv string
	for i := 0; ; i++ {
		conv = fmt.Sprintf("%s-%d", base, i)
		if partitionOf(events.Identity{Tenant: "t1", User: "alice", Conversation: conv}) ==
			partitionOf(events.Identity{Tenant: "t1", User: "bob", Conversation: conv}) {
			break
		}
	}
	alice := events.Identity{Tenant: "t1", User: "alice", Conversation: conv}
	bob := events.Identity{Tenant: "t1", User: "bob", Conversation: conv}
	otherTenant := events.Identity{Tenant: "t2", User: "alice", Conversation: conv}
	f.start(ctx, nil, nil)
	f.produce(ctx, bob, "bob", 1, 5)
	f.produce(ctx, otherTenant, "t2", 1, 5)
	f.produce(ctx, alice, "alice", 1, 5)

	bc := f.dial(ctx, token(t, "t1", "bob")).subscribed(ctx, conv, "earliest")
	bobEvents := bc.events(ctx, 5)
	checkSeqs(t, bobEvents, "bob", 1, 5)

	ac := f.dial(ctx, token(t, "t1", "alice"))
	for _, bad := range []string{"t1/bob/" + conv, "../bob", "bob/" + conv} {
		ac.subscribe(bad, "")
		if fr := ac.expect(ctx, "error"); fr.Code != "invalid_argument" {
			t.Fatalf("subscribing to %q: code %q, want invalid_argument", bad, fr.Code)
		}
	}
	ac.subscribed(ctx, conv, "earliest")
	checkSeqs(t, ac.events(ctx, 5), "alice", 1, 5)

	// Alice resumes from bob's first cursor: a valid position, but only her
	// own records after it come back.
	ac2 := f.dial(ctx, token(t, "t1", "alice")).subscribed(ctx, conv, bobEvents[0].Cursor)

	f.produce(ctx, bob, "bob", 6, 10)
	f.produce(ctx, otherTenant, "t2", 6, 10)
	f.produce(ctx, alice, "alice", 6, 10)
	checkSeqs(t, ac.events(ctx, 5), "alice", 6, 10)
	checkSeqs(t, ac2.events(ctx, 10), "alice", 1, 10)
	checkSeqs(t, bc.events(ctx, 5), "bob", 6, 10)
	// Nothing else arrives: a ping is answered next.
	for _, c := range []*wsClient{ac, ac2} {
		c.ping(ctx)
	}
}

func TestBadFramesGetAnErrorFrameAndTheConnectionStaysOpen(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	f.start(ctx, func(c *Config) { c.MaxSubscriptions = 2 }, nil)
	conv, id := aliceConv(t)
	p := partitionOf(id)
	c := f.dial(ctx, token(t, auth.DefaultTenant, "alice"))

	// named: the conversation the error frame names (docs/api.md "Frames"):
	// that of a well-formed subscribe or unsubscribe, none otherwise.
	tests := []struct {
		name  string
		frame string
		code  string
		named string
	}{
		{"Invalid JSON is refused.", `{"op":`, "invalid_argument", ""},
		{"A JSON array is refused.", `["ping"]`, "invalid_argument", ""},
		{"An unknown op is refused.", `{"op":"teleport","conversation":"` + conv + `"}`, "invalid_argument", ""},
		{"An unknown field is refused.", `{"op":"ping","please":"yes"}`, "invalid_argument", ""},
		{"An unknown field of a subscribe is refused.", `{"op":"subscribe","conversation":"` + conv + `","please":"yes"}`, "invalid_argument", ""},
		{"A conversation breaking the ID rule is refused.", `{"op":"subscribe","conversation":"a b"}`, "invalid_argument", ""},
		{"A conversation of another user is refused.", `{"op":"subscribe","conversation":"default/bob/c"}`, "invalid_argument", ""},
		{"A malformed cursor is refused.", `{"op":"subscribe","conversation":"` + conv + `","since":"yesterday"}`, "invalid_argument", conv},
		{"A cursor of another partition is refused.",
			`{"op":"subscribe","conversation":"` + conv + `","since":"` + FormatCursor((p+1)%testPartitions, 0) + `"}`, "invalid_argument", conv},
		{"A cursor beyond the live position is refused.",
			`{"op":"subscribe","conversation":"` + conv + `","since":"` + FormatCursor(p, 1000) + `"}`, "invalid_argument", conv},
		{"Unsubscribing from a conversation not subscribed is refused.", `{"op":"unsubscribe","conversation":"` + conv + `"}`, "invalid_argument", conv},
	}
	for _, tt := range tests {
		c.send(tt.frame)
		fr := c.expect(ctx, "error")
		if fr.Code != tt.code || fr.Message == "" || fr.Conversation != tt.named {
			t.Errorf("%s: got %+v, want code %s with a message, naming conversation %q", tt.name, fr, tt.code, tt.named)
		}
		c.ping(ctx)
	}

	if err := c.conn.WriteMessage(websocket.BinaryMessage, []byte(`{"op":"ping"}`)); err != nil {
		t.Fatal(err)
	}
	if fr := c.expect(ctx, "error"); fr.Code != "invalid_argument" {
		t.Errorf("binary frame: got %+v", fr)
	}
	// Exactly 64 KiB is a frame like any other (here invalid JSON).
	c.send(strings.Repeat(" ", MaxFrameBytes))
	c.expect(ctx, "error")
	c.ping(ctx)

	c.subscribed(ctx, conv, "")
	c.subscribe(conv, "")
	if fr := c.expect(ctx, "error"); !strings.Contains(fr.Message, "already subscribed") {
		t.Errorf("a second subscription to one conversation: got %+v", fr)
	}
	c.subscribed(ctx, conv+"-2", "earliest")
	c.subscribe(conv+"-3", "")
	if fr := c.expect(ctx, "error"); !strings.Contains(fr.Message, "too many") {
		t.Errorf("a third subscription with MaxSubscriptions 2: got %+v", fr)
	}
	c.send(`{"op":"unsubscribe","conversation":"` + conv + `"}`)
	c.subscribed(ctx, conv+"-3", "")
	c.ping(ctx)
}

func TestUpgradeNeedsAValidToken(t *testing.T) {
	t.Parallel()
	ctx, f := startedFixture(t)
	good := token(t, auth.DefaultTenant, "alice")
	forged, err := auth.Mint(strings.Repeat("x", 40), auth.DefaultTenant, "alice", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	expired, err := auth.Mint(testSecret, auth.DefaultTenant, "alice", time.Minute, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// Claims are read exactly on the upgrade too: an upper-case SUB names
	// no user, and a token with one is refused though its signature holds.
	signing := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256"}`)) + "." +
		base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"SUB":"mallory","exp":%d}`, time.Now().Add(time.Hour).Unix()))
	mac := hmac.New(sha256.New, []byte(testSecret))
	mac.Write([]byte(signing))
	upperSub := signing + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
	tests := []struct {
		name   string
		header http.Header
		query  string
		ok     bool
	}{
		{"A valid bearer header upgrades.", http.Header{"Authorization": {"Bearer " + good}}, "", true},
		{"A token whose user is an upper-case SUB is refused.", http.Header{"Authorization": {"Bearer " + upperSub}}, "", false},
		{"A valid access_token query parameter upgrades.", nil, "?access_token=" + good, true},
		{"No token is refused.", nil, "", false},
		{"A token signed with another secret is refused.", http.Header{"Authorization": {"Bearer " + forged}}, "", false},
		{"An expired token is refused.", http.Header{"Authorization": {"Bearer " + expired}}, "", false},
		{"A non-bearer scheme is refused.", http.Header{"Authorization": {"Basic " + good}}, "", false},
		{"A garbage query token is refused.", nil, "?access_token=nope", false},
	}
	for _, tt := range tests {
		// Not parallel: the subtests share the parent's gateway and its
		// deadline, which would go on running while they waited for a
		// parallel slot after the parent returned.
		t.Run(tt.name, func(t *testing.T) {
			conn, resp, err := websocket.DefaultDialer.DialContext(ctx, f.url+tt.query, tt.header)
			if tt.ok {
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				defer conn.Close()
				c := &wsClient{t: t, conn: conn}
				c.ping(ctx)
				return
			}
			if err == nil {
				conn.Close()
				t.Fatal("upgraded without a valid token")
			}
			if resp == nil || resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("dial error %v, response %v; want HTTP 401", err, resp)
			}
			// docs/api.md "Authentication": a 401 carries a Bearer challenge.
			if got := resp.Header.Get("WWW-Authenticate"); got != "Bearer" {
				t.Errorf("401 with WWW-Authenticate %q, want the Bearer challenge", got)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("read the refusal's body: %v", err)
			}
			var e struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != "unauthenticated" {
				t.Fatalf("401 body %q, want the JSON error shape with code unauthenticated", body)
			}
		})
	}
}

func TestServeHTTPAnswers503BeforeRun(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 10*time.Second)
	v, err := auth.NewVerifier(testSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A burst of one connect a minute: alice's second upgrade is past her rate.
	gw, err := newGateway(Config{Brokers: []string{"127.0.0.1:1"}, ConnectBurst: 1, ConnectPerMinute: 1}, v, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Ready(ctx); err == nil {
		t.Error("Ready before Run = nil, want an error")
	}
	// In docs/api.md's order: 401, then 429, then 503.
	for _, tt := range []struct {
		name   string
		token  string
		status int
	}{
		{"A valid token is told to retry.", token(t, auth.DefaultTenant, "alice"), http.StatusServiceUnavailable},
		{"An invalid token is still refused.", "nope", http.StatusUnauthorized},
		{"A user past the connect rate is told so, not to retry at once.", token(t, auth.DefaultTenant, "alice"), http.StatusTooManyRequests},
	} {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/v1/stream", nil)
		req.Header.Set("Authorization", "Bearer "+tt.token)
		rec := httptest.NewRecorder()
		gw.ServeHTTP(rec, req)
		if rec.Code != tt.status {
			t.Errorf("%s: status %d, want %d", tt.name, rec.Code, tt.status)
		}
		if tt.status == http.StatusServiceUnavailable && (rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), `"unavailable"`)) {
			t.Errorf("%s: 503 without Retry-After or code unavailable: %v %s", tt.name, rec.Header(), rec.Body)
		}
	}
}

// TestAReplicaStaysUnreadyWhileALiveReadersFetchesFail: docs/pushgw.md
// "Replicas": a replica is unready while a live reader's fetches fail
// (here: the broker answers them with an error code), and ready again once
// they succeed; the reader resumes at its offset, so the record written
// meanwhile is delivered. (The reader counts as recovered when a fetch
// returns a record, so the test writes one.)
func TestAReplicaStaysUnreadyWhileALiveReadersFetchesFail(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	f := newFixtureOn(t, ctx, []string{k.Addr()})
	var logs syncBuffer
	f.launchLogged = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f.start(ctx, nil, nil)
	conv, id := aliceConv(t)
	p := partitionOf(id)
	c := f.dial(ctx, token(t, auth.DefaultTenant, "alice")).subscribed(ctx, conv, "")

	fault := k.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: f.topic, Partitions: []int32{int32(p)},
		Err: kerr.KafkaStorageError, Count: -1})
	// Logged once the reader is counted as failing.
	logs.await(ctx, t, fmt.Sprintf(`msg="live reader: fetch failed, retrying" partition=%d`, p))
	if err := f.gw.Ready(ctx); err == nil || !strings.Contains(err.Error(), "live readers failing") {
		t.Fatalf("Ready while partition %d's fetches fail = %v, want the failing live reader", p, err)
	}
	f.produce(ctx, id, "r", 1, 1) // written while the reader cannot fetch it
	if err := f.gw.Ready(ctx); err == nil {
		t.Fatal("Ready while the fetches still fail = nil")
	}

	fault.Remove()
	checkSeqs(t, c.events(ctx, 1), "r", 1, 1) // fetched: the reader is no longer failing
	if err := f.gw.Ready(ctx); err != nil {
		t.Fatalf("Ready once the fetches succeed again = %v, want nil", err)
	}
}

func TestAFrameOver64KiBClosesWith1009(t *testing.T) {
	t.Parallel()
	ctx, f := startedFixture(t)
	c := f.dial(ctx, token(t, auth.DefaultTenant, "alice"))
	c.ping(ctx)
	c.send(`{"op":"ping","x":"` + strings.Repeat("a", MaxFrameBytes) + `"}`)
	if code := c.closeCode(ctx); code != websocket.CloseMessageTooBig {
		t.Fatalf("close code %d, want 1009", code)
	}
}

// smallBuffers shrinks the kernel send buffer of accepted connections, so a
// client that does not read backs up into the gateway quickly.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(8 << 10)
	}
	return c, err
}

// stall holds the writes of the connections of a stallingListener while it
// is on.
type stall struct {
	mu sync.Mutex
	// Guarded by mu.
	release chan struct{} // closed by free; nil while off
}

func (s *stall) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.release == nil {
		s.release = make(chan struct{})
	}
}

func (s *stall) free() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.release != nil {
		close(s.release)
		s.release = nil
	}
}

func (s *stall) wait() {
	s.mu.Lock()
	release := s.release
	s.mu.Unlock()
	if release != nil {
		<-release
	}
}

// stallingListener accepts connections whose writes wait while s is on.
type stallingListener struct {
	net.Listener
	s *stall
}

func (l stallingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return stallingConn{Conn: c, s: l.s}, nil
}

type stallingConn struct {
	net.Conn
	s *stall
}

func (c stallingConn) Write(p []byte) (int, error) {
	c.s.wait()
	return c.Conn.Write(p)
}

// TestMessageContentIsNeverLogged: the README's "Observability": message
// content is never logged. Events with a distinctive content go through a
// gateway logging everything: replayed from Kafka and from the ring, live
// over a WebSocket and an event stream, to a client cut off as too slow
// (4008), and in stream records the gateway skips as bad. The content
// reaches the clients, and never the logs.
func TestMessageContentIsNeverLogged(t *testing.T) {
	t.Parallel()
	const content = "the-heron-sings-at-dawn"
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	var logs syncBuffer
	f.launchLogged = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	conv, id := aliceConv(t)
	p := partitionOf(id)
	tok := token(t, auth.DefaultTenant, "alice")
	secret := func(n int) []byte {
		return events.MarshalEvent(&events.TokenEvent{Meta: events.Meta{Conversation: conv, RequestID: "r", RunID: "r-run", Seq: int64(n), TS: 1},
			Delta: fmt.Sprintf("%s %d", content, n), Agent: "echo", Role: "assistant"})
	}
	write := func(key string, values ...[]byte) {
		t.Helper()
		var msgs []kafka.Message
		for _, v := range values {
			msgs = append(msgs, kafka.Message{Key: []byte(key), Value: v})
		}
		if err := f.writer.WriteMessages(ctx, msgs...); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	write(id.Key(), secret(1), secret(2), secret(3)) // offsets 0..2, before the start: a resume reads Kafka
	f.start(ctx, nil, nil)
	// A replica whose client is cut off: a queue of one frame, a socket that
	// stalls on demand, and a hook that tells when offset 5 comes.
	var st stall
	reached := make(chan struct{})
	var once sync.Once
	slow := f.launch(ctx, func(c *Config) { c.QueueSize = 1 }, func(l net.Listener) net.Listener { return stallingListener{l, &st} },
		func(partition int, offset int64) {
			if partition == p && offset == 5 {
				once.Do(func() { close(reached) })
			}
		})

	ws := f.dial(ctx, tok).subscribed(ctx, conv, "earliest")
	checkSeqs(t, ws.events(ctx, 3), "r", 1, 3)
	sse := mustOpenSSE(ctx, t, f.eventsURL(conv, nil), tok, nil).subscribed()
	cut := f.dialURL(ctx, slow.url, tok).subscribed(ctx, conv, "")
	st.hold()
	write(id.Key(), secret(4), secret(5), secret(6)) // offsets 3..5
	select {
	case <-reached: // offsets 3 and 4 dispatched: the first is being written, the second did not fit
	case <-ctx.Done():
		t.Fatal("the slow replica never reached offset 5")
	}
	st.free()
	if code := cut.closeCode(ctx); code != CloseSlowConsumer {
		t.Fatalf("the slow client's close code %d, want 4008", code)
	}
	got := ws.events(ctx, 3)
	checkSeqs(t, got, "r", 4, 6)
	for i := 4; i <= 6; i++ {
		if m := sse.next(); m.fr.Seq != i || !strings.Contains(m.data, content) {
			t.Fatalf("event stream: %q %s, want seq %d with the content", m.event, m.data, i)
		}
	}

	// Bad records carrying the content: a value cut short, and a key that
	// names no identity, on the same partition; then a good one.
	badKey := ""
	for i := 0; badKey == ""; i++ {
		k := fmt.Sprintf("no-identity-%d", i)
		if (kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: []byte(k)}, 0, 1, 2, 3) == p {
			badKey = k
		}
	}
	cutShort := secret(7)
	write(id.Key(), cutShort[:len(cutShort)-1])
	write(badKey, secret(7))
	write(id.Key(), secret(7))
	checkSeqs(t, ws.events(ctx, 1), "r", 7, 7) // the bad records before it were dispatched
	ring := f.dial(ctx, tok).subscribed(ctx, conv, got[0].Cursor)
	checkSeqs(t, ring.events(ctx, 3), "r", 5, 7)
	checkMetric(t, f.reg, "turnpike_pushgw_ring_replays_total", 1)
	checkMetric(t, f.reg, "turnpike_pushgw_replays_total", 1)

	for _, in := range []*instance{f.instance, slow} { // Run returns once every client has logged its end
		in.stop()
		err := <-in.runErr
		in.runErr <- err // for the cleanup
	}
	out := logs.String()
	for _, want := range []string{`msg="skipped bad stream record"`, `code=4008`} {
		if !strings.Contains(out, want) {
			t.Errorf("the logs lack %s: the path did not run", want)
		}
	}
	if strings.Contains(out, content) {
		t.Fatalf("the logs hold the message content %q:\n%s", content, out)
	}
}

func TestASlowClientIsClosedWith4008WhileOthersGetEveryEvent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{"A queue bounded in frames sheds the client past its frames.", func(c *Config) { c.QueueSize = 16 }},
		{"A queue bounded in bytes sheds the client past its bytes.", func(c *Config) { c.QueueBytes = 24 << 10 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			testSlowClient(t, tt.mod)
		})
	}
}

func testSlowClient(t *testing.T, mod func(*Config)) {
	ctx := testenv.Context(t, 40*time.Second)
	f := newFixture(t, ctx)
	// The slow client reads nothing until all the events are produced, and
	// the gateway's write to it blocks meanwhile. The write deadline must
	// not end that write first: a write that timed out leaves the
	// connection unable to carry the 4008 close frame (it is cut, and the
	// client sees 1006), and how long the events take to produce is the
	// machine's business. Write deadlines have their own test
	// (TestAClientThatStopsReadingIsCutOffByTheWriteDeadline).
	f.start(ctx, func(c *Config) { mod(c); c.WriteTimeout = time.Hour }, func(l net.Listener) net.Listener { return smallBuffers{l} })
	conv, id := aliceConv(t)
	tok := token(t, auth.DefaultTenant, "alice")

	d := websocket.Dialer{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4 << 10)
		}
		return c, err
	}}
	slowConn, _, err := d.DialContext(ctx, f.url, http.Header{"Authorization": {"Bearer " + tok}})
	if err != nil {
		t.Fatal(err)
	}
	defer slowConn.Close()
	slow := &wsClient{t: t, conn: slowConn}
	slow.subscribe(conv, "")
	fast := f.dial(ctx, tok).subscribed(ctx, conv, "")

	// 300 events of ~2 KiB, each produced once the fast client has the one
	// before: its queue never holds more than one, however slowly it is
	// scheduled, while the slow client's fills up.
	const total = 300
	for n := 1; n <= total; n++ {
		f.produceLarge(ctx, id, n, n)
		checkSeqs(t, fast.events(ctx, 1), "r", n, n)
	}

	// The slow client now reads: what it gets is a prefix, then 4008.
	slow.expect(ctx, "subscribed")
	n := 0
	for {
		fr, err := slow.read(ctx)
		if err != nil {
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != CloseSlowConsumer {
				t.Fatalf("slow client read error %v after %d events, want close 4008", err, n)
			}
			break
		}
		n++
		if fr.Seq != n {
			t.Fatalf("slow client event %d has seq %d", n, fr.Seq)
		}
	}
	if n >= total {
		t.Fatalf("the slow client got all %d events; it should have been shed", n)
	}
	checkMetric(t, f.reg, "turnpike_pushgw_slow_disconnects_total", 1)
	fast.ping(ctx)
}

func TestRunStopClosesClientsWith1001(t *testing.T) {
	t.Parallel()
	ctx, f := startedFixture(t)
	conv := testenv.Name(t, "c")
	a := f.dial(ctx, token(t, auth.DefaultTenant, "alice")).subscribed(ctx, conv, "")
	b := f.dial(ctx, token(t, auth.DefaultTenant, "bob")).subscribed(ctx, conv, "earliest")

	f.stop()
	for _, c := range []*wsClient{a, b} {
		if code := c.closeCode(ctx); code != websocket.CloseGoingAway {
			t.Errorf("close code %d, want 1001", code)
		}
	}
	select {
	case err := <-f.runErr:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
		f.runErr <- nil // for the cleanup
	case <-ctx.Done():
		t.Fatal("Run did not return")
	}
	checkMetric(t, f.reg, "turnpike_pushgw_connections", 0) // after Run returned
	_, resp, err := websocket.DefaultDialer.DialContext(ctx, f.url, http.Header{"Authorization": {"Bearer " + token(t, auth.DefaultTenant, "alice")}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("dial after Run returned: %v, %v; want HTTP 503", err, resp)
	}
}

// deleteRecordsBefore deletes partition p's records below offset, as
// retention would.
func (f *fixture) deleteRecordsBefore(ctx context.Context, p int, offset int64) {
	f.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...))
	if err != nil {
		f.t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrDeleteRecordsRequest()
	req.TimeoutMillis = 10000
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = f.topic
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition, rp.Offset = int32(p), offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		f.t.Fatalf("delete records: %v", err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				f.t.Fatalf("delete records: %v", err)
			}
		}
	}
}

func TestACursorOlderThanTheRetainedStreamHasExpired(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	conv, id := aliceConv(t)
	p := partitionOf(id)
	f.produce(ctx, id, "r", 1, 10) // offsets 0..9 of a fresh partition
	f.deleteRecordsBefore(ctx, p, 5)
	f.start(ctx, nil, nil)
	c := f.dial(ctx, token(t, auth.DefaultTenant, "alice"))

	c.subscribe(conv, FormatCursor(p, 3))
	if fr := c.expect(ctx, "error"); fr.Code != "cursor_expired" {
		t.Fatalf("a cursor two records before the first retained one: got %+v, want cursor_expired", fr)
	}
	c.subscribe(conv, FormatCursor(p, 4)) // the record just before the first retained one
	c.expect(ctx, "subscribed")
	checkSeqs(t, c.events(ctx, 5), "r", 6, 10)

	c2 := f.dial(ctx, token(t, auth.DefaultTenant, "alice")).subscribed(ctx, conv, "earliest")
	checkSeqs(t, c2.events(ctx, 5), "r", 6, 10)
}

func TestUnsubscribeStopsEventsAndAResubscriptionResumesCleanly(t *testing.T) {
	t.Parallel()
	ctx, f := startedFixture(t)
	conv, id := aliceConv(t)
	c := f.dial(ctx, token(t, auth.DefaultTenant, "alice")).subscribed(ctx, conv, "")
	f.produce(ctx, id, "r", 1, 5)
	got := c.events(ctx, 5)
	checkSeqs(t, got, "r", 1, 5)

	c.send(`{"op":"unsubscribe","conversation":"` + conv + `"}`)
	c.send(`{"op":"ping"}`)
	c.expect(ctx, "pong") // the unsubscribe is done
	f.produce(ctx, id, "r", 6, 10)
	c.ping(ctx)

	c.subscribed(ctx, conv, got[4].Cursor)
	checkSeqs(t, c.events(ctx, 5), "r", 6, 10)
	f.produce(ctx, id, "r", 11, 11)
	checkSeqs(t, c.events(ctx, 1), "r", 11, 11)
}

// aliceAndBobApart is a conversation name whose alice and bob keys land in
// different partitions.
func aliceAndBobApart(t testing.TB) (alice, bob events.Identity) {
	t.Helper()
	base := testenv.Name(t, "c")
	for i := 0; ; i++ {
		conv := fmt.Sprintf("%s-%d", base, i)
		alice = events.Identity{Tenant: auth.DefaultTenant, User: "alice", Conversation: conv}
		bob = events.Identity{Tenant: auth.DefaultTenant, User: "bob", Conversation: conv}
		if partitionOf(alice) != partitionOf(bob) {
			return alice, bob
		}
	}
}

// docs/api.md "Shard hints": the subscribed frame carries the
// conversation's shard, its home partition computed from the token's
// identity: the same conversation name is another shard for another user,
// and a replaying subscribe names it as a live one does. The WebSocket's
// own ?shard= (for the edge) changes nothing.
func TestTheSubscribedFrameNamesTheShardOfTheTokensConversation(t *testing.T) {
	t.Parallel()
	ctx, f := startedFixture(t)
	alice, bob := aliceAndBobApart(t)
	for _, tt := range []struct {
		name  string
		id    events.Identity
		url   string
		since string
	}{
		{"Alice's live subscribe names her conversation's partition.", alice, f.url, ""},
		{"Bob's subscribe to the same name names his, another partition.", bob, f.url, ""},
		{"A replaying subscribe names it too.", alice, f.url, "earliest"},
		{"Bob's upgrade with alice's shard as hint still gets his own.", bob, f.url + "?shard=" + strconv.Itoa(partitionOf(alice)), ""},
	} {
		c := f.dialURL(ctx, tt.url, token(t, auth.DefaultTenant, tt.id.User))
		c.subscribe(tt.id.Conversation, tt.since)
		fr := c.expect(ctx, "subscribed")
		if fr.Shard == nil || *fr.Shard != partitionOf(tt.id) {
			t.Errorf("%s Got shard %v, want %d", tt.name, fr.Shard, partitionOf(tt.id))
		}
	}
}
