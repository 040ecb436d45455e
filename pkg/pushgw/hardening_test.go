package pushgw

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// errorCode decodes the JSON error shape of an HTTP answer.
func errorCode(t *testing.T, resp *http.Response) string {
	t.Helper()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read the error body: %v", err)
	}
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("body %q is not the JSON error shape", body)
	}
	return e.Error.Code
}

func labelledValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
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
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("metric %s{%s=%q} not registered", name, label, value)
	return 0
}

func TestUpgradesFromOriginsOutsideThePolicyAreRefused(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	f.start(ctx, func(c *Config) { c.AllowedOrigins = []string{"https://app.example.com"} }, nil)
	// The test server listens on 127.0.0.1.
	port := f.srv.URL[strings.LastIndex(f.srv.URL, ":")+1:]
	tok := token(t, auth.DefaultTenant, "alice")
	tests := []struct {
		name   string
		origin string
		host   string // Host header; "" for the dialled one
		ok     bool
		// noToken sends no token: the refusals come in docs/api.md's
		// order, the origin's 403 before the token's 401.
		noToken bool
	}{
		{"A client without Origin upgrades.", "", "", true, false},
		{"A listed origin upgrades.", "https://app.example.com", "", true, false},
		{"A page of the gateway's own host is refused unless listed.", "http://127.0.0.1:" + port, "", false, false},
		{"A rebound page whose Host matches its Origin is refused.", "http://evil.example:" + port, "evil.example:" + port, false, false},
		{"A foreign origin is refused.", "https://evil.example.net", "", false, false},
		{"The null origin is refused.", "null", "", false, false},
		{"A foreign origin without a token is refused for its origin, before its token.", "https://evil.example.net", "", false, true},
	}
	refused := 0
	for _, tt := range tests {
		h := http.Header{"Authorization": {"Bearer " + tok}}
		if tt.noToken {
			h = http.Header{}
		}
		if tt.origin != "" {
			h.Set("Origin", tt.origin)
		}
		if tt.host != "" {
			h.Set("Host", tt.host)
		}
		conn, resp, err := websocket.DefaultDialer.DialContext(ctx, f.url, h)
		if tt.ok {
			if err != nil {
				t.Errorf("%s: dial: %v", tt.name, err)
				continue
			}
			conn.Close()
			continue
		}
		refused++
		if err == nil {
			conn.Close()
			t.Errorf("%s: upgraded", tt.name)
			continue
		}
		if resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %v, %v; want HTTP 403", tt.name, err, resp)
			continue
		}
		if code := errorCode(t, resp); code != "permission_denied" {
			t.Errorf("%s: code %q, want permission_denied", tt.name, code)
		}
	}
	if v := labelledValue(t, f.reg, "turnpike_pushgw_rejected_total", "reason", "origin"); v != float64(refused) {
		t.Errorf("rejected_total{reason=origin} = %v, want %d", v, refused)
	}
}

func TestConnectsOverAUsersRateAreAnswered429BeforeUpgrading(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	f.start(ctx, func(c *Config) { c.ConnectBurst, c.ConnectPerMinute = 2, 1 }, nil)
	alice := token(t, "t1", "alice")
	f.dial(ctx, alice)
	f.dial(ctx, alice)
	conn, resp, err := websocket.DefaultDialer.DialContext(ctx, f.url, http.Header{"Authorization": {"Bearer " + alice}})
	if err == nil {
		conn.Close()
		t.Fatal("a third connect within the burst of 2 upgraded")
	}
	if resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third connect: %v, %v; want HTTP 429", err, resp)
	}
	if code := errorCode(t, resp); code != "rate_limited" {
		t.Errorf("code %q, want rate_limited", code)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
		t.Errorf("Retry-After %q, want 1..60 seconds (one connect a minute)", resp.Header.Get("Retry-After"))
	}
	// The limit is per user: the same name in another tenant, and another
	// user, still connect.
	f.dial(ctx, token(t, "t2", "alice"))
	f.dial(ctx, token(t, "t1", "bob"))
	if v := labelledValue(t, f.reg, "turnpike_pushgw_rejected_total", "reason", "connect_rate"); v != 1 {
		t.Errorf("rejected_total{reason=connect_rate} = %v, want 1", v)
	}
}

