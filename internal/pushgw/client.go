package pushgw

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/turnpike-dev/turnpike/internal/auth"
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
// writer only through out.
//
// An idle client holds little besides its two goroutines: its queue, its
// subscriptions map and its logger are made when first needed.
type client struct {
	gw        *Gateway
	hub       *hub
	conn      *websocket.Conn
	principal auth.Principal
	expires   time.Time // the token's expiry: the connection closes then
	user      string    // tenant/user: the key of the per-user rate limits
	metrics   *metrics

	out        outbox        // bounded outbound queue
	done       chan struct{} // closed by fail: the client is closing
	readerDone chan struct{} // closed when read returns
	closeOnce  sync.Once
	closeCode  int    // written once before done is closed; 0: send no close frame
	closeText  string // idem

	mu sync.Mutex
	// Guarded by mu.
	closed  bool                     // teardown began; no new replays
	subs    map[string]*subscription // by conversation; nil until the first
	replays sync.WaitGroup           // Add only under mu while !closed
}

func newClient(gw *Gateway, h *hub, conn *websocket.Conn, tok auth.Token, user string) *client {
	return &client{
		gw:         gw,
		hub:        h,
		conn:       conn,
		principal:  tok.Principal,
		expires:    tok.Expires,
		user:       user,
		metrics:    gw.metrics,
		out:        outbox{maxFrames: gw.cfg.QueueSize, maxBytes: gw.cfg.QueueBytes, wake: make(chan struct{}, 1)},
		done:       make(chan struct{}),
		readerDone: make(chan struct{}),
	}
}

// logger returns the client's logger, made on demand: most clients never log.
func (c *client) logger() *slog.Logger {
	return c.gw.log.With("tenant", c.principal.Tenant, "user", c.principal.User, "remote", c.conn.RemoteAddr().String())
}

// fail starts closing the client with code (0: no close frame, the
// connection is gone or the peer closed it). Only the first call counts; it
// reports whether it was the first. It never blocks.
func (c *client) fail(code int, text string) bool {
	first := false
	c.closeOnce.Do(func() {
		c.closeCode, c.closeText = code, text
		close(c.done)
		first = true
	})
	return first
}

// shed closes a client too slow for its traffic with 4008.
func (c *client) shed(text string) {
	if c.fail(CloseSlowConsumer, text) {
		c.metrics.slowDisconnects.Inc()
	}
}

// deliver implements sink: it queues frame without blocking, or sheds the
// client when its queue is full (in frames or bytes).
func (c *client) deliver(frame []byte) bool {
	select {
	case <-c.done:
		return false
	default:
	}
	if c.out.tryPush(frame) {
		return true
	}
	c.shed("queue full")
	c.metrics.framesDropped.Inc()
	return false
}

// overflow implements sink.
func (c *client) overflow() { c.shed("replay buffer full") }

