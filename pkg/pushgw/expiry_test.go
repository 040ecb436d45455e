package pushgw

import (
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// A connection does not outlive its token: it streams while the token is
// valid and is closed with CloseTokenExpired when it expires.
func TestAConnectionIsClosedWith4401WhenItsTokenExpires(t *testing.T) {
	t.Parallel()
	ctx, f := startedFixture(t)
	c := f.dial(ctx, shortToken(t, "alice", 1500*time.Millisecond)).subscribed(ctx, "c1", "")
	id := events.Identity{Tenant: auth.DefaultTenant, User: "alice", Conversation: "c1"}
	f.produce(ctx, id, "r1", 1, 3)
	checkSeqs(t, c.events(ctx, 3), "r1", 1, 3)
	if code := c.closeCode(ctx); code != CloseTokenExpired {
		t.Fatalf("close code %d, want %d", code, CloseTokenExpired)
	}
	// A connection with a long-lived token is still served.
	long := f.dial(ctx, token(t, auth.DefaultTenant, "alice"))
	long.ping(ctx)
}

// shortToken is a token of user (default tenant) that expires ttl from now.
func shortToken(t *testing.T, user string, ttl time.Duration) string {
	t.Helper()
	tok, err := auth.Mint(testSecret, auth.DefaultTenant, user, ttl, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// An event stream does not outlive its token either: while events keep
// coming it delivers them, each once and in order, and when the token
// expires it ends with one error event of code unauthenticated, and
// nothing after it. What it had not delivered yet comes on a stream opened
// with a fresh token and Last-Event-ID: nothing is lost. Over HTTP/1 the
// stream owns its connection, over HTTP/2 it writes through the
// ResponseWriter: both end alike.
func TestAnEventStreamEndsWithAnUnauthenticatedErrorEventWhenItsTokenExpires(t *testing.T) {
	t.Parallel()
	ctx, f := startedFixture(t)
	h2, h2base := f.http2Events(t)
	for _, tt := range []struct {
		name string
		hc   *http.Client
		base string
	}{
		{"HTTP/1", http.DefaultClient, f.srv.URL},
		{"HTTP/2", h2, h2base},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conv, id := aliceConv(t)
			u := tt.base + "/v1/conversations/" + conv + "/events"
			s := mustOpenSSEWith(ctx, t, tt.hc, u, shortToken(t, "alice", 2*time.Second), nil).subscribed()

			// A request streams past the token's expiry: one event every
			// 20 ms until the stream has ended.
			stop, produced := make(chan struct{}), make(chan int, 1)
			go func() {
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				n := 0
				defer func() { produced <- n }()
				for {
					select {
					case <-stop:
						return
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					f.produce(ctx, id, "r", n+1, n+1)
					n++
				}
			}()
			var got []frame
			var end sseMessage
			for {
				m := s.next()
				if m.id == "" {
					end = m
					break
				}
				got = append(got, m.fr)
			}
			s.ended()
			close(stop)
			total := <-produced
			if end.event != "error" || end.fr.Code != "unauthenticated" || end.fr.Message != "token expired: reconnect with a fresh token and Last-Event-ID" {
				t.Fatalf("the stream ended with %q %s, want the unauthenticated error event of an expired token", end.event, end.data)
			}
			if len(got) == 0 || len(got) > total {
				t.Fatalf("%d events before the expiry of %d produced: the stream must have streamed", len(got), total)
			}
			checkSeqs(t, got, "r", 1, len(got))

			// The rest comes with a fresh token, from the last id.
			again := mustOpenSSEWith(ctx, t, tt.hc, u, token(t, auth.DefaultTenant, "alice"), http.Header{"Last-Event-Id": {got[len(got)-1].Cursor}}).subscribed()
			checkSeqs(t, again.events(total-len(got)), "r", len(got)+1, total)
			t.Logf("%d events before the expiry, %d more after the resume", len(got), total-len(got))
		})
	}
}

// RFC 6455 §8.1: a text frame that is not valid UTF-8 fails the connection
// with 1007.
func TestInvalidUTF8InATextFrameClosesWith1007(t *testing.T) {
	t.Parallel()
	ctx, f := startedFixture(t)
	c := f.dial(ctx, token(t, auth.DefaultTenant, "alice"))
	c.ping(ctx)
	c.send("{\"op\":\"subscribe\",\"conversation\":\"c\xff1\"}")
	if code := c.closeCode(ctx); code != websocket.CloseInvalidFramePayloadData {
		t.Fatalf("close code %d, want 1007", code)
	}
}
