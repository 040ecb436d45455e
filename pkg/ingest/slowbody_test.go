package ingest

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/server"
)

// Served as the services serve it: a POST with a bad token is answered 401
// before its (unfinished) body, and one with a good token whose body never
// completes gets 408 once the read timeout passes; either way no record.
func TestSlowBodiesAreCutOffAndABadTokenIsAnsweredBeforeTheBody(t *testing.T) {
	t.Parallel()
	s := newTestService(t, Config{}, nil, nil, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(s.ctx)
	done := make(chan error, 1)
	go func() {
		done <- server.ServeTimeouts(ctx, ln, s.Handler(), time.Second, server.Timeouts{Read: 500 * time.Millisecond})
	}()
	t.Cleanup(func() { stop(); <-done })

	head := "POST /v1/conversations/c1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
	for _, tt := range []struct {
		name, auth string
		status     int
		code       string
	}{
		{"A bad token is answered at once, however long the body takes.", "Bearer nope", http.StatusUnauthorized, server.CodeUnauthenticated},
		{"A good token with a body that never completes gets 408.", "Bearer " + token(t, "acme", "alice"), http.StatusRequestTimeout, server.CodeRequestTimeout},
	} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // far beyond both answers
		if _, err := c.Write([]byte(head + "Authorization: " + tt.auth + "\r\n\r\n{\"content\":")); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if res.StatusCode != tt.status || !res.Close {
			t.Errorf("%s: status %d, close %v; want %d and the connection closed", tt.name, res.StatusCode, res.Close, tt.status)
		}
		b, _ := io.ReadAll(res.Body)
		if !strings.Contains(string(b), `"code":"`+tt.code+`"`) {
			t.Errorf("%s: body %s, want code %s", tt.name, b, tt.code)
		}
		res.Body.Close()
		c.Close()
	}
	if n := len(s.producer.all()); n != 0 {
		t.Fatalf("%d records produced", n)
	}
}
