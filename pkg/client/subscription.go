package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// ErrCursorExpired is returned by Subscription.Next when the stream topic
// no longer holds the events after the last cursor: reload the
// conversation's history over HTTP, then subscribe again without since.
var ErrCursorExpired = errors.New("turnpike: cursor expired")

// SubscribeOptions are the optional parts of Subscribe.
type SubscribeOptions struct {
	// Since is where to start: "" for live events, "earliest", or a cursor.
	Since string
	// MaxBackoff caps the wait between reconnection attempts. Default 5s.
	MaxBackoff time.Duration
	// OnReconnect, if set, is called after each successful reconnection.
	OnReconnect func(cursor string)
	// SSE streams over Server-Sent Events (Client.Events) instead of a
	// WebSocket: one HTTP stream per connection, resumed with
	// Last-Event-ID. Default false: WebSocket.
	SSE bool
}

// frameSource is one connection of a Subscription: a WebSocket Conn or an
// EventStream.
type frameSource interface {
	Next(ctx context.Context) (Frame, error)
	Close() error
}

// Subscription streams the events of one conversation and survives
// dropped connections: it reconnects with backoff and resumes after the
// last event it delivered, so the caller sees every event once, in order.
// It uses a WebSocket, or Server-Sent Events with SubscribeOptions.SSE.
// When the gateway ends the connection because its token expired (a
// WebSocket closed with CloseTokenExpired, or over SSE an error event of
// code "unauthenticated"), it connects again with the Client's next token
// (Client.TokenSource) from its cursor, losing no event; with a fixed
// Token, Next then fails with the gateway's 401 (an *APIError).
// Its methods must be called from one goroutine.
type Subscription struct {
	c      *Client
	conv   string
	opts   SubscribeOptions
	conn   frameSource
	cursor string
	shard  int // the conversation's shard, from the last subscribed frame; -1: none yet
}

