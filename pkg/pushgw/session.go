package pushgw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/auth"
)

// session is the transport-independent half of one client connection,
// shared by the WebSocket client (client.go) and the Server-Sent Events
// stream (sse.go): the outbound queue, the close state, the subscriptions
// and their replays. It is the hub's sink for its subscriptions. The
// transport owns the goroutine that writes what the queue holds, and calls
// endSubscriptions when it tears down.
//
// An idle session holds little: its subscriptions map and its logger are
// made when first needed, and its queue keeps no backing array once empty.
type session struct {
	gw        *gateway
	hub       *hub
	principal auth.Principal
	expires   time.Time // the token's expiry: the connection ends then
	user      string    // tenant/user: the key of the per-user rate limits
	remote    string    // the peer's address, for logs
	metrics   *metrics

	out       outbox        // bounded outbound queue
	done      chan struct{} // closed by fail: the session is closing
	closeOnce sync.Once
	closeCode int    // written once before done is closed; 0: send no close frame
	closeText string // idem

	// The writer's: when the live frames written since the last write to
	// the socket were dispatched, and the transport's write lag histogram.
	writes   []time.Time
	writeLag prometheus.Observer

	mu sync.Mutex
	// Guarded by mu.
	closed  bool                     // teardown began; no new replays
	subs    map[string]*subscription // by conversation; nil until the first
	replays sync.WaitGroup           // Add only under mu while !closed
}

func (s *session) init(gw *gateway, h *hub, tok auth.Token, user, remote string) {
	s.gw, s.hub, s.principal, s.expires, s.user, s.remote, s.metrics = gw, h, tok.Principal, tok.Expires, user, remote, gw.metrics
	s.out = outbox{maxFrames: gw.cfg.QueueSize, maxBytes: gw.cfg.QueueBytes, wake: make(chan struct{}, 1)}
	s.done = make(chan struct{})
}

// wrote notes a frame written to the transport, dispatched live at at
// (zero: a reply or a replay, not timed).
func (s *session) wrote(at time.Time) {
	if !at.IsZero() {
		s.writes = append(s.writes, at)
	}
}

// onSocket observes the write lag of the frames noted since the last call:
// they are on the socket (or flushed to the client) now.
func (s *session) onSocket() {
	if len(s.writes) == 0 || s.writeLag == nil {
		return
	}
	now := time.Now()
	for _, at := range s.writes {
		s.writeLag.Observe(max(0, now.Sub(at).Seconds()))
	}
	if cap(s.writes) > outboxKeep {
		s.writes = nil // as the queue, an idle session keeps no big array
	} else {
		s.writes = s.writes[:0]
	}
}

// logger returns the session's logger, made on demand: most sessions never log.
func (s *session) logger() *slog.Logger {
	return s.gw.log.With("tenant", s.principal.Tenant, "user", s.principal.User, "remote", s.remote)
}

// fail starts closing the session with code (0: no close frame, the
// connection is gone or the peer closed it). Only the first call counts; it
// reports whether it was the first. It never blocks.
func (s *session) fail(code int, text string) bool {
	first := false
	s.closeOnce.Do(func() {
		s.closeCode, s.closeText = code, text
		close(s.done)
		first = true
	})
	return first
}

// shed closes a session too slow for its traffic with 4008.
func (s *session) shed(text string) {
	if s.fail(CloseSlowConsumer, text) {
		s.metrics.slowDisconnects.Inc()
	}
}

// deliver implements sink: it queues frame without blocking, or sheds the
// session when its queue is full (in frames or bytes).
func (s *session) deliver(frame []byte, at time.Time) bool {
	select {
	case <-s.done:
		return false
	default:
	}
	if s.out.tryPushAt(frame, at) {
		return true
	}
	s.shed("queue full")
	s.metrics.framesDropped.Inc()
	return false
}

// overflow implements sink.
func (s *session) overflow() { s.shed("replay buffer full") }

// send queues frame, waiting for room: replies and replays, which may wait
// for a client (unlike the live fan-out). It reports false when ctx ended or
// the session is closing.
func (s *session) send(ctx context.Context, frame []byte) bool {
	return s.out.push(ctx, s.done, frame)
}

