package e2e

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/testenv/stacktest"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/pushgw"
)

// tokenLife is the life of the tokens the expiry test mints: far longer
// than any wait of the test, so that only the test's clock expires them.
const tokenLife = time.Hour

// The gateway closes a connection when its token expires; a Subscription
// with a TokenSource dials again with a fresh token and resumes after its
// cursor: the answer arrives whole, once, across several expiries. The
// tokens expire when the test steps the gateway's clock (pushgw.WithClock)
// past them, while the answer is held at a gate (stacktest.Gates): each
// expiry lands mid-answer, however slow the machine, and no token expires
// before the test means it to.
func TestASubscriptionRenewsItsTokenAndResumesWithoutLosingAnEvent(t *testing.T) {
	gates := stacktest.NewGates()
	s := gatedStack(t, gates)
	ctx := testenv.Context(t, 60*time.Second)
	clock := testenv.NewClock(time.Now())
	streamURL := s.gatewayOn(t, ctx, clock)
	mint := func(user string) (string, error) {
		return auth.Mint(s.AuthSecret, "acme", user, tokenLife, clock.Now())
	}
	// Requests are posted with a token of the real clock (ingest's).
	sender := s.client(t, "acme", "renew")

	const expiries, step, n = 3, 5, 40
	gate := gates.Hold("renew", step)
	var issued atomic.Int32
	c := &client.Client{StreamURL: streamURL, TokenSource: func(context.Context) (string, error) {
		issued.Add(1)
		return mint("renew")
	}}
	reconnects := 0
	sub, err := c.Subscribe(ctx, "renew", client.SubscribeOptions{OnReconnect: func(string) {
		// Reconnected after an expiry: the answer goes on, on the new
		// connection, as far as the next expiry (or to its end).
		reconnects++
		if reconnects < expiries {
			gate.Allow(step)
		} else {
			gate.Release()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	sent := send(t, ctx, sender, "renew", "[[tokens:40]][[delay:1ms]]")
	var text strings.Builder
	expired := 0
	followAnswer(t, ctx, sub, sent, n, func(e events.Event) {
		if tok, ok := e.(*events.TokenEvent); ok && tok.RequestID == sent {
			text.WriteString(tok.Delta)
		}
		// The answer is held after each step of words: its connection's
		// token expires now, mid-answer.
		if expired < expiries && expired == reconnects && len(strings.Fields(text.String())) >= step*(expired+1) {
			expired++
			clock.Advance(tokenLife + time.Minute)
		}
	})
	if reconnects < expiries {
		t.Fatalf("%d reconnections over %d expiries: the connection outlived its token", reconnects, expiries)
	}
	if n := issued.Load(); int(n) < 1+reconnects {
		t.Fatalf("%d tokens issued for %d reconnections, want a fresh one for each", n, reconnects)
	}

	// Without a token source the subscription ends with the refusal of
	// its expired token, instead of streaming past it.
	fixedGate := gates.Hold("fixed", 3)
	tok, err := mint("renew")
	if err != nil {
		t.Fatal(err)
	}
	fixed := &client.Client{StreamURL: streamURL, Token: tok}
	sub2, err := fixed.Subscribe(ctx, "fixed", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Close()
	sent = send(t, ctx, sender, "fixed", "[[tokens:40]][[delay:1ms]]")
	text.Reset()
	for len(strings.Fields(text.String())) < 3 {
		e, err := sub2.Next(ctx)
		if err != nil {
			t.Fatalf("Next before the token expired: %v", err)
		}
		if tok, ok := e.(*events.TokenEvent); ok && tok.RequestID == sent {
			text.WriteString(tok.Delta)
		}
	}
	clock.Advance(tokenLife + time.Minute)
	for {
		_, err := sub2.Next(ctx)
		if err == nil {
			continue
		}
		if !client.IsCode(err, "unauthenticated") {
			t.Fatalf("Next: %v, want the gateway's 401 for the expired token", err)
		}
		break
	}
	fixedGate.Release()
}

// gatewayOn runs a push gateway of the test's own on s's broker and
// topics, its tokens expiring on clock, until the test ends; it returns
// its WebSocket URL.
func (s *stack) gatewayOn(t *testing.T, ctx context.Context, clock pushgw.Clock) string {
	t.Helper()
	cfg := s.cfg.Pushgw
	w := s.cfg.Worker
	cfg.Brokers, cfg.AuthSecret, cfg.TopicPrefix, cfg.Partitions = s.Brokers, s.AuthSecret, w.TopicPrefix, w.Partitions
	cfg.LogLevel, cfg.Addr, cfg.PprofAddr = "warn", "", ""
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	gw, err := pushgw.New(cfg, pushgw.WithClock(clock), pushgw.WithListener(ln), pushgw.WithLogger(stacktest.Logger(t)),
		pushgw.WithRegistry(prometheus.NewRegistry()), pushgw.WithReady(func() { close(ready) }))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("push gateway: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("push gateway stopped before it was ready: %v", err)
	case <-ctx.Done():
		t.Fatal("push gateway never ready")
	}
	return "ws://" + ln.Addr().String() + "/v1/stream"
}
