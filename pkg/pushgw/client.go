package pushgw

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/turnpike-dev/turnpike/pkg/auth"
)

// Close codes sent to clients besides the standard ones.
const (
	// CloseSlowConsumer closes a client whose queue (or a replay buffer)
	// overflowed.
	CloseSlowConsumer = 4008
	// CloseTokenExpired closes a client when the token it connected with
	// expires: it reconnects with a fresh token and resumes from its
	// cursor.
	CloseTokenExpired = 4401
	// MaxFrameBytes is the largest client frame; a bigger one closes the
	// connection with 1009.
	MaxFrameBytes = 64 << 10
)

// closeLinger bounds the wait for the peer's answer to a close frame before
// the TCP connection is closed.
const closeLinger = time.Second

// client is one WebSocket connection. It owns two goroutines: serve (the
// writer, which also tears the connection down) and read. Frames reach the
// writer only through the session's queue.
//
// An idle client holds little besides its two goroutines (see session).
type client struct {
	session
	conn       *websocket.Conn
	readerDone chan struct{} // closed when read returns
}

func newClient(gw *gateway, h *hub, conn *websocket.Conn, tok auth.Token, user string) *client {
	c := &client{conn: conn, readerDone: make(chan struct{})}
	c.init(gw, h, tok, user, conn.RemoteAddr().String())
	c.writeLag = gw.metrics.clientWriteLag.WithLabelValues(transportWebSocket)
	return c
}

// serve runs the connection until it closes: it starts the reader, writes
// until the client fails or ctx ends (then with 1001), and tears down.
func (c *client) serve(ctx context.Context) {
	c.metrics.connections.Inc()
	defer c.metrics.connections.Dec()
	go c.read(ctx) // owned: teardown waits for readerDone
	c.write(ctx)
	c.teardown()
}

// write is the writer loop: queued frames with a deadline each, and pings.
// When the token expires it closes the client with CloseTokenExpired.
func (c *client) write(ctx context.Context) {
	ping := time.NewTicker(c.gw.cfg.PingInterval)
	defer ping.Stop()
	expiry := c.gw.expiry(c.expires)
	defer expiry.stop()
	for {
		select {
		case <-ctx.Done():
			c.fail(websocket.CloseGoingAway, "server shutting down")
			return
		case <-expiry.expired:
			c.fail(CloseTokenExpired, "token expired")
			return
		case <-c.done:
			return
		case <-c.out.wake:
			if !c.flush(ctx) {
				return
			}
		case <-ping.C:
			if err := c.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.gw.cfg.WriteTimeout)); err != nil {
				c.fail(0, fmt.Sprintf("ping: %v", err))
				return
			}
		}
	}
}

// flush writes the queued frames until the queue is empty. When frames
// wait behind the one being written, it batches them (see wire): one
// system call for many frames. It returns false when the client is closing
// (what is left in the queue is dropped).
func (c *client) flush(ctx context.Context) bool {
	wire, _ := c.conn.NetConn().(*wire)
	batching := false
	for {
		f, at, ok := c.out.popAt()
		if !ok {
			break
		}
		select {
		case <-ctx.Done():
			c.fail(websocket.CloseGoingAway, "server shutting down")
		default:
		}
		if c.dropIfClosed(f) {
			if batching {
				_ = wire.end()
			}
			return false
		}
		if !batching && wire != nil && c.out.waiting() > 0 {
			wire.begin()
			batching = true
		}
		_ = c.conn.SetWriteDeadline(time.Now().Add(c.gw.cfg.WriteTimeout))
		err := c.conn.WriteMessage(websocket.TextMessage, f)
		c.out.sent(len(f))
		if err != nil {
			c.fail(0, fmt.Sprintf("write: %v", err))
			if batching {
				_ = wire.end()
			}
			return false
		}
		c.wrote(at)
		if !batching {
			c.onSocket()
		}
	}
	if batching {
		if err := wire.end(); err != nil {
			c.fail(0, fmt.Sprintf("write: %v", err))
			return false
		}
		c.onSocket()
	}
	return true
}