// dropIfClosed is for a transport's writer, with frame f just taken from
// the queue: when the session closed while f waited it counts f as sent
// and dropped, and reports true (the writer drops it too and stops).
func (s *session) dropIfClosed(f []byte) bool {
	select {
	case <-s.done:
		s.out.sent(len(f))
		s.metrics.framesDropped.Inc()
		return true
	default:
		return false
	}
}

// frameError is an error for the client's eyes with its error frame code.
type frameError struct {
	code string
	msg  string
}

func (e *frameError) Error() string { return e.msg }

// subscribe registers a subscription of the principal's identity for
// conversation from sn and, unless it is live, starts its replay. It holds
// the conversation's partition open (hub.acquire: the first subscriber of a
// partition opens its live reader) for as long as the subscription lives.
// The error is for the client: a *frameError, or invalid_argument.
func (s *session) subscribe(ctx context.Context, conversation string, sn since) error {
	key := s.principal.Identity(conversation).Key()
	sub := &subscription{sink: s, key: key, conversation: conversation, since: sn}
	sub.partition, sub.placedBy = s.hub.place(key)
	if sn.kind == sinceAfter && sn.partition != sub.partition {
		if !s.hub.formerHome(key, sn.partition) {
			return errors.New("since: cursor is not from this conversation")
		}
		// Partitions were added after the cursor's record: the rest of the
		// conversation's stream is the former home's records after the
		// cursor, then every retained record of its home (docs/api.md
		// "Cursors").
		prior, err := s.priorRange(ctx, key, sn)
		if err != nil {
			return err
		}
		sub.prior, sub.since = prior, since{kind: sinceAll}
		sn = sub.since
	}
	if err := s.hub.acquire(ctx, sub.partition); err != nil {
		if errors.Is(err, errStopped) {
			return &frameError{codeUnavailable, "connection is closing"}
		}
		s.logger().Warn("cannot open the live reader", "partition", sub.partition, "err", err)
		return &frameError{codeUnavailable, "cannot read the stream now; subscribe again"}
	}
	sub.held = true // released by the hub's remove, on every path below
	if sn.kind == sinceAfter {
		if err := s.awaitCursor(ctx, sn); err != nil {
			s.hub.remove(sub)
			return err
		}
	}
	rctx := ctx
	if sn.kind != sinceLive {
		var cancel context.CancelFunc
		rctx, cancel = context.WithCancel(ctx)
		sub.cancel, sub.stopped = cancel, make(chan struct{})
	}
	if err := s.add(sub); err != nil {
		s.hub.remove(sub)
		s.abandon(sub)
		return err
	}
	if err := s.hub.register(sub, subscribedFrame(conversation, sub.partition)); err != nil {
		s.forget(sub)
		s.abandon(sub)
		if errors.Is(err, errMoved) {
			return &frameError{codeUnavailable, "the stream topic's partitions changed; subscribe again"}
		}
		return err
	}
	if sn.kind == sinceLive {
		return nil
	}
	s.mu.Lock()
	if s.closed { // teardown has removed sub already
		s.mu.Unlock()
		s.abandon(sub)
		return nil
	}
	s.replays.Add(1)
	s.mu.Unlock()
	go s.replay(rctx, sub) // owned: endSubscriptions waits on s.replays
	return nil
}

// awaitCursor returns once this gateway has dispatched the cursor's record.
// A cursor past the end of its partition never will be: invalid_argument at
// once. Otherwise the cursor comes from a replica further ahead, and this
// one gets CursorWait to catch up before the subscribe fails with
// unavailable (the client retries, here or elsewhere).
func (s *session) awaitCursor(ctx context.Context, sn since) error {
	if s.hub.dispatched(sn.partition, sn.offset) {
		return nil
	}
	wait := s.gw.cfg.CursorWait
	kctx, cancel := context.WithTimeout(ctx, wait)
	end, err := s.gw.endOffset(kctx, sn.partition)
	cancel()
	if err == nil && sn.offset >= end {
		return errCursorAhead
	}
	switch err := s.hub.awaitDispatched(ctx, s.done, sn.partition, sn.offset, wait); {
	case err == nil:
		return nil
	case errors.Is(err, errCursorAhead):
		return &frameError{codeUnavailable, "since: this gateway has not caught up with the cursor yet; subscribe again"}
	default:
		return &frameError{codeUnavailable, "connection is closing"}
	}
}