// send queues frame, waiting for room: replies and replays, which may wait
// for a client (unlike the live fan-out). It reports false when ctx ended or
// the client is closing.
func (c *client) send(ctx context.Context, frame []byte) bool {
	return c.out.push(ctx, c.done, frame)
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
	expiry := time.NewTimer(time.Until(c.expires))
	defer expiry.Stop()
	for {
		select {
		case <-ctx.Done():
			c.fail(websocket.CloseGoingAway, "server shutting down")
			return
		case <-expiry.C:
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
		f, ok := c.out.pop()
		if !ok {
			break
		}
		select {
		case <-ctx.Done():
			c.fail(websocket.CloseGoingAway, "server shutting down")
		default:
		}
		select {
		case <-c.done: // closed while this frame waited: drop it too
			c.out.sent(len(f))
			c.metrics.framesDropped.Inc()
			if batching {
				_ = wire.end()
			}
			return false
		default:
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
	}
	if batching {
		if err := wire.end(); err != nil {
			c.fail(0, fmt.Sprintf("write: %v", err))
			return false
		}
	}
	return true
}

// teardown ends every subscription and replay, sends the close frame (with
// a deadline), waits a moment for the peer's answer, and closes the socket.
func (c *client) teardown() {
	c.mu.Lock()
	c.closed = true
	subs := c.subs
	c.subs = nil
	c.mu.Unlock()
	for _, sub := range subs {
		c.hub.remove(sub)
		if sub.cancel != nil {
			sub.cancel()
		}
	}
	c.replays.Wait()
	if n, _ := c.out.size(); n > 0 {
		c.metrics.framesDropped.Add(float64(n))
	}
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
	level := slog.LevelDebug
	if c.closeCode == CloseSlowConsumer {
		level = slog.LevelInfo
	}
	if c.gw.log.Enabled(context.Background(), level) {
		c.logger().Log(context.Background(), level, "client closed", "code", c.closeCode, "reason", c.closeText)
	}
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

// frameError is an error for the client's eyes with its error frame code.
type frameError struct {
	code string
	msg  string
}

func (e *frameError) Error() string { return e.msg }

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
		err = c.subscribe(ctx, req)
	case opUnsubscribe:
		err = c.unsubscribe(req.Conversation)
	}
	if err != nil {
		code := codeInvalidArgument
		if fe, ok := err.(*frameError); ok {
			code = fe.code
		}
		c.reply(errorFrame(code, err.Error()))
	}
}

// subscribe registers a subscription of the principal's identity for
// req.Conversation and, with since, starts its replay. The error is for the
// client: a *frameError, or invalid_argument.
func (c *client) subscribe(ctx context.Context, req request) error {
	sn, err := parseSince(req)
	if err != nil {
		return err
	}
	key := c.principal.Identity(req.Conversation).Key()
	sub := &subscription{sink: c, key: key, conversation: req.Conversation, partition: c.hub.partitionOf(key), since: sn}
	if sn.kind == sinceAfter {
		if sn.partition != sub.partition {
			return errors.New("since: cursor is not from this conversation")
		}
		if err := c.awaitCursor(ctx, sn); err != nil {
			return err
		}
	}
	rctx := ctx
	if sn.kind != sinceLive {
		var cancel context.CancelFunc
		rctx, cancel = context.WithCancel(ctx)
		sub.cancel, sub.stopped = cancel, make(chan struct{})
	}
	if err := c.add(sub); err != nil {
		c.abandon(sub)
		return err
	}
	if err := c.hub.register(sub, subscribedFrame(req.Conversation)); err != nil {
		c.forget(sub)
		c.abandon(sub)
		return err
	}
	if sn.kind == sinceLive {
		return nil
	}
	c.mu.Lock()
	if c.closed { // teardown has removed sub already
		c.mu.Unlock()
		c.abandon(sub)
		return nil
	}
	c.replays.Add(1)
	c.mu.Unlock()
	go c.replay(rctx, sub) // owned: teardown waits on c.replays
	return nil
}

// awaitCursor returns once this gateway has dispatched the cursor's record.
// A cursor past the end of its partition never will be: invalid_argument at
// once. Otherwise the cursor comes from a replica further ahead, and this
// one gets CursorWait to catch up before the subscribe fails with
// unavailable (the client retries, here or elsewhere).
func (c *client) awaitCursor(ctx context.Context, sn since) error {
	if c.hub.dispatched(sn.partition, sn.offset) {
		return nil
	}
	wait := c.gw.cfg.CursorWait
	kctx, cancel := context.WithTimeout(ctx, wait)
	end, err := c.gw.endOffset(kctx, sn.partition)
	cancel()
	if err == nil && sn.offset >= end {
		return errCursorAhead
	}
	switch err := c.hub.awaitDispatched(ctx, c.done, sn.partition, sn.offset, wait); {
	case err == nil:
		return nil
	case errors.Is(err, errCursorAhead):
		return &frameError{codeUnavailable, "since: this gateway has not caught up with the cursor yet; subscribe again"}
	default:
		return &frameError{codeUnavailable, "connection is closing"}
	}
}

// add records sub on the connection, within MaxSubscriptions.
func (c *client) add(sub *subscription) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return errors.New("connection is closing")
	case c.subs[sub.conversation] != nil:
		return fmt.Errorf("already subscribed to %q", sub.conversation)
	case len(c.subs) >= c.gw.cfg.MaxSubscriptions:
		return fmt.Errorf("too many subscriptions: at most %d per connection", c.gw.cfg.MaxSubscriptions)
	}
	if c.subs == nil {
		c.subs = make(map[string]*subscription)
	}
	c.subs[sub.conversation] = sub
	return nil
}

// forget drops sub from the connection's subscriptions (if it is still
// there) and from the hub.
func (c *client) forget(sub *subscription) {
	c.mu.Lock()
	if c.subs[sub.conversation] == sub {
		delete(c.subs, sub.conversation)
	}
	c.mu.Unlock()
	c.hub.remove(sub)
}

// abandon releases a subscription whose replay never started.
func (c *client) abandon(sub *subscription) {
	if sub.cancel != nil {
		sub.cancel()
		close(sub.stopped)
	}
}

// unsubscribe ends the subscription to conversation. When it returns, no
// further frame of that subscription can be queued, so a new subscription
// to the same conversation starts clean.
func (c *client) unsubscribe(conversation string) error {
	c.mu.Lock()
	sub := c.subs[conversation]
	delete(c.subs, conversation)
	c.mu.Unlock()
	if sub == nil {
		return fmt.Errorf("not subscribed to %q", conversation)
	}
	c.hub.remove(sub)
	if sub.cancel != nil {
		sub.cancel()
		<-sub.stopped
	}
	return nil
}

// replay runs the replay of sub and, on failure, ends the subscription with
// an error frame.
func (c *client) replay(ctx context.Context, sub *subscription) {
	defer c.replays.Done()
	defer close(sub.stopped)
	defer sub.cancel()
	err := c.gw.replay(ctx, c, sub)
	if err == nil || ctx.Err() != nil {
		return
	}
	select {
	case <-c.done:
		return
	default:
	}
	c.forget(sub)
	code, msg := codeUnavailable, "replay failed; subscribe again"
	if errors.Is(err, errCursorExpired) {
		code, msg = codeCursorExpired, "since: cursor is older than the retained stream"
	} else {
		c.logger().Warn("replay failed", "conversation", sub.conversation, "err", err)
	}
	c.send(ctx, errorFrame(code, msg))
}
