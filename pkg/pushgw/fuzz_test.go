package pushgw

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/auth"
)

// FuzzGatewayFrame sends arbitrary text frames to a running gateway over a
// real WebSocket, each on a connection of its own and each valid one
// followed by a ping. A frame that is not UTF-8 closes the connection with 1007 and nothing else; any other frame is answered
// only with well-formed JSON frames (an error, a subscribed) and leaves the
// connection open, so the ping's pong follows.
func FuzzGatewayFrame(f *testing.F) {
	for _, seed := range []string{
		`{"op":"subscribe","conversation":"c1"}`,
		`{"op":"subscribe","conversation":"c2","since":"earliest"}`,
		`{"op":"subscribe","conversation":"c3","since":"1-0-5"}`,
		`{"op":"unsubscribe","conversation":"c1"}`,
		`{"op":"ping","x":1}`,
		"{\"op\":\"subscribe\",\"conversation\":\"c\xff\"}",
		`{"op":"subscribe","conversation":"c\ud800"}`,
		``,
	} {
		f.Add([]byte(seed))
	}
	ctx := testenv.Context(f, 60*time.Second)
	fx := newFixture(f, ctx)
	fx.start(ctx, func(c *Config) { c.ConnectPerMinute, c.SubscribePerMinute, c.MaxSubscriptions = -1, -1, 1<<20 }, nil)
	tok := token(f, auth.DefaultTenant, "fuzz")
	f.Fuzz(func(t *testing.T, data []byte) {
		// A connection of its own per input: a subscribe's replay may
		// answer after the pong, and an answer left unread must not be
		// taken for the next input's (nor survive into the minimizer's
		// runs of a failing input).
		conn, _, err := websocket.DefaultDialer.DialContext(ctx, fx.url, http.Header{"Authorization": {"Bearer " + tok}})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer conn.Close()
		c := &wsClient{conn: conn}
		c.t = t
		c.send(string(data))
		if utf8.Valid(data) {
			c.send(`{"op":"ping"}`) // not after a frame that fails the connection
		}
		for {
			_ = c.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, b, err := c.conn.ReadMessage()
			if err != nil {
				var ce *websocket.CloseError
				if errors.As(err, &ce) && ce.Code == websocket.CloseInvalidFramePayloadData && !utf8.Valid(data) {
					return
				}
				t.Fatalf("frame %q: the connection ended with %v", data, err)
			}
			if !utf8.Valid(data) {
				t.Fatalf("frame %q is not UTF-8, yet the gateway answered %q", data, b)
			}
			var fr frame
			if err := json.Unmarshal(b, &fr); err != nil {
				t.Fatalf("frame %q was answered with %q, not JSON", data, b)
			}
			switch fr.Type {
			case "pong":
				return
			case "error", "subscribed":
			default:
				t.Fatalf("frame %q was answered with %q", data, b)
			}
		}
	})
}