// priorRange returns what is left after the cursor sn in its partition, a
// former home of key: [offset+1, the partition's end offset now). The
// cursor must name a record of key itself (a subscription only carries its
// own conversation's events, so a cursor it issued in a partition that is
// no longer its home names one); anything else is refused as a cursor of
// another partition. A cursor at or past the end was never issued
// (errCursorAhead). One whose record is no longer retained cannot be
// checked and is taken (the replay reads only key's records, and reports
// the cursor expired when the record after it is gone too, as for any
// cursor).
func (s *session) priorRange(ctx context.Context, key string, sn since) (*priorRange, error) {
	unavailable := func(err error) error {
		s.logger().Warn("cannot read a former home", "partition", sn.partition, "err", err)
		return &frameError{codeUnavailable, "cannot read the stream now; subscribe again"}
	}
	kctx, cancel := context.WithTimeout(ctx, s.gw.cfg.CursorWait)
	defer cancel()
	end, err := s.gw.endOffset(kctx, sn.partition)
	if err != nil {
		return nil, unavailable(err)
	}
	if sn.offset >= end {
		return nil, errCursorAhead
	}
	prior := &priorRange{partition: sn.partition, from: sn.offset + 1, end: end}
	first, err := s.gw.firstOffset(kctx, sn.partition)
	if err != nil {
		return nil, unavailable(err)
	}
	if sn.offset < first {
		return prior, nil
	}
	r, err := s.gw.newReader(sn.partition, replayMaxWait)
	if err != nil {
		return nil, unavailable(err)
	}
	defer r.Close()
	if err := r.SetOffset(sn.offset); err != nil {
		return nil, unavailable(err)
	}
	m, err := r.FetchMessage(kctx)
	switch {
	case err != nil:
		return nil, unavailable(err)
	case m.Offset == sn.offset && string(m.Key) != key:
		return nil, errors.New("since: cursor is not from this conversation")
	}
	return prior, nil
}

// moved ends sub, which grow found in a partition that is no longer its
// key's home, with an unavailable error frame queued after its last frame:
// the client subscribes again (with its last cursor: the resume reads the
// rest of the former home, then the new one).
func (s *session) moved(sub *subscription) {
	s.mu.Lock()
	mine := s.subs[sub.conversation] == sub
	if mine {
		delete(s.subs, sub.conversation)
	}
	s.mu.Unlock()
	s.hub.remove(sub)
	if !mine { // unsubscribed or torn down meanwhile
		return
	}
	if sub.cancel != nil {
		sub.cancel()
		<-sub.stopped
	}
	s.deliver(conversationErrorFrame(sub.conversation, codeUnavailable,
		"the stream topic's partitions changed; subscribe again from your last cursor"), time.Time{})
}

// add records sub on the session, within MaxSubscriptions.
func (s *session) add(sub *subscription) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return errors.New("connection is closing")
	case s.subs[sub.conversation] != nil:
		return fmt.Errorf("already subscribed to %q", sub.conversation)
	case len(s.subs) >= s.gw.cfg.MaxSubscriptions:
		return fmt.Errorf("too many subscriptions: at most %d per connection", s.gw.cfg.MaxSubscriptions)
	}
	if s.subs == nil {
		s.subs = make(map[string]*subscription)
	}
	s.subs[sub.conversation] = sub
	return nil
}

// forget drops sub from the session's subscriptions (if it is still
// there) and from the hub.
func (s *session) forget(sub *subscription) {
	s.mu.Lock()
	if s.subs[sub.conversation] == sub {
		delete(s.subs, sub.conversation)
	}
	s.mu.Unlock()
	s.hub.remove(sub)
}

// abandon releases a subscription whose replay never started.
func (s *session) abandon(sub *subscription) {
	if sub.cancel != nil {
		sub.cancel()
		close(sub.stopped)
	}
}

// unsubscribe ends the subscription to conversation. When it returns, no
// further frame of that subscription can be queued, so a new subscription
// to the same conversation starts clean.
func (s *session) unsubscribe(conversation string) error {
	s.mu.Lock()
	sub := s.subs[conversation]
	delete(s.subs, conversation)
	s.mu.Unlock()
	if sub == nil {
		return fmt.Errorf("not subscribed to %q", conversation)
	}
	s.hub.remove(sub)
	if sub.cancel != nil {
		sub.cancel()
		<-sub.stopped
	}
	return nil
}