func TestSubscribesOverAUsersRateGetARateLimitedErrorFrame(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	f.start(ctx, func(c *Config) { c.SubscribeBurst, c.SubscribePerMinute = 3, 1 }, nil)
	conv := testenv.Name(t, "c")
	a1 := f.dial(ctx, token(t, "t1", "alice"))
	for i := range 3 {
		a1.subscribed(ctx, conv+"-"+strconv.Itoa(i), "")
	}
	a1.subscribe(conv+"-3", "")
	if fr := a1.expect(ctx, "error"); fr.Code != "rate_limited" || !strings.Contains(fr.Message, "retry") {
		t.Fatalf("a fourth subscribe: %+v, want code rate_limited with a retry hint", fr)
	}
	a1.send(`{"op":"ping"}`)
	a1.expect(ctx, "pong") // the connection stays open

	// The bucket is the user's, across connections.
	a2 := f.dial(ctx, token(t, "t1", "alice"))
	a2.subscribe(conv+"-4", "")
	if fr := a2.expect(ctx, "error"); fr.Code != "rate_limited" {
		t.Fatalf("alice's second connection: %+v, want rate_limited", fr)
	}
	f.dial(ctx, token(t, "t1", "bob")).subscribed(ctx, conv, "")
	if v := labelledValue(t, f.reg, "turnpike_pushgw_rejected_total", "reason", "subscribe_rate"); v != 2 {
		t.Errorf("rejected_total{reason=subscribe_rate} = %v, want 2", v)
	}
}

func TestAClientThatStopsAnsweringPingsIsDropped(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	// The pong wait leaves the client that answers a wide margin: on a
	// loaded machine its reader can be late by hundreds of milliseconds
	// (a 400 ms wait once dropped it).
	f.start(ctx, func(c *Config) { c.PingInterval, c.PongWait = 100*time.Millisecond, 3*time.Second }, nil)
	tok := token(t, auth.DefaultTenant, "alice")

	// gorilla answers pings only while the application reads.
	alive := f.dial(ctx, tok)
	pings := make(chan struct{}, 100)
	alive.conn.SetPingHandler(func(data string) error {
		select {
		case pings <- struct{}{}:
		default:
		}
		return alive.conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	aliveErr := make(chan error, 1)
	go func() {
		_ = alive.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, _, err := alive.conn.ReadMessage()
		aliveErr <- err
	}()
	silent := f.dial(ctx, tok)

	// Wait until the gateway dropped one connection and the client
	// answering pings got 35 of them: 3.5 s at the 100 ms interval, past
	// the 3 s pong wait.
	for n := 0; n < 35; n++ {
		select {
		case <-pings:
		case err := <-aliveErr:
			t.Fatalf("the client answering pings was dropped: %v", err)
		case <-ctx.Done():
			t.Fatalf("the client answering pings got %d pings", n)
		}
	}
	testenv.Eventually(t, ctx, "one connection dropped", func() bool {
		return testenv.MetricValue(t, f.reg, "turnpike_pushgw_connections") == 1
	})
	select {
	case err := <-aliveErr:
		t.Fatalf("the client answering pings was dropped: %v", err)
	default: // the remaining connection is the one answering pings
	}
	// The silent client finds its connection closed.
	if dl, ok := ctx.Deadline(); ok {
		_ = silent.conn.SetReadDeadline(dl) // the test's own bound
	}
	silent.conn.SetPingHandler(func(string) error { return nil })
	for {
		_, _, err := silent.conn.ReadMessage()
		if err == nil {
			continue
		}
		if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
			t.Fatal("the silent client's connection is still open")
		}
		break
	}
	testenv.Eventually(t, ctx, "connections = 1, only the client answering pings", func() bool {
		return testenv.MetricValue(t, f.reg, "turnpike_pushgw_connections") == 1
	})
}

func TestAClientThatStopsReadingIsCutOffByTheWriteDeadline(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 40*time.Second)
	f := newFixture(t, ctx)
	// Queues too big to overflow: only the write deadline can end this.
	f.start(ctx, func(c *Config) { c.WriteTimeout, c.QueueSize, c.QueueBytes = 300*time.Millisecond, 1<<20, 1<<30 },
		func(l net.Listener) net.Listener { return smallBuffers{l} })
	conv, id := aliceConv(t)
	d := websocket.Dialer{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4 << 10)
		}
		return c, err
	}}
	conn, _, err := d.DialContext(ctx, f.url, http.Header{"Authorization": {"Bearer " + token(t, auth.DefaultTenant, "alice")}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := &wsClient{t: t, conn: conn}
	c.subscribed(ctx, conv, "")
	var msgs []kafka.Message
	for n := 1; n <= 300; n++ { // 2.4 MiB, far more than the socket buffers
		v := events.MarshalEvent(&events.TokenEvent{Meta: events.Meta{Conversation: conv, RequestID: "r", RunID: "u", Seq: int64(n), TS: 1},
			Delta: strings.Repeat("x", 8<<10), Agent: "echo", Role: "assistant"})
		msgs = append(msgs, kafka.Message{Key: []byte(id.Key()), Value: v})
	}
	if err := f.writer.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, ctx, "the gateway closed the connection", func() bool {
		return testenv.MetricValue(t, f.reg, "turnpike_pushgw_connections") == 0
	})
	checkMetric(t, f.reg, "turnpike_pushgw_slow_disconnects_total", 0) // none: the write deadline cut the client off, not a queue overflow
	n := 0
	for {
		if _, err := c.read(ctx); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the connection is still open")
			}
			break
		}
		n++
	}
	if n >= 300 {
		t.Fatalf("the client got all %d events", n)
	}
}
