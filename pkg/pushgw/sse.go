package pushgw

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// EventsPath is the route of the Server-Sent Events endpoint, with its
// path value; mount ServeEvents on it.
const EventsPath = "/v1/conversations/{conversation}/events"

// The query parameters ServeEvents takes; any other is refused.
const (
	paramSince       = "since"
	paramFollow      = "follow"
	paramAccessToken = "access_token"
	paramShard       = "shard"
)

// ServeEvents serves GET /v1/conversations/{conversation}/events as a
// text/event-stream: every stream event of the conversation of the token's
// identity is one Server-Sent Event, with the event's cursor as id, its
// type as event and its WebSocket frame as data. It is the WebSocket
// subscription of one conversation over plain HTTP, through the same hub,
// ring and replay, so it resumes exactly as a subscribe with since does:
// from the Last-Event-ID header, else ?since=<cursor>|earliest, else live
// from now. ?follow=<request_id> keeps only that request's events and ends
// the stream after its run.completed (without a position it starts at
// earliest). Comments (": heartbeat") go out every SSEHeartbeat.
//
// Before the stream starts, as ServeHTTP: an origin not allowed is 403, a
// missing or bad token 401; then a request without a shard hint (?shard=,
// the home partition of the token's identity) is redirected 307 to the same
// URL with it, once: a request with a hint is never redirected
// (redirectToShard); then a user
// over the connect or subscribe rate is 429, and a bad conversation,
// position, follow or query parameter is 400. A
// gateway that is starting, stopping or behind the cursor answers 200 with
// one error event of code unavailable and ends the stream, so that an
// EventSource reconnects by itself (it gives up on any status but 200).
// Once the stream runs, an error event (cursor_expired, unavailable) ends
// it; so does the token's expiry, with an error event of code
// unauthenticated (the client reopens with a fresh token and Last-Event-ID
// and loses nothing: what was queued but not written comes then), a full
// queue (the client was too slow: it reconnects with Last-Event-ID and
// loses nothing) and the gateway's shutdown.
//
// OPTIONS answers a CORS preflight from an allowed origin.
func (g *gateway) ServeEvents(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	cors := origin != "" && g.origins.Allowed(r)
	if cors {
		w.Header().Set("Access-Control-Allow-Origin", origin)
		w.Header().Add("Vary", "Origin")
	}
	switch r.Method {
	case http.MethodGet:
	case http.MethodOptions:
		if cors {
			w.Header().Set("Access-Control-Allow-Methods", "GET")
			w.Header().Set("Access-Control-Allow-Headers", "Authorization, Last-Event-ID, Cache-Control")
			w.Header().Set("Access-Control-Max-Age", "600")
		}
		w.WriteHeader(http.StatusNoContent)
		return
	default:
		server.MethodNotAllowed("GET, OPTIONS").ServeHTTP(w, r)
		return
	}
	tok, ok := g.authenticate(w, r)
	if !ok {
		return
	}
	// Before the connect rate: a redirected request is not a connection.
	if g.redirectToShard(w, r, tok) {
		return
	}
	user := tok.Tenant + "/" + tok.User
	if !g.allowConnect(w, user) {
		return
	}
	conv, sn, follow, err := parseEventsRequest(r)
	if err != nil {
		server.WriteError(w, http.StatusBadRequest, server.CodeInvalidArgument, err.Error(), 0)
		return
	}
	if ok, wait := g.subscribeLimit.allow(user); !ok {
		g.metrics.rejected.WithLabelValues(rejectSubscribeRate).Inc()
		server.WriteError(w, http.StatusTooManyRequests, server.CodeRateLimited, "too many subscribes for this user; retry later", wait)
		return
	}
	h, runCtx, err := g.join()
	if err != nil {
		g.sseUnavailable(w, err.Error())
		return
	}
	st := &stream{follow: follow}
	st.init(g, h, tok, user, r.RemoteAddr)
	st.writeLag = g.metrics.clientWriteLag.WithLabelValues(transportSSE)
	// A server-wide read timeout would end the request's context (and so
	// the stream) while the client listens quietly.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	if err := st.subscribe(runCtx, conv, sn); err != nil {
		st.endSubscriptions()
		g.clients.Done()
		var fe *frameError
		switch {
		case errors.As(err, &fe):
			g.sseUnavailable(w, fe.msg)
		case errors.Is(err, errStopped):
			g.sseUnavailable(w, "push gateway is shutting down")
		default:
			server.WriteError(w, http.StatusBadRequest, server.CodeInvalidArgument, err.Error(), 0)
		}
		return
	}
	setStreamHeaders(w.Header())
	conn, _, err := rc.Hijack()
	if err != nil {
		// HTTP/2, or a ResponseWriter that does not hand its connection
		// over: stream through it, in this goroutine.
		defer g.clients.Done()
		ctx, cancel := context.WithCancel(runCtx)
		defer cancel()
		defer context.AfterFunc(r.Context(), cancel)()
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, retryField(g.cfg.SSERetry))
		st.wire = responseWire{w: w, rc: rc}
		st.serve(ctx)
		return
	}
	// HTTP/1: the stream owns the connection, like a WebSocket client, so
	// that an idle stream holds no server buffers and no handler goroutine.
	// The response is delimited by the connection's close.
	head := append([]byte("HTTP/1.1 200 OK\r\n"), headerBytes(w.Header())...)
	head = append(head, "Connection: close\r\n\r\n"...)
	head = append(head, retryField(g.cfg.SSERetry)...)
	wr := &wire{Conn: conn, pool: &g.batches, timeout: g.cfg.WriteTimeout}
	st.wire = wr
	go func() { // owned: Run waits on g.clients
		defer g.clients.Done()
		ctx, cancel := context.WithCancel(runCtx)
		defer cancel()
		readerDone := make(chan struct{})
		go func() { // owned: waited for below
			defer close(readerDone)
			defer cancel()
			var b [64]byte
			for { // nothing more is expected from the peer but its close
				if _, err := conn.Read(b[:]); err != nil {
					return
				}
			}
		}()
		st.deadline()
		if _, err := wr.Write(head); err != nil {
			st.fail(0, fmt.Sprintf("write: %v", err))
		}
		st.serve(ctx)
		_ = conn.Close()
		<-readerDone
	}()
}

