package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/pushgw"
)

const gatewaySecret = "client-test-secret-0123456789abcdef"

// gateway is a push gateway of the test's own on a stream topic of a test
// broker, and a producer of that topic: what the worker's bridge writes,
// the gateway serves over both transports.
type gateway struct {
	t         *testing.T
	writer    *kafka.Writer
	streamURL string
	conns     *deadlineListener
	clock     *testenv.Clock // the clock the gateway's tokens expire on
}

// deadlineListener records the read deadline last set on the connection it
// accepted last.
type deadlineListener struct {
	net.Listener

	mu   sync.Mutex
	last *deadlineConn
}

func (l *deadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	dc := &deadlineConn{Conn: c}
	l.mu.Lock()
	l.last = dc
	l.mu.Unlock()
	return dc, nil
}

// lastReadDeadline is the read deadline of the last connection accepted.
func (l *deadlineListener) lastReadDeadline() time.Time {
	l.mu.Lock()
	c := l.last
	l.mu.Unlock()
	if c == nil {
		return time.Time{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.read
}

type deadlineConn struct {
	net.Conn

	mu   sync.Mutex
	read time.Time
}

func (c *deadlineConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.read = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.read = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

// startGateway runs a gateway, served as the services serve it (the
// hardened server, with timeouts to: zero fields take the defaults), and
// waits until it is ready. Its tokens expire on clock, which the test
// steps (pushgw.WithClock); g.mint mints them against it.
func startGateway(t *testing.T, ctx context.Context, to server.Timeouts) *gateway {
	t.Helper()
	brokers := testenv.Kafka(t)
	stream := testenv.Name(t, "stream")
	if err := topic.Ensure(ctx, brokers, 4, stream); err != nil {
		t.Fatalf("ensure topic: %v", err)
	}
	clock := testenv.NewClock(time.Now().Truncate(time.Second)) // a whole second: a token's exp is exact
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ready := make(chan struct{})
	gw, err := pushgw.New(pushgw.Config{Brokers: brokers, Topic: stream, AuthSecret: gatewaySecret, Partitions: 4},
		pushgw.WithRegistry(prometheus.NewRegistry()), pushgw.WithLogger(log), pushgw.WithReady(func() { close(ready) }),
		pushgw.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	runErr := make(chan error, 1)
	go func() { runErr <- gw.Run(runCtx) }()
	mux := gw.Handler()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &deadlineListener{Listener: tcp}
	serveErr := make(chan error, 1)
	go func() { serveErr <- server.ServeTimeouts(runCtx, ln, mux, time.Second, to) }()
	tr := &kafka.Transport{}
	g := &gateway{t: t, streamURL: "ws://" + ln.Addr().String() + "/v1/stream", conns: ln, clock: clock,
		writer: &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: stream, Balancer: kafka.Murmur2Balancer{},
			BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll, Transport: tr}}
	t.Cleanup(func() {
		_ = g.writer.Close()
		tr.CloseIdleConnections()
		stop()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
		if err := <-serveErr; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatalf("gateway not ready: %v", ctx.Err())
	case err := <-runErr:
		t.Fatalf("Run returned early: %v", err)
	}
	return g
}

// mint is a token of user that expires ttl after the gateway clock's now.
func (g *gateway) mint(user string, ttl time.Duration) (string, error) {
	return auth.Mint(gatewaySecret, auth.DefaultTenant, user, ttl, g.clock.Now())
}

// produce writes e as the stream event of user's conversation.
func (g *gateway) produce(ctx context.Context, user string, e events.Event) {
	id := events.Identity{Tenant: auth.DefaultTenant, User: user, Conversation: e.Header().Conversation}
	if err := g.writer.WriteMessages(ctx, kafka.Message{Key: []byte(id.Key()), Value: events.MarshalEvent(e)}); err != nil && ctx.Err() == nil {
		g.t.Errorf("produce: %v", err)
	}
}

// observe subscribes to user's conversation conv live, on a token valid
// for as long as the test can step the gateway's clock, and returns a
// function that waits until the observer has received the event of seq
// (the gateway has dispatched it: its ring holds it).
func (g *gateway) observe(ctx context.Context, user, conv string) func(seq int64) {
	g.t.Helper()
	tok, err := auth.Mint(gatewaySecret, auth.DefaultTenant, user, 1000*time.Hour, g.clock.Now())
	if err != nil {
		g.t.Fatal(err)
	}
	conn, err := (&client.Client{StreamURL: g.streamURL, Token: tok}).Dial(ctx)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { _ = conn.Close() })
	if err := conn.Subscribe(conv, ""); err != nil {
		g.t.Fatal(err)
	}
	if f, err := conn.Next(ctx); err != nil || f.Type != client.FrameSubscribed {
		g.t.Fatalf("observer: first frame %+v, %v; want subscribed", f, err)
	}
	return func(seq int64) {
		for {
			f, err := conn.Next(ctx)
			if err != nil {
				g.t.Fatalf("observer, waiting for seq %d: %v", seq, err)
			}
			if f.Event != nil && f.Event.Header().Seq == seq {
				return
			}
		}
	}
}

// answer is request r's run in user's conversation conv, written event by
// event when the test says: run.started (seq 1), tokens "wN " (seq N+1),
// run.completed.
type answer struct {
	g          *gateway
	user, conv string
	tokens     int // tokens written so far
}

func (r *answer) meta(seq int) events.Meta {
	return events.Meta{Conversation: r.conv, RequestID: "r", RunID: "r-run", Seq: int64(seq), TS: time.Now().UnixNano()}
}

func (r *answer) start(ctx context.Context) {
	r.g.produce(ctx, r.user, &events.RunStartedEvent{Meta: r.meta(1)})
}

func (r *answer) token(ctx context.Context) {
	r.tokens++
	r.g.produce(ctx, r.user, &events.TokenEvent{Meta: r.meta(r.tokens + 1), Delta: fmt.Sprintf("w%d ", r.tokens), Agent: "echo", Role: "assistant"})
}

func (r *answer) complete(ctx context.Context) {
	r.g.produce(ctx, r.user, &events.RunCompletedEvent{Meta: r.meta(r.tokens + 2), Status: events.StatusComplete})
}

// text is the answer of the tokens written so far.
func (r *answer) text() string {
	var b strings.Builder
	for i := 1; i <= r.tokens; i++ {
		fmt.Fprintf(&b, "w%d ", i)
	}
	return b.String()
}

// A Subscription outlives the tokens it connects with, over either
// transport: the gateway ends a connection when its token expires (a
// WebSocket with CloseTokenExpired, an event stream with an unauthenticated
// error event), and with a TokenSource the subscription connects again
// with a fresh token from its cursor, so an answer longer than a token's
// life arrives whole: every event once, in order. With a fixed Token, Next
// fails with the gateway's 401 once the token has expired.
//
// Tokens expire on the gateway's clock (pushgw.WithClock), which the test
// steps past each token's exp: nothing waits for a token's life to pass.
// The client needs no clock of its own for this: it never reads a token's
// exp, it only answers the gateway's 4401 (or unauthenticated event) by
// asking its TokenSource again.
func TestASubscriptionFollowsAnAnswerAcrossTokenExpiries(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		sse  bool
	}{{"WebSocket", false}, {"SSE", true}} {
		t.Run(tt.name+" with a TokenSource", func(t *testing.T) {
			t.Parallel()
			// The deadline starts when the subtest runs: a parallel subtest may
			// wait for a slot long after its parent returned.
			ctx := testenv.Context(t, 60*time.Second)
			g := startGateway(t, ctx, server.Timeouts{}) // a clock of its own: the test steps it
			user, conv := strings.ToLower(tt.name)+"-renew", testenv.Name(t, "c")
			r := &answer{g: g, user: user, conv: conv}
			// An observer on a token that outlives the test's clock steps
			// sees each event once the gateway has dispatched it.
			observer := g.observe(ctx, user, conv)
			var issued, reconnects int
			c := &client.Client{StreamURL: g.streamURL, TokenSource: func(context.Context) (string, error) {
				issued++
				if issued > 1 {
					// A reconnection: the expired connection is gone and
					// the next is not subscribed yet. The answer's next
					// token is written, and dispatched, meanwhile: only a
					// resume from the cursor delivers it.
					r.token(ctx)
					observer(int64(r.tokens + 1))
				}
				return g.mint(user, time.Hour)
			}}
			// Once subscribed again, the next token is written: a resume
			// that lost the one written in between gets this one first.
			sub, err := c.Subscribe(ctx, conv, client.SubscribeOptions{SSE: tt.sse, OnReconnect: func(string) {
				reconnects++
				r.token(ctx)
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			var tr client.Transcript
			var seqs []int64
			next := func() bool { // the next event, in order; false: the run completed
				t.Helper()
				e, err := sub.Next(ctx)
				if err != nil {
					t.Fatalf("Next after %d events (%d reconnections): %v", len(seqs), reconnects, err)
				}
				seqs = append(seqs, e.Header().Seq)
				if int64(len(seqs)) != e.Header().Seq {
					t.Fatalf("seqs %v: want each of 1, 2, … once, in order", seqs)
				}
				return tr.Apply(e).Status == ""
			}
			r.start(ctx)
			r.token(ctx)
			next()
			next()
			// The token expires twice mid-answer. The gateway closes the
			// connection (its clock's timer), the subscription connects
			// again with a fresh token, and the token written in between
			// arrives.
			for i := 1; i <= 2; i++ {
				g.clock.Advance(time.Hour)
				next() // the token written between the connections
				if reconnects != i {
					t.Fatalf("%d reconnections after the token expired %d times", reconnects, i)
				}
				next() // the token written once subscribed again
			}
			for range 3 {
				r.token(ctx)
			}
			r.complete(ctx)
			for next() {
			}
			if got := tr.Runs()[0]; got.Text != r.text() || got.Status != events.StatusComplete || got.NeedsHistory {
				t.Fatalf("the answer %+v, want the text of its %d tokens, complete", got, r.tokens)
			}
			if issued != 1+reconnects {
				t.Fatalf("%d tokens issued for %d connections: want a fresh one for each", issued, 1+reconnects)
			}
		})
		t.Run(tt.name+" with a fixed Token", func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 60*time.Second)
			g := startGateway(t, ctx, server.Timeouts{})
			user, conv := strings.ToLower(tt.name)+"-fixed", testenv.Name(t, "c")
			tok, err := g.mint(user, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			c := &client.Client{StreamURL: g.streamURL, Token: tok}
			sub, err := c.Subscribe(ctx, conv, client.SubscribeOptions{SSE: tt.sse})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			r := &answer{g: g, user: user, conv: conv}
			r.start(ctx)
			for range 3 {
				r.token(ctx)
			}
			r.complete(ctx)
			for seq := int64(1); seq <= 5; seq++ {
				e, err := sub.Next(ctx)
				if err != nil || e.Header().Seq != seq {
					t.Fatalf("Next = %v, %v; want the event of seq %d, before the token expires", e, err, seq)
				}
			}
			// Nothing more is sent: Next returns when the token expires
			// and the gateway refuses it on the reconnection.
			g.clock.Advance(time.Hour)
			e, err := sub.Next(ctx)
			if !client.IsCode(err, "unauthenticated") {
				t.Fatalf("Next = %v, %v; want the gateway's 401 for the expired token", e, err)
			}
			if ae := (*client.APIError)(nil); !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
				t.Fatalf("Next: %v, want an APIError of status 401", err)
			}
		})
	}
}

// frameReader is a Conn or an EventStream.
type frameReader interface {
	Next(context.Context) (client.Frame, error)
	Close() error
}

// docs/api.md, "Timeouts and early answers": an established WebSocket or
// event stream is not bound by the request read limit. The gateway is
// served with limits of 200 ms. Once a stream is established, its
// connection must not keep the request's read deadline (the mechanism:
// net/http clears it when the gateway takes the connection over, and the
// event stream clears it before subscribing); and the stream, held open
// past the limit, must still read (a ping on the WebSocket) and deliver an
// event. Conn and EventStream do not reconnect, so a cut shows. The
// subtests share the gateway's listener, so they run one after the other.
func TestStreamsOutliveTheServersRequestReadLimit(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	const limit = 200 * time.Millisecond
	g := startGateway(t, ctx, server.Timeouts{ReadHeader: limit, Read: limit, Idle: limit})
	for _, tt := range []struct {
		name string
		open func(c *client.Client, conv string) (frameReader, error)
	}{
		{"A WebSocket reads and delivers past the read limit.", func(c *client.Client, conv string) (frameReader, error) {
			conn, err := c.Dial(ctx)
			if err != nil {
				return nil, err
			}
			return conn, conn.Subscribe(conv, "")
		}},
		{"An event stream delivers past the read limit.", func(c *client.Client, conv string) (frameReader, error) {
			return c.Events(ctx, conv, client.EventsOptions{})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			user, conv := "limits", testenv.Name(t, "c")
			tok, err := g.mint(user, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			s, err := tt.open(&client.Client{StreamURL: g.streamURL, Token: tok}, conv)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if f, err := s.Next(ctx); err != nil || f.Type != "subscribed" {
				t.Fatalf("first frame %+v, %v; want subscribed", f, err)
			}
			// The request began before it was subscribed: a deadline the
			// read limit set is before subscribed+limit. The gateway's own
			// (the WebSocket's pong wait) is later.
			subscribed := time.Now()
			if d := g.conns.lastReadDeadline(); !d.IsZero() && !d.After(subscribed.Add(limit)) {
				t.Fatalf("the established stream's connection keeps the request's read deadline (%v after it was subscribed)", d.Sub(subscribed))
			}
			<-time.After(limit) // past the limit, had the stream kept it
			if conn, ok := s.(*client.Conn); ok {
				if err := conn.Ping(); err != nil {
					t.Fatalf("ping past the read limit: %v", err)
				}
				if f, err := s.Next(ctx); err != nil || f.Type != "pong" {
					t.Fatalf("answer to a ping past the read limit: %+v, %v; want pong", f, err)
				}
			}
			g.produce(ctx, user, &events.RunStartedEvent{Meta: events.Meta{Conversation: conv, RequestID: "r", RunID: "r-run", Seq: 1, TS: time.Now().UnixNano()}})
			f, err := s.Next(ctx)
			if err != nil {
				t.Fatalf("an event past the read limit: %v (the stream was cut)", err)
			}
			if f.Event == nil || f.Event.Type() != events.TypeRunStarted || f.Event.Header().Seq != 1 {
				t.Fatalf("frame past the read limit %+v, want the run.started produced", f)
			}
		})
	}
}
