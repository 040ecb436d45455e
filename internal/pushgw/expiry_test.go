package pushgw

import (
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/turnpike-dev/turnpike/internal/auth"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// A connection does not outlive its token: it streams while the token is
// valid and is closed with CloseTokenExpired when it expires.
func TestAConnectionIsClosedWith4401WhenItsTokenExpires(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	f.start(ctx, nil, nil)
	tok, err := auth.Mint(testSecret, auth.DefaultTenant, "alice", 1500*time.Millisecond, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := f.dial(ctx, tok)
	c.subscribe("c1", "")
	c.expect(ctx, "subscribed")
	id := events.Identity{Tenant: auth.DefaultTenant, User: "alice", Conversation: "c1"}
	f.produce(ctx, id, "r1", 1, 3)
	checkSeqs(t, c.events(ctx, 3), "r1", 1, 3)
	if code := c.closeCode(ctx); code != CloseTokenExpired {
		t.Fatalf("close code %d, want %d", code, CloseTokenExpired)
	}
	// A connection with a long-lived token is still served.
	long := f.dial(ctx, token(t, auth.DefaultTenant, "alice"))
	long.send(`{"op":"ping"}`)
	long.expect(ctx, "pong")
}

// RFC 6455 §8.1: a text frame that is not valid UTF-8 fails the connection
// with 1007.
func TestInvalidUTF8InATextFrameClosesWith1007(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newFixture(t, ctx)
	f.start(ctx, nil, nil)
	c := f.dial(ctx, token(t, auth.DefaultTenant, "alice"))
	c.send(`{"op":"ping"}`)
	c.expect(ctx, "pong")
	c.send("{\"op\":\"subscribe\",\"conversation\":\"c\xff1\"}")
	if code := c.closeCode(ctx); code != websocket.CloseInvalidFramePayloadData {
		t.Fatalf("close code %d, want 1007", code)
	}
}