// redirectToShard answers 307 to the same URL with ?shard=<the
// conversation's home partition>, computed from the token's identity,
// unless the request carries a hint already, whatever its value; it reports
// whether it answered. A request is therefore redirected at most once:
// replicas that disagree on the partition count (while partitions are
// added, before every replica has read the new count) would otherwise send
// it back and forth, each to its own shard. A hint other than this
// replica's costs a less local replica, nothing else. The hint is for the
// edge, which routes by it: the gateway never reads anything else from it
// (the subscription's partition is computed again from the token). The
// Location repeats every parameter, ?access_token= too: it is the URL the
// client sent, to the same origin. A request with a bad conversation, or
// before Run has the partitions, goes on to its refusal.
func (g *gateway) redirectToShard(w http.ResponseWriter, r *http.Request, tok auth.Token) bool {
	conv := r.PathValue("conversation")
	g.mu.Lock()
	h := g.hub
	g.mu.Unlock()
	if h == nil || events.ValidateID("conversation", conv) != nil {
		return false
	}
	q := r.URL.Query()
	if q.Has(paramShard) {
		return false
	}
	q.Set(paramShard, strconv.Itoa(h.partitionOf(tok.Principal.Identity(conv).Key())))
	g.metrics.shardRedirects.Inc()
	// A query-only reference: the same path, whatever prefix a proxy
	// stripped on the way in. The answer depends on the token: not cached.
	w.Header().Set("Location", "?"+q.Encode())
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusTemporaryRedirect)
	return true
}

// headerBytes returns h in wire format.
func headerBytes(h http.Header) []byte {
	var b bytes.Buffer
	_ = h.Write(&b)
	return b.Bytes()
}

// parseEventsRequest checks the conversation, the position and follow of
// an events request. Errors are for the client's eyes.
func parseEventsRequest(r *http.Request) (conv string, sn since, follow string, err error) {
	conv = r.PathValue("conversation")
	if err := events.ValidateID("conversation", conv); err != nil {
		return "", sn, "", err
	}
	q := r.URL.Query()
	for k, vs := range q {
		switch k {
		case paramSince, paramFollow, paramAccessToken, paramShard:
		default:
			return "", sn, "", fmt.Errorf("unknown query parameter %q", clip(k, 32))
		}
		if len(vs) > 1 {
			return "", sn, "", fmt.Errorf("query parameter %q given %d times", k, len(vs))
		}
	}
	req := request{Since: q.Get(paramSince), hasSince: q.Has(paramSince)}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		// An EventSource reconnecting: the last id it saw wins over the
		// URL's since, which named where the first connection began.
		if _, _, err := ParseCursor(id); err != nil {
			return "", sn, "", fmt.Errorf("Last-Event-ID: %w", err)
		}
		req.Since, req.hasSince = id, true
	}
	if sn, err = parseSince(req); err != nil {
		return "", sn, "", err
	}
	if q.Has(paramFollow) {
		follow = q.Get(paramFollow)
		if err := events.ValidateID("follow", follow); err != nil {
			return "", sn, "", err
		}
		if sn.kind == sinceLive {
			// The request may have started before this stream: every
			// retained event of the conversation is looked at.
			sn = since{kind: sinceAll}
		}
	}
	return conv, sn, follow, nil
}

