package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// CloseTokenExpired is the close code of a connection whose token expired.
// Dial again with a fresh token (see Client.TokenSource) and subscribe
// since the last cursor; a Subscription does so by itself.
const CloseTokenExpired = 4401

// Conn is a WebSocket connection to the push gateway.
type Conn struct {
	ws *websocket.Conn

	wmu sync.Mutex // serialises writes
}

// Dial opens a WebSocket to the push gateway.
func (c *Client) Dial(ctx context.Context) (*Conn, error) { return c.dial(ctx, -1) }

// dial is Dial with the shard hint ?shard=<shard> on the upgrade URL
// (shard >= 0), for an edge that routes connections by shard.
func (c *Client) dial(ctx context.Context, shard int) (*Conn, error) {
	tok, err := c.token(ctx)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+tok)
	u := c.StreamURL
	if shard >= 0 {
		if u, err = withShard(u, shard); err != nil {
			return nil, err
		}
	}
	ws, resp, err := websocket.DefaultDialer.DialContext(ctx, u, h)
	if err != nil {
		if resp != nil {
			// The gateway answered the upgrade with an error (a bad token:
			// 401; a foreign origin: 403; too many connects: 429).
			defer resp.Body.Close()
			return nil, fmt.Errorf("turnpike: dial %s: %w", c.StreamURL, readAPIError(resp))
		}
		return nil, fmt.Errorf("turnpike: dial %s: %w", c.StreamURL, err)
	}
	ws.SetReadLimit(1 << 20)
	return &Conn{ws: ws}, nil
}

// Subscribe asks for the events of conversation: live ones when since is
// "", every retained one with "earliest", or those after a cursor.
func (c *Conn) Subscribe(conversation, since string) error {
	f := map[string]string{"op": "subscribe", "conversation": conversation}
	if since != "" {
		f["since"] = since
	}
	return c.write(f)
}

// Unsubscribe stops the events of conversation.
func (c *Conn) Unsubscribe(conversation string) error {
	return c.write(map[string]string{"op": "unsubscribe", "conversation": conversation})
}

// Ping asks the gateway for a pong frame.
func (c *Conn) Ping() error { return c.write(map[string]string{"op": "ping"}) }

func (c *Conn) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

// Frame is one frame from the gateway: a stream event, or a control frame
// (subscribed, pong, error).
type Frame struct {
	// Type is the frame's type: an event type, "subscribed", "pong" or "error".
	Type string
	// Event is set for stream events; its Header().Cursor is the resume cursor.
	Event events.Event
	// Conversation is set on subscribed frames, and on error frames that
	// answer a subscribe or unsubscribe or end a subscription.
	Conversation string
	// Shard is the conversation's shard (its home partition) on a
	// subscribed frame: a routing hint for an edge that sends each
	// conversation's connections to the same replica (docs/api.md "Shard
	// hints"). -1 on other frames, and from a gateway that names none.
	Shard int
	// Code and Message are set on error frames.
	Code, Message string
	// Cursor is set on a stream event of a type this client does not
	// know (Event nil): a later server's addition, which clients ignore
	// (docs/api.md), and which a Subscription skips, resuming after it.
	Cursor string
	// Raw is the frame as received.
	Raw []byte
}

// Next reads the next frame. A closed connection yields a
// *websocket.CloseError (see CloseCode).
func (c *Conn) Next(ctx context.Context) (Frame, error) {
	b, err := c.NextRaw(ctx, nil)
	if err != nil {
		return Frame{}, err
	}
	return decodeFrame(b)
}

// decodeFrame decodes one gateway frame (a WebSocket message, or the data
// of a Server-Sent Event). Members it does not know are ignored, as
// docs/api.md asks of clients: later versions add members without a
// version bump.
func decodeFrame(b []byte) (Frame, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return Frame{}, fmt.Errorf("turnpike: bad frame: %w", err)
	}
	f := Frame{Type: head.Type, Raw: b, Shard: -1}
	switch head.Type {
	case "subscribed", "pong", "error":
		var c struct {
			Conversation string `json:"conversation"`
			Code         string `json:"code"`
			Message      string `json:"message"`
			Shard        *int   `json:"shard"`
		}
		if err := json.Unmarshal(b, &c); err != nil {
			return Frame{}, fmt.Errorf("turnpike: bad frame: %w", err)
		}
		f.Conversation = c.Conversation
		if head.Type == "subscribed" && c.Shard != nil && *c.Shard >= 0 {
			f.Shard = *c.Shard
		}
		if head.Type == "error" {
			f.Code, f.Message = c.Code, c.Message
		}
	default:
		if !knownType(head.Type) {
			// A newer server's event: ignored, but its conversation and
			// cursor let a subscription resume after it.
			var u struct {
				Conversation string `json:"conversation"`
				Cursor       string `json:"cursor"`
			}
			if err := json.Unmarshal(b, &u); err != nil || head.Type == "" {
				return Frame{}, fmt.Errorf("turnpike: bad frame of type %q", head.Type)
			}
			f.Conversation, f.Cursor = u.Conversation, u.Cursor
			return f, nil
		}
		e, err := decodeEvent(b)
		if err != nil {
			return Frame{}, fmt.Errorf("turnpike: bad event frame: %w", err)
		}
		f.Event = e
	}
	return f, nil
}

