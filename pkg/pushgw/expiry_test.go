package pushgw

import (
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// A connection does not outlive its token: it streams while the token is
// valid and is closed with CloseTokenExpired when its exp passes on the
// gateway's clock (WithClock); the same token is then refused. The test
// steps the clock: nothing waits for the token's life to pass.
func TestAConnectionIsClosedWith4401WhenItsTokenExpires(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	clock := testenv.NewClock(time.Now().Truncate(time.Second)) // a whole second: the token's exp is exact
	f := newFixture(t, ctx)
	f.clock = clock
	f.start(ctx, nil, nil)
	tok := clockToken(t, clock, "alice", time.Hour)
	long := clockToken(t, clock, "alice", 2*time.Hour)
	c := f.dial(ctx, tok).subscribed(ctx, "c1", "")
	id := events.Identity{Tenant: auth.DefaultTenant, User: "alice", Conversation: "c1"}
	f.produce(ctx, id, "r1", 1, 3)
	checkSeqs(t, c.events(ctx, 3), "r1", 1, 3)
	clock.Advance(time.Hour - time.Millisecond)
	c.ping(ctx) // served until its exp
	clock.Advance(time.Millisecond)
	if code := c.closeCode(ctx); code != CloseTokenExpired {
		t.Fatalf("close code %d, want %d", code, CloseTokenExpired)
	}
	// The gateway's verifier reads the same clock: the token is refused.
	if conn, resp, err := websocket.DefaultDialer.DialContext(ctx, f.url, http.Header{"Authorization": {"Bearer " + tok}}); err == nil {
		conn.Close()
		t.Fatal("the expired token connected again")
	} else if resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("dial with the expired token: %v, want 401", err)
	}
	// A connection with a token still valid on the clock is served.
	f.dial(ctx, long).ping(ctx)
}

// clockToken is a token of user (default tenant) that expires ttl after
// clock's now.
func clockToken(t *testing.T, clock *testenv.Clock, user string, ttl time.Duration) string {
	t.Helper()
	tok, err := auth.Mint(testSecret, auth.DefaultTenant, user, ttl, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// An event stream does not outlive its token either: it delivers events,
// each once and in order, and when the token's exp passes on the
// gateway's clock it ends with one error event of code unauthenticated,
// and nothing after it. What it had not delivered yet comes on a stream
// opened with a fresh token and Last-Event-ID: nothing is lost. Over
// HTTP/1 the stream owns its connection, over HTTP/2 it writes through the
// ResponseWriter: both end alike. The test steps the clock, mid-stream.
func TestAnEventStreamEndsWithAnUnauthenticatedErrorEventWhenItsTokenExpires(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	clock := testenv.NewClock(time.Now().Truncate(time.Second))
	f := newFixture(t, ctx)
	f.clock = clock
	f.start(ctx, nil, nil)
	h2, h2base := f.http2Events(t)
	// One after the other: they step the same clock.
	for _, tt := range []struct {
		name string
		hc   *http.Client
		base string
	}{
		{"HTTP/1", http.DefaultClient, f.srv.URL},
		{"HTTP/2", h2, h2base},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conv, id := aliceConv(t)
			u := tt.base + "/v1/conversations/" + conv + "/events"
			s := mustOpenSSEWith(ctx, t, tt.hc, u, clockToken(t, clock, "alice", time.Hour), nil).subscribed()
			const total = 8
			f.produce(ctx, id, "r", 1, total)
			var got []frame
			for len(got) < 5 {
				m := s.next()
				if m.id == "" {
					t.Fatalf("the stream ended with %q %s before its token expired", m.event, m.data)
				}
				got = append(got, m.fr)
			}
			clock.Advance(time.Hour)
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
			if end.event != "error" || end.fr.Code != "unauthenticated" || end.fr.Message != "token expired: reconnect with a fresh token and Last-Event-ID" {
				t.Fatalf("the stream ended with %q %s, want the unauthenticated error event of an expired token", end.event, end.data)
			}
			checkSeqs(t, got, "r", 1, len(got))

			// The rest comes with a fresh token, from the last id.
			again := mustOpenSSEWith(ctx, t, tt.hc, u, clockToken(t, clock, "alice", time.Hour), http.Header{"Last-Event-Id": {got[len(got)-1].Cursor}}).subscribed()
			checkSeqs(t, again.events(total-len(got)), "r", len(got)+1, total)
			f.produce(ctx, id, "r", total+1, total+2)
			checkSeqs(t, again.events(2), "r", total+1, total+2)
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