// teardown ends every subscription and replay, sends the close frame (with
// a deadline), waits a moment for the peer's answer, and closes the socket.
func (c *client) teardown() {
	c.endSubscriptions()
	if c.closeCode != 0 {
		// The library may have sent this close frame itself (1009): then
		// this write fails, and the wait still lets the reader drain.
		msg := websocket.FormatCloseMessage(c.closeCode, c.closeText)
		_ = c.conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(c.gw.cfg.WriteTimeout))
		t := time.NewTimer(min(closeLinger, c.gw.cfg.WriteTimeout))
		select {
		case <-c.readerDone:
		case <-t.C:
		}
		t.Stop()
	}
	_ = c.conn.Close()
	<-c.readerDone
	c.logClosed()
}

// read is the reader loop: one client frame at a time, each answered
// through the queue.
func (c *client) read(ctx context.Context) {
	defer close(c.readerDone)
	c.conn.SetReadLimit(MaxFrameBytes)
	alive := func() { _ = c.conn.SetReadDeadline(time.Now().Add(c.gw.cfg.PongWait)) }
	alive()
	c.conn.SetPongHandler(func(string) error { alive(); return nil })
	for {
		typ, data, err := c.conn.ReadMessage()
		if err != nil {
			c.readFailed(err)
			return
		}
		alive()
		if typ != websocket.TextMessage {
			c.reply(errorFrame(codeInvalidArgument, "frames must be text"))
			continue
		}
		if !utf8.Valid(data) {
			// RFC 6455 §8.1: a text frame that is not UTF-8 fails the
			// connection with 1007.
			c.fail(websocket.CloseInvalidFramePayloadData, "text frame is not valid UTF-8")
			c.drain()
			return
		}
		c.handle(ctx, data)
	}
}

// readFailed closes the client after a read error.
func (c *client) readFailed(err error) {
	var ce *websocket.CloseError
	switch {
	case errors.Is(err, websocket.ErrReadLimit):
		// The library has sent the 1009 close frame already. Drain what the
		// peer is still sending, so closing the socket does not reset the
		// connection before the peer has read that frame.
		c.fail(websocket.CloseMessageTooBig, "frame over 64 KiB")
		c.drain()
	case errors.As(err, &ce):
		c.fail(0, fmt.Sprintf("peer closed: %d %s", ce.Code, ce.Text))
	default:
		c.fail(0, fmt.Sprintf("read: %v", err))
	}
}

// drain discards what the peer still sends, for closeLinger at most, so
// that closing the socket does not reset the connection before the peer
// has read the close frame.
func (c *client) drain() {
	nc := c.conn.NetConn()
	_ = nc.SetReadDeadline(time.Now().Add(closeLinger))
	_, _ = io.Copy(io.Discard, nc)
}

// reply queues a frame answering the client, waiting for room.
func (c *client) reply(frame []byte) { c.send(context.Background(), frame) }

// handle runs one client operation.
func (c *client) handle(ctx context.Context, data []byte) {
	req, err := decodeRequest(data)
	if err != nil {
		c.reply(errorFrame(codeInvalidArgument, err.Error()))
		return
	}
	switch req.Op {
	case opPing:
		c.reply([]byte(pongFrame))
	case opSubscribe:
		if ok, wait := c.gw.subscribeLimit.allow(c.user); !ok {
			c.metrics.rejected.WithLabelValues(rejectSubscribeRate).Inc()
			err = &frameError{codeRateLimited, fmt.Sprintf("too many subscribes: retry in %v", wait.Round(time.Millisecond))}
			break
		}
		var sn since
		if sn, err = parseSince(req); err == nil {
			err = c.subscribe(ctx, req.Conversation, sn)
		}
	case opUnsubscribe:
		err = c.unsubscribe(req.Conversation)
	}
	if err != nil {
		code := codeInvalidArgument
		if fe, ok := err.(*frameError); ok {
			code = fe.code
		}
		c.reply(conversationErrorFrame(req.Conversation, code, err.Error()))
	}
}
