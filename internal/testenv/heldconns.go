package testenv

import (
	"context"
	"net"
	"sync"
)

// HeldConns dials broker connections whose next read, once armed, is held
// until released: a broker's answer that reaches the reader late. It
// counts its dials. Safe for concurrent use.
type HeldConns struct {
	mu sync.Mutex
	// Guarded by mu.
	dials   int
	armed   bool
	held    chan struct{}
	release chan struct{}
}

// Arm holds the next read of any of the connections: held is closed when
// a read is held, and closing release lets it go on.
func (h *HeldConns) Arm() (held <-chan struct{}, release chan<- struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.held, h.release = true, make(chan struct{}), make(chan struct{})
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
}

func (c *heldConn) Read(b []byte) (int, error) {
	c.h.mu.Lock()
	armed, held, release := c.h.armed, c.h.held, c.h.release
	c.h.armed = false
	c.h.mu.Unlock()
	if armed {
		close(held)
		<-release
	}
	return c.Conn.Read(b)
}
