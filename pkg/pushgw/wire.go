package pushgw

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"time"
)

// batchBytes is the size of the buffer a client's writer coalesces frames
// in. A frame that does not fit goes out on its own.
const batchBytes = 32 << 10

// wire is the net.Conn under a client's websocket.Conn. Normally every
// write goes straight to the socket. While the client's writer holds a
// batch (it found more frames queued behind the one it is writing), writes
// collect in a buffer and go out together, in one system call, when the
// batch ends or the buffer is full. A client that has fallen behind thus
// costs fewer system calls the further behind it is, and an idle one holds
// no buffer.
//
// Its methods are safe for concurrent use: besides the writer, gorilla
// writes pongs and close frames from the reader goroutine (gorilla
// serialises its own writes; mu guards the buffer).
type wire struct {
	net.Conn
	pool    *sync.Pool // of *[]byte with cap batchBytes
	timeout time.Duration

	mu sync.Mutex
	// Guarded by mu.
	buf *[]byte // non-nil while a batch is held
}

// Write implements net.Conn.
func (w *wire) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf == nil {
		return w.Conn.Write(p)
	}
	b := *w.buf
	if len(b)+len(p) > cap(b) {
		if err := w.flushLocked(); err != nil {
			return 0, err
		}
		if len(p) > cap(b) {
			return w.Conn.Write(p)
		}
		b = *w.buf
	}
	*w.buf = append(b, p...)
	return len(p), nil
}

// setWriteDeadline sets the socket's write deadline (for an event stream's
// writes; a WebSocket sets its own through its Conn).
func (w *wire) setWriteDeadline(t time.Time) { _ = w.Conn.SetWriteDeadline(t) }

// begin starts a batch.
func (w *wire) begin() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf == nil {
		w.buf = w.pool.Get().(*[]byte)
	}
}

// end sends what the batch holds and returns its buffer to the pool.
func (w *wire) end() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf == nil {
		return nil
	}
	err := w.flushLocked()
	w.pool.Put(w.buf)
	w.buf = nil
	return err
}

// flushLocked writes the buffer out, with a deadline of its own. Called
// with mu held while batching.
func (w *wire) flushLocked() error {
	b := *w.buf
	*w.buf = b[:0]
	if len(b) == 0 {
		return nil
	}
	_ = w.Conn.SetWriteDeadline(time.Now().Add(w.timeout))
	_, err := w.Conn.Write(b)
	return err
}

// wireHijacker hands gorilla's Upgrade a wire instead of the raw
// connection.
type wireHijacker struct {
	http.ResponseWriter
	pool    *sync.Pool
	timeout time.Duration
}

// Hijack implements http.Hijacker.
func (h wireHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	return &wire{Conn: conn, pool: h.pool, timeout: h.timeout}, brw, nil
}