// Subscribe opens a subscription to conversation.
func (c *Client) Subscribe(ctx context.Context, conversation string, o SubscribeOptions) (*Subscription, error) {
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	s := &Subscription{c: c, conv: conversation, opts: o, cursor: o.Since, shard: -1}
	if err := s.connect(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// connect dials, subscribes since the last cursor and waits for subscribed.
func (s *Subscription) connect(ctx context.Context) error {
	conn, err := s.open(ctx)
	if err != nil {
		return err
	}
	for {
		f, err := conn.Next(ctx)
		if err != nil {
			conn.Close()
			return err
		}
		switch f.Type {
		case FrameSubscribed:
			s.conn = conn
			if f.Shard >= 0 {
				s.shard = f.Shard
			}
			return nil
		case FrameError:
			conn.Close()
			if f.Code == "cursor_expired" {
				return ErrCursorExpired
			}
			return &SubscribeError{Conversation: s.conv, Code: f.Code, Message: f.Message}
		}
	}
}

// open opens a connection subscribed since the last cursor, with the
// conversation's shard hint once the gateway has named it, so that an edge
// routing by shard sends the reconnection to the replica that reads the
// conversation's partition (and an event stream needs no redirect).
func (s *Subscription) open(ctx context.Context) (frameSource, error) {
	if s.opts.SSE {
		return s.c.events(ctx, s.conv, EventsOptions{Since: s.cursor}, s.shard)
	}
	conn, err := s.c.dial(ctx, s.shard)
	if err != nil {
		return nil, err
	}
	if err := conn.Subscribe(s.conv, s.cursor); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// Shard is the conversation's shard (its home partition), as the gateway
// named it in its last subscribed frame; -1 before it named one. The
// Subscription sends it as the ?shard= hint when it reconnects. One
// Subscription is one connection, so a client following conversations of
// several shards already holds one connection per shard.
func (s *Subscription) Shard() int { return s.shard }

// Cursor is the cursor of the last event delivered ("" before the first).
func (s *Subscription) Cursor() string { return s.cursor }

// Next returns the next event of the conversation, reconnecting as needed.
// It fails only when ctx ends, when the cursor expired, or when the
// gateway refuses the subscription.
func (s *Subscription) Next(ctx context.Context) (events.Event, error) {
	backoff := 50 * time.Millisecond
	for {
		if s.conn == nil {
			if err := s.connect(ctx); err != nil {
				if ctx.Err() != nil || errors.Is(err, ErrCursorExpired) || isRefusal(err) {
					return nil, err
				}
				if !sleepCtx(ctx, backoff) {
					return nil, ctx.Err()
				}
				backoff = min(2*backoff, s.opts.MaxBackoff)
				continue
			}
			backoff = 50 * time.Millisecond
			if s.opts.OnReconnect != nil {
				s.opts.OnReconnect(s.cursor)
			}
		}
		f, err := s.conn.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			s.conn.Close()
			s.conn = nil
			continue
		}
		if f.Type == FrameError {
			// The gateway gave up on this subscription after it began (a
			// replay that failed part-way): expired cursors end it, anything
			// else is worth a fresh connection from the last cursor.
			s.conn.Close()
			s.conn = nil
			if f.Code == "cursor_expired" {
				return nil, ErrCursorExpired
			}
			if !sleepCtx(ctx, backoff) {
				return nil, ctx.Err()
			}
			backoff = min(2*backoff, s.opts.MaxBackoff)
			continue
		}
		if f.Event == nil {
			// An event of a type this client does not know: skipped, and
			// a reconnection resumes after it.
			if f.Cursor != "" && f.Conversation == s.conv {
				s.cursor = f.Cursor
			}
			continue
		}
		if f.Event.Header().Conversation != s.conv {
			continue
		}
		s.cursor = f.Event.Header().Cursor
		return f.Event, nil
	}
}

// Close ends the subscription.
func (s *Subscription) Close() error {
	if s.conn == nil {
		return nil
	}
	err := s.conn.Close()
	s.conn = nil
	return err
}

// SubscribeError is the gateway's error frame in answer to a subscribe.
type SubscribeError struct {
	Conversation, Code, Message string
}

func (e *SubscribeError) Error() string {
	return fmt.Sprintf("turnpike: subscribe %s: %s: %s", e.Conversation, e.Code, e.Message)
}

// isRefusal reports a subscription the gateway refused for a reason a
// reconnection cannot fix: an error frame other than rate_limited and
// unavailable, or an HTTP 4xx answer to the upgrade (a bad token) other
// than 429.
func isRefusal(err error) bool {
	var se *SubscribeError
	if errors.As(err, &se) {
		// rate_limited and unavailable (a replica not yet at the cursor, a
		// failed replay) pass; invalid_argument and the like do not.
		return se.Code != "rate_limited" && se.Code != "unavailable"
	}
	var ae *APIError
	return errors.As(err, &ae) && ae.Status/100 == 4 && ae.Status != 429
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Transcript folds a conversation's events into the text of each request,
// as the stream contract asks of clients. A request may be run more than
// once (a worker failed mid-run, a record was redelivered), and it may be
// completed more than once: every run.completed of a request carries the
// same status, the one persisted, and the last run's events win. So a new
// run id starts the request's text over (the older run's partial text is
// dropped), late events of a run already superseded are ignored, and an
// event whose seq the run already showed (a writer's retry) is dropped.
// It is not safe for concurrent use.
type Transcript struct {
	runs  map[string]*RunState
	order []string
	// superseded holds, per request id, the run ids a later run replaced.
	superseded map[string]map[string]bool
}

// RunState is what the stream showed of one request.
type RunState struct {
	RequestID string
	RunID     string
	Text      string
	// Status is set once run.completed arrived.
	Status events.Status
	// Notices are the ephemeral notices of the current run.
	Notices []string
	// Started is set when the current run's run.started arrived.
	Started bool
	// NeedsHistory is set when the request completed but Text may not be
	// its persisted answer: the current run's beginning was not seen (the
	// subscription joined mid-run, or a redelivery re-announced an
	// already decided request: a run without run.started, its
	// artifact.saved, if the turn saved any, then run.completed). Read the
	// answer from history.
	NeedsHistory bool

	seq int64 // the highest seq of the current run applied
}

// Apply folds e in and returns the state of its request.
func (t *Transcript) Apply(e events.Event) *RunState {
	if t.runs == nil {
		t.runs = map[string]*RunState{}
		t.superseded = map[string]map[string]bool{}
	}
	m := e.Header()
	r := t.runs[m.RequestID]
	if r == nil {
		r = &RunState{RequestID: m.RequestID, RunID: m.RunID}
		t.runs[m.RequestID] = r
		t.order = append(t.order, m.RequestID)
	}
	switch {
	case m.RunID == r.RunID:
		if m.Seq <= r.seq {
			return r // seen already
		}
	case t.superseded[m.RequestID][m.RunID]:
		return r // a late event of a run already replaced
	default:
		// A new run of the request: drop what the older run showed.
		if t.superseded[m.RequestID] == nil {
			t.superseded[m.RequestID] = map[string]bool{}
		}
		t.superseded[m.RequestID][r.RunID] = true
		*r = RunState{RequestID: m.RequestID, RunID: m.RunID}
	}
	r.seq = m.Seq
	switch e := e.(type) {
	case *events.RunStartedEvent:
		r.Started = true
	case *events.TokenEvent:
		r.Text += e.Delta
	case *events.NoticeEvent:
		r.Notices = append(r.Notices, e.Message)
	case *events.RunCompletedEvent:
		r.Status = e.Status
		r.NeedsHistory = !r.Started
	}
	return r
}

// Runs returns the requests in the order their first event arrived.
func (t *Transcript) Runs() []*RunState {
	out := make([]*RunState, 0, len(t.order))
	for _, id := range t.order {
		out = append(out, t.runs[id])
	}
	return out
}