// sseUnavailable answers 200 with a retry hint and one unavailable error
// event: an EventSource, which gives up on a 503, reconnects.
func (g *gateway) sseUnavailable(w http.ResponseWriter, msg string) {
	setStreamHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, retryField(g.cfg.SSERetry))
	_, _ = w.Write(appendErrorEvent(nil, codeUnavailable, msg))
	_ = http.NewResponseController(w).Flush()
}

// setStreamHeaders sets the headers of an event stream's 200.
func setStreamHeaders(h http.Header) {
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
}

// retryField is the retry hint that starts every stream.
func retryField(retry time.Duration) string {
	return "retry: " + strconv.FormatInt(retry.Milliseconds(), 10) + "\n\n"
}

func appendErrorEvent(dst []byte, code, msg string) []byte {
	dst = append(dst, "event: error\ndata: "...)
	dst = append(dst, errorFrame(code, msg)...)
	return append(dst, "\n\n"...)
}

// stream is one Server-Sent Events response: a session with a single
// subscription, whose frames its writer writes as events. The writer is
// the handler's goroutine, or (on a connection the stream took over) one
// of the stream's own with a reader beside it that notices the peer's
// close; either way the replay goroutine, if any, is owned through
// endSubscriptions.
type stream struct {
	session
	wire   eventWire
	follow string // request id whose run.completed ends the stream; "": none
}

// eventWire is where a stream writes: the socket itself (*wire, which
// batches the writes between begin and end), or a ResponseWriter (which
// buffers until end flushes it).
type eventWire interface {
	io.Writer
	begin()
	end() error
	setWriteDeadline(time.Time)
}

// responseWire is the eventWire of a stream that did not take its
// connection over.
type responseWire struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (r responseWire) Write(p []byte) (int, error)  { return r.w.Write(p) }
func (r responseWire) begin()                       {}
func (r responseWire) end() error                   { return r.rc.Flush() }
func (r responseWire) setWriteDeadline(t time.Time) { _ = r.rc.SetWriteDeadline(t) }

// serve streams the subscribed session until the client goes, the stream
// ends (an error event, follow's completion), the session is shed or ctx
// ends; then it ends the subscription.
func (st *stream) serve(ctx context.Context) {
	st.metrics.connections.Inc()
	st.metrics.sseConnections.Inc()
	defer st.metrics.connections.Dec()
	defer st.metrics.sseConnections.Dec()
	if err := st.wire.end(); err != nil { // the head
		st.fail(0, fmt.Sprintf("write: %v", err))
	}
	st.write(ctx)
	st.endSubscriptions()
	st.logClosed()
}

// write is the writer loop: queued frames as events, with a deadline each,
// and comment heartbeats. When the token expires it ends the stream with
// an error event of code unauthenticated.
func (st *stream) write(ctx context.Context) {
	beat := time.NewTicker(st.gw.cfg.SSEHeartbeat)
	defer beat.Stop()
	expiry := st.gw.expiry(st.expires)
	defer expiry.stop()
	for {
		select {
		case <-ctx.Done():
			st.fail(0, "stream ended: client gone or server shutting down")
			return
		case <-expiry.expired:
			st.deadline()
			if _, err := st.wire.Write(appendErrorEvent(nil, server.CodeUnauthenticated, "token expired: reconnect with a fresh token and Last-Event-ID")); err == nil {
				_ = st.wire.end() // the stream ends either way
			}
			st.fail(0, "token expired")
			return
		case <-st.done:
			return
		case <-st.out.wake:
			if !st.flush() {
				return
			}
		case <-beat.C:
			st.deadline()
			_, err := io.WriteString(st.wire, ": heartbeat\n\n")
			if err == nil {
				err = st.wire.end()
			}
			if err != nil {
				st.fail(0, fmt.Sprintf("write: %v", err))
				return
			}
		}
	}
}

func (st *stream) deadline() {
	st.wire.setWriteDeadline(time.Now().Add(st.gw.cfg.WriteTimeout))
}