// replay runs the replay of sub and, on failure, ends the subscription with
// an error frame.
func (s *session) replay(ctx context.Context, sub *subscription) {
	defer s.replays.Done()
	defer close(sub.stopped)
	defer sub.cancel()
	err := s.gw.replay(ctx, s, sub)
	if err == nil || ctx.Err() != nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	s.forget(sub)
	code, msg := codeUnavailable, "replay failed; subscribe again"
	if errors.Is(err, errCursorExpired) {
		code, msg = codeCursorExpired, "since: cursor is older than the retained stream"
	} else {
		s.logger().Warn("replay failed", "conversation", sub.conversation, "err", err)
	}
	s.send(ctx, conversationErrorFrame(sub.conversation, code, msg))
}

// endSubscriptions ends every subscription and replay of a session that is
// tearing down, and counts the frames its queue still held as dropped. No
// frame reaches the queue once it returns.
func (s *session) endSubscriptions() {
	s.mu.Lock()
	s.closed = true
	subs := s.subs
	s.subs = nil
	s.mu.Unlock()
	for _, sub := range subs {
		s.hub.remove(sub)
		if sub.cancel != nil {
			sub.cancel()
		}
	}
	s.replays.Wait()
	if n, _ := s.out.size(); n > 0 {
		s.metrics.framesDropped.Add(float64(n))
	}
}

// logClosed logs the end of the session: at info for a slow consumer, at
// debug otherwise.
func (s *session) logClosed() {
	level := slog.LevelDebug
	if s.closeCode == CloseSlowConsumer {
		level = slog.LevelInfo
	}
	if s.gw.log.Enabled(context.Background(), level) {
		s.logger().Log(context.Background(), level, "client closed", "code", s.closeCode, "reason", s.closeText)
	}
}

// errNotRunning answers a connection before Run has the stream topic's
// partitions, or while it shuts down.
var errNotRunning = errors.New("push gateway is not running")

// admit applies the rules every connection passes, whatever its transport:
// the origin policy (403), a valid bearer token in the Authorization header
// or ?access_token= (401), and the user's connect rate (429 with
// Retry-After). On refusal it has answered w and returns ok false.
func (g *gateway) admit(w http.ResponseWriter, r *http.Request) (tok auth.Token, user string, ok bool) {
	if tok, ok = g.authenticate(w, r); !ok {
		return tok, "", false
	}
	user = tok.Tenant + "/" + tok.User
	return tok, user, g.allowConnect(w, user)
}

// authenticate is admit's first two rules: the origin policy (403) and the
// bearer token (401).
func (g *gateway) authenticate(w http.ResponseWriter, r *http.Request) (auth.Token, bool) {
	if !g.originAllowed(w, r) {
		return auth.Token{}, false
	}
	tok, err := g.verifier.VerifyToken(auth.BearerToken(r, true))
	if err != nil {
		w.Header().Set("WWW-Authenticate", "Bearer")
		server.WriteError(w, http.StatusUnauthorized, server.CodeUnauthenticated, "missing, invalid or expired bearer token", 0)
		return tok, false
	}
	return tok, true
}

// allowConnect is admit's last rule: the user's connect rate (429 with
// Retry-After).
func (g *gateway) allowConnect(w http.ResponseWriter, user string) bool {
	if ok, wait := g.connectLimit.allow(user); !ok {
		g.metrics.rejected.WithLabelValues(rejectConnectRate).Inc()
		server.WriteError(w, http.StatusTooManyRequests, server.CodeRateLimited, "too many connections for this user; retry later", wait)
		return false
	}
	return true
}

// join returns the hub and Run's context for a new connection and counts
// it in g.clients (the caller calls g.clients.Done when it ends), or
// errNotRunning before Run is ready or while it shuts down.
func (g *gateway) join() (*hub, context.Context, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.hub == nil || g.closing {
		return nil, nil, errNotRunning
	}
	g.clients.Add(1)
	return g.hub, g.ctx, nil
}