// The members of a stream event, and of its usage and interrupt objects,
// that this client knows: those events.AppendEvent writes (and a cursor).
var (
	eventMembers = map[string]bool{
		"type": true, "conversation": true, "request_id": true, "run_id": true, "seq": true, "ts": true,
		"cursor": true, "delta": true, "agent": true, "role": true, "message": true, "status": true,
		"from": true, "to": true, "usage": true, "interrupt": true, "keys": true, "truncated": true,
		"artifact": true,
	}
	nestedMembers = map[string]map[string]bool{
		"usage":     {"prompt_tokens": true, "completion_tokens": true, "total_tokens": true},
		"interrupt": {"agent": true, "tool": true, "question": true},
		"keys":      {"conversation": true, "user": true},
		"artifact":  {"name": true, "version": true, "mime_type": true, "size": true},
	}
)

// knownType reports whether t is a stream event type this client decodes.
func knownType(t string) bool {
	switch events.Type(t) {
	case events.TypeRunStarted, events.TypeToken, events.TypeNotice, events.TypeRunCompleted,
		events.TypeAgentTransfer, events.TypeRunInterrupted, events.TypeStateChanged, events.TypeArtifactSaved:
		return true
	}
	return false
}

// decodeEvent decodes a stream event from the gateway: the members it
// knows are checked as events.DecodeEvent checks them (types, identifiers,
// bounds, the members of each event type), and the others, in the event or
// in its usage or interrupt, are ignored.
func decodeEvent(b []byte) (events.Event, error) {
	e, err := events.DecodeEvent(b)
	if err == nil {
		return e, nil
	}
	known, dropped, ferr := knownMembers(b, eventMembers, nestedMembers)
	if ferr != nil || !dropped {
		return nil, err
	}
	return events.DecodeEvent(known)
}

// knownMembers returns the JSON object b with only the members in keep, in
// their order (a duplicated one stays duplicated), the objects of the
// members in nested filtered likewise; dropped reports whether any member
// was left out.
func knownMembers(b []byte, keep map[string]bool, nested map[string]map[string]bool) (out []byte, dropped bool, err error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false, errors.New("not an object")
	}
	out = append(make([]byte, 0, len(b)), '{')
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false, err
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false, err
		}
		if !keep[k] {
			dropped = true
			continue
		}
		if n := nested[k]; n != nil && len(v) > 0 && v[0] == '{' {
			fv, d, err := knownMembers(v, n, nil)
			if err != nil {
				return nil, false, err
			}
			v, dropped = fv, dropped || d
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		kb, _ := json.Marshal(k)
		out = append(append(append(out, kb...), ':'), v...)
	}
	if _, err := dec.Token(); err != nil {
		return nil, false, err
	}
	return append(out, '}'), dropped, nil
}

// NextRaw reads the next frame into buf (from buf[:0], growing it when
// needed) and returns it undecoded, for readers that decode with a
// FrameView and reuse one buffer. Errors are those of Next.
func (c *Conn) NextRaw(ctx context.Context, buf []byte) ([]byte, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = c.ws.SetReadDeadline(dl)
	} else {
		_ = c.ws.SetReadDeadline(time.Time{})
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { _ = c.ws.SetReadDeadline(time.Now()) })
		defer stop()
	}
	b, err := c.read(buf[:0])
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return b, nil
}

// read appends the next message to buf.
func (c *Conn) read(buf []byte) ([]byte, error) {
	_, r, err := c.ws.NextReader()
	if err != nil {
		return nil, err
	}
	if buf == nil {
		buf = make([]byte, 0, 512)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// CloseCode returns the WebSocket close code of an error from Next, or 0.
func CloseCode(err error) int {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return 0
}

// Close closes the connection with a normal close frame.
func (c *Conn) Close() error {
	c.wmu.Lock()
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.wmu.Unlock()
	return c.ws.Close()
}

// readAPIError reads an error answer of the gateway or the API into an
// *APIError; a body that is not the JSON error shape gives the status text.
func readAPIError(resp *http.Response) *APIError {
	ae := &APIError{Status: resp.StatusCode}
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10)); err == nil && json.Unmarshal(b, &body) == nil {
		ae.Code, ae.Message = body.Error.Code, body.Error.Message
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		ae.RetryAfter = time.Duration(s) * time.Second
	}
	if ae.Message == "" {
		ae.Message = resp.Status
	}
	return ae
}

// withShard returns the URL u with the query parameter shard set.
func withShard(u string, shard int) (string, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("turnpike: %q is not a URL: %w", u, err)
	}
	q := pu.Query()
	q.Set("shard", strconv.Itoa(shard))
	pu.RawQuery = q.Encode()
	return pu.String(), nil
}
