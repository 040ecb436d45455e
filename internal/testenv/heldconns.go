package testenv

import (
	"context"
	"net"
	"os"
	"sync"
	"time"
)

// HeldConns dials broker connections whose next read, once armed, is held
// until released: a broker's answer that reaches the reader late. It
// counts its dials. Safe for concurrent use.
//
// How late the answer is, is given, not waited for: the held read, once
// released, goes on as if its answer came that long after the read began.
// A connection's read deadline is applied to that instant, as the network
// would apply it, so a test neither sleeps past a deadline nor depends on
// how fast the machine is meanwhile.
type HeldConns struct {
	mu sync.Mutex
	// Guarded by mu.
	dials   int
	armed   bool
	late    time.Duration
	held    chan struct{}
	release chan struct{}
}

// Arm holds the next read of any of the connections: held is closed when
// a read is held, and closing release lets it go on as a read whose answer
// came late after it began. Past the connection's read deadline (the last
// one set through SetReadDeadline or SetDeadline), the read fails as a
// net.Conn's read past its deadline does (os.ErrDeadlineExceeded) and
// reads nothing; otherwise it reads.
func (h *HeldConns) Arm(late time.Duration) (held <-chan struct{}, release chan<- struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.late, h.held, h.release = true, late, make(chan struct{}), make(chan struct{})
	return h.held, h.release
}

// Dials is how many connections Dial has opened.
func (h *HeldConns) Dials() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dials
}

// Dial opens a connection (a kafka.Dialer's DialFunc).
func (h *HeldConns) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.dials++
	h.mu.Unlock()
	return &heldConn{Conn: c, h: h}, nil
}

type heldConn struct {
	net.Conn
	h *HeldConns

	mu       sync.Mutex // guards deadline
	deadline time.Time  // the read deadline last set; zero: none
}

func (c *heldConn) Read(b []byte) (int, error) {
	began := time.Now()
	c.h.mu.Lock()
	armed, late, held, release := c.h.armed, c.h.late, c.h.held, c.h.release
	c.h.armed = false
	c.h.mu.Unlock()
	if armed {
		close(held)
		<-release
		c.mu.Lock()
		deadline := c.deadline
		c.mu.Unlock()
		if !deadline.IsZero() && began.Add(late).After(deadline) {
			return 0, &net.OpError{Op: "read", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.ErrDeadlineExceeded}
		}
	}
	return c.Conn.Read(b)
}

func (c *heldConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *heldConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}