// flush writes the queued frames as events until the queue is empty. When
// frames wait behind the one being written it batches them: one write for
// many events. It returns false when the stream is over.
func (st *stream) flush() bool {
	batching := false
	for {
		f, at, ok := st.out.popAt()
		if !ok {
			break
		}
		if st.dropIfClosed(f) {
			if batching {
				_ = st.wire.end()
			}
			return false
		}
		if !batching && st.out.waiting() > 0 {
			st.wire.begin()
			batching = true
		}
		ev, last := sseEvent(f, st.follow)
		st.deadline()
		var err error
		if ev != nil {
			_, err = st.wire.Write(ev)
		}
		st.out.sent(len(f))
		if err == nil && ev != nil {
			st.wrote(at)
		}
		if err == nil && (last || !batching) {
			if err, batching = st.wire.end(), false; err == nil {
				st.onSocket()
			}
		}
		if err != nil {
			st.fail(0, fmt.Sprintf("write: %v", err))
			if batching {
				_ = st.wire.end()
			}
			return false
		}
		if last {
			st.fail(0, "stream complete")
			return false
		}
	}
	if batching {
		if err := st.wire.end(); err != nil {
			st.fail(0, fmt.Sprintf("write: %v", err))
			return false
		}
		st.onSocket()
	}
	return true
}

// sseEvent returns the Server-Sent Event of a frame (nil: not for this
// stream) and whether it ends the stream: an error frame, or with follow
// that request's run.completed. Event frames carry their cursor last (see
// eventFrame); it becomes the id.
func sseEvent(f []byte, follow string) (ev []byte, last bool) {
	typ, cursor := frameType(f), frameCursor(f)
	if follow != "" && cursor != nil {
		if string(frameRequestID(f)) != follow {
			return nil, false
		}
		last = string(typ) == string(events.TypeRunCompleted)
	}
	if string(typ) == "error" {
		last = true
	}
	ev = make([]byte, 0, len(f)+len(cursor)+len(typ)+32)
	if cursor != nil {
		ev = append(append(append(ev, "id: "...), cursor...), '\n')
	}
	if len(typ) > 0 {
		ev = append(append(append(ev, "event: "...), typ...), '\n')
	}
	ev = append(ev, "data: "...)
	start := len(ev)
	ev = append(ev, f...)
	// JSON holds no raw line break but between tokens: as a space it
	// keeps the data on its one line and means the same. Frames written by
	// events.AppendEvent have none, which IndexByte finds out quickly.
	if bytes.IndexByte(f, '\n') >= 0 || bytes.IndexByte(f, '\r') >= 0 {
		for i := start; i < len(ev); i++ {
			if ev[i] == '\n' || ev[i] == '\r' {
				ev[i] = ' '
			}
		}
	}
	return append(ev, "\n\n"...), last
}

// frameType returns a frame's "type": at once, within f, when it comes
// first, as in every frame the gateway and events.AppendEvent write;
// otherwise decoded. A type an event field cannot carry (a line break,
// empty) gives nil or empty.
func frameType(f []byte) []byte {
	const prefix = `{"type":"`
	if rest, ok := bytes.CutPrefix(f, []byte(prefix)); ok {
		if i := bytes.IndexByte(rest, '"'); i > 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return rest[:i]
		}
	}
	var m struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(f, &m) != nil || strings.ContainsAny(m.Type, "\r\n") {
		return nil
	}
	return []byte(m.Type)
}

// frameRequestID returns an event frame's request_id: at once, within f,
// when the frame begins as events.AppendEvent writes it (type,
// conversation, request_id, none escaped); otherwise decoded.
func frameRequestID(f []byte) []byte {
	rest, value, ok := f, []byte(nil), true
	for _, key := range [...]string{`{"type":"`, `","conversation":"`, `","request_id":"`} {
		if rest, ok = bytes.CutPrefix(rest, []byte(key)); !ok {
			break
		}
		i := bytes.IndexByte(rest, '"')
		if ok = i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0; !ok {
			break
		}
		value, rest = rest[:i], rest[i:]
	}
	if ok {
		return value
	}
	var m struct {
		RequestID string `json:"request_id"`
	}
	if json.Unmarshal(f, &m) != nil {
		return nil
	}
	return []byte(m.RequestID)
}

// frameCursor returns the cursor eventFrame put last in an event frame,
// within f; nil for any other frame.
func frameCursor(f []byte) []byte {
	const member = `,"cursor":"`
	i := bytes.LastIndex(f, []byte(member))
	if i < 0 || !bytes.HasSuffix(f, []byte(`"}`)) {
		return nil
	}
	c := f[i+len(member) : len(f)-2]
	if _, _, err := ParseCursor(string(c)); err != nil {
		return nil
	}
	return c
}
