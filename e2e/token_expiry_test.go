package e2e

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/client"
)

// The gateway closes a connection when its token expires; a Subscription
// with a TokenSource dials again with a fresh token and resumes after its
// cursor: the answer arrives whole, once, across several expiries.
func TestASubscriptionRenewsItsTokenAndResumesWithoutLosingAnEvent(t *testing.T) {
	s := startStack(t, "")
	ctx := testenv.Context(t, 60*time.Second)
	var issued atomic.Int32
	c := &client.Client{BaseURL: "http://" + s.IngestAddr, StreamURL: "ws://" + s.PushgwAddr + "/v1/stream",
		TokenSource: func(context.Context) (string, error) {
			issued.Add(1)
			return auth.Mint(s.AuthSecret, "acme", "renew", 1500*time.Millisecond, time.Now())
		}}
	reconnects := 0
	sub, err := c.Subscribe(ctx, "renew", client.SubscribeOptions{OnReconnect: func(string) { reconnects++ }})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	sent := send(t, ctx, c, "renew", "[[tokens:40]][[delay:100ms]]")
	followAnswer(t, ctx, sub, sent, 40, nil)
	if reconnects < 1 {
		t.Fatalf("%d reconnections over an answer longer than the token's life: the connection outlived its token", reconnects)
	}
	if n := issued.Load(); int(n) < 2+reconnects {
		t.Fatalf("%d tokens issued for %d reconnections, want a fresh one for each", n, reconnects)
	}

	// Without a token source the subscription ends with the refusal of
	// its expired token, instead of streaming past it.
	tok, err := auth.Mint(s.AuthSecret, "acme", "renew", 1500*time.Millisecond, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	fixed := &client.Client{BaseURL: c.BaseURL, StreamURL: c.StreamURL, Token: tok}
	sub2, err := fixed.Subscribe(ctx, "renew", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Close()
	send(t, ctx, fixed, "renew", "[[tokens:40]][[delay:100ms]]")
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
}
