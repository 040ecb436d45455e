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
	"sync/atomic"
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
// waits until it is ready.
func startGateway(t *testing.T, ctx context.Context, to server.Timeouts) *gateway {
	t.Helper()
	brokers := testenv.Kafka(t)
	stream := testenv.Name(t, "stream")
	if err := topic.Ensure(ctx, brokers, 4, stream); err != nil {
		t.Fatalf("ensure topic: %v", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ready := make(chan struct{})
	gw, err := pushgw.New(pushgw.Config{Brokers: brokers, Topic: stream, AuthSecret: gatewaySecret, Partitions: 4},
		pushgw.WithRegistry(prometheus.NewRegistry()), pushgw.WithLogger(log), pushgw.WithReady(func() { close(ready) }))
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
	g := &gateway{t: t, streamURL: "ws://" + ln.Addr().String() + "/v1/stream", conns: ln,
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

// mint is a token of user that expires ttl from now.
func (g *gateway) mint(user string, ttl time.Duration) (string, error) {
	return auth.Mint(gatewaySecret, auth.DefaultTenant, user, ttl, time.Now())
}

// produce writes e as the stream event of user's conversation.
func (g *gateway) produce(ctx context.Context, user string, e events.Event) {
	id := events.Identity{Tenant: auth.DefaultTenant, User: user, Conversation: e.Header().Conversation}
	if err := g.writer.WriteMessages(ctx, kafka.Message{Key: []byte(id.Key()), Value: events.MarshalEvent(e)}); err != nil && ctx.Err() == nil {
		g.t.Errorf("produce: %v", err)
	}
}

// answer writes request r's run in conv: run.started (seq 1), then a
// token "wN " every 20 ms (seq N+1) until more() is false (and at least
// one), then run.completed. It returns the number of tokens; when ctx
// ends, at once and without the run.completed.
func (g *gateway) answer(ctx context.Context, user, conv string, more func(tokens int) bool) int {
	m := func(seq int) events.Meta {
		return events.Meta{Conversation: conv, RequestID: "r", RunID: "r-run", Seq: int64(seq), TS: time.Now().UnixNano()}
	}
	g.produce(ctx, user, &events.RunStartedEvent{Meta: m(1)})
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	n := 0
	for n == 0 || more(n) {
		select {
		case <-ctx.Done():
			return n
		case <-tick.C:
		}
		n++
		g.produce(ctx, user, &events.TokenEvent{Meta: m(n + 1), Delta: fmt.Sprintf("w%d ", n), Agent: "echo", Role: "assistant"})
	}
	if ctx.Err() != nil {
		return n
	}
	g.produce(ctx, user, &events.RunCompletedEvent{Meta: m(n + 2), Status: events.StatusComplete})
	return n
}

// A Subscription outlives the tokens it connects with, over either
// transport: the gateway ends a connection when its token expires (a
// WebSocket with CloseTokenExpired, an event stream with an unauthenticated
// error event), and with a TokenSource the subscription connects again
// with a fresh token from its cursor, so an answer longer than a token's
// life arrives whole: every event once, in order. With a fixed Token, Next
// fails with the gateway's 401 once the token has expired.
func TestASubscriptionFollowsAnAnswerAcrossTokenExpiries(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	g := startGateway(t, ctx, server.Timeouts{})
	for _, tt := range []struct {
		name string
		sse  bool
	}{{"WebSocket", false}, {"SSE", true}} {
		t.Run(tt.name+" with a TokenSource", func(t *testing.T) {
			t.Parallel()
			user, conv := strings.ToLower(tt.name)+"-renew", testenv.Name(t, "c")
			var issued, reconnects atomic.Int32
			c := &client.Client{StreamURL: g.streamURL, TokenSource: func(context.Context) (string, error) {
				issued.Add(1)
				return g.mint(user, 1500*time.Millisecond)
			}}
			sub, err := c.Subscribe(ctx, conv, client.SubscribeOptions{SSE: tt.sse, OnReconnect: func(string) { reconnects.Add(1) }})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			// The answer goes on until the subscription has had to
			// reconnect twice, and a few tokens more.
			actx, cancel := context.WithCancel(ctx)
			tokens, n := make(chan int, 1), -1
			defer func() { // a failed test stops the answer too
				cancel()
				if n < 0 {
					<-tokens
				}
			}()
			after := 0
			go func() {
				tokens <- g.answer(actx, user, conv, func(int) bool {
					if reconnects.Load() < 2 {
						return true
					}
					after++
					return after <= 5
				})
			}()
			var tr client.Transcript
			var seqs []int64
			for {
				e, err := sub.Next(ctx)
				if err != nil {
					t.Fatalf("Next after %d events: %v", len(seqs), err)
				}
				seqs = append(seqs, e.Header().Seq)
				if int64(len(seqs)) != e.Header().Seq {
					t.Fatalf("seqs %v: want each of 1, 2, … once, in order", seqs)
				}
				if tr.Apply(e).Status != "" {
					break
				}
			}
			n = <-tokens
			var want strings.Builder
			for i := 1; i <= n; i++ {
				fmt.Fprintf(&want, "w%d ", i)
			}
			if r := tr.Runs()[0]; r.Text != want.String() || r.Status != events.StatusComplete || r.NeedsHistory {
				t.Fatalf("the answer %+v, want the text of its %d tokens, complete", r, n)
			}
			if r := reconnects.Load(); r < 2 {
				t.Fatalf("%d reconnections", r)
			}
			if i, r := issued.Load(), reconnects.Load(); i < 1+r {
				t.Fatalf("%d tokens issued for %d connections: want a fresh one for each", i, 1+r)
			}
			t.Logf("%d events over %d connections", len(seqs), 1+reconnects.Load())
		})
		t.Run(tt.name+" with a fixed Token", func(t *testing.T) {
			t.Parallel()
			user, conv := strings.ToLower(tt.name)+"-fixed", testenv.Name(t, "c")
			tok, err := g.mint(user, 1500*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			c := &client.Client{StreamURL: g.streamURL, Token: tok}
			sub, err := c.Subscribe(ctx, conv, client.SubscribeOptions{SSE: tt.sse})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			g.answer(ctx, user, conv, func(n int) bool { return n < 3 })
			for seq := int64(1); seq <= 5; seq++ {
				e, err := sub.Next(ctx)
				if err != nil || e.Header().Seq != seq {
					t.Fatalf("Next = %v, %v; want the event of seq %d, before the token expires", e, err, seq)
				}
			}
			// Nothing more is sent: Next returns when the token expires
			// and the gateway refuses it on the reconnection.
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
