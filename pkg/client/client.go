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
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Client talks to one Turnpike deployment as one identity (the token's).
type Client struct {
	// BaseURL is the ingest API, e.g. "http://localhost:8080".
	BaseURL string
	// StreamURL is the push gateway's WebSocket endpoint, e.g.
	// "ws://localhost:8081/v1/stream".
	StreamURL string
	// EventsURL is the push gateway's HTTP base for Server-Sent Events,
	// e.g. "http://localhost:8081". Default: StreamURL's host, with http
	// for ws and https for wss.
	EventsURL string
	// Token is the bearer JWT, unless TokenSource is set.
	Token string
	// TokenSource, if set, is called for the bearer token of each HTTP
	// request, each WebSocket dial and each event stream, instead of using
	// Token. The gateway closes a WebSocket when its token expires
	// (CloseTokenExpired) and ends an event stream with an error event of
	// code "unauthenticated"; a Subscription then connects again with the
	// token TokenSource returns and resumes after its cursor, losing no
	// event. It may be called from several goroutines at once. Default:
	// nil (Token is used).
	TokenSource func(ctx context.Context) (string, error)
	// HTTP is the HTTP client. Default: one with a 30 s timeout.
	HTTP *http.Client
}

// APIError is an error answer of the API: {"error":{"code","message"}}.
type APIError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	return fmt.Sprintf("turnpike: %d %s: %s", e.Status, e.Code, e.Message)
}

// SendOptions are the optional parts of Send.
type SendOptions struct {
	// Strategy is enqueue (default), reject or interrupt.
	Strategy string
	// IdempotencyKey makes retries of the same send yield one request.
	IdempotencyKey string
}

// Accepted is the answer to Send.
type Accepted struct {
	RequestID    string `json:"request_id"`
	Conversation string `json:"conversation"`
	Status       string `json:"status"`
}

// Send posts a user message. It returns once the request is durably queued.
func (c *Client) Send(ctx context.Context, conversation, content string, o SendOptions) (Accepted, error) {
	body := map[string]string{"content": content}
	if o.Strategy != "" {
		body["strategy"] = o.Strategy
	}
	return c.post(ctx, conversation, "messages", body, o.IdempotencyKey)
}

// Resume answers the question of the interrupted request requestID (the
// conversation's latest turn): the run continues from its checkpoint with
// answer. It returns once the resume is durably queued; whether there was
// something to resume is decided in order by the worker (a resume of
// anything else completes rejected). Only o.IdempotencyKey applies.
func (c *Client) Resume(ctx context.Context, conversation, requestID, answer string, o SendOptions) (Accepted, error) {
	return c.post(ctx, conversation, "resume", map[string]string{"request_id": requestID, "answer": answer}, o.IdempotencyKey)
}

// Cancel cancels request requestID of conversation, or, with requestID
// "", the running request and every request queued before the cancel. It
// returns once the cancel is recorded (Accepted.Status "cancelling"); the
// runs then complete cancelled.
func (c *Client) Cancel(ctx context.Context, conversation, requestID string) (Accepted, error) {
	body := map[string]string{}
	if requestID != "" {
		body["request_id"] = requestID
	}
	return c.post(ctx, conversation, "cancel", body, "")
}

// ResetOptions say what Reset clears.
type ResetOptions struct {
	// State clears the conversation's state (its conversation-scoped
	// keys; user: and tenant: keys are shared by other conversations and
	// are kept); Agent returns the conversation to the root agent. Both
	// false: both are reset.
	State, Agent bool
	// IdempotencyKey, if set, makes retries of the same reset one request.
	IdempotencyKey string
}

// Reset resets the conversation's state and/or returns it to the root
// agent (POST …/state/reset). It returns once the reset is durably queued:
// the worker applies it in the conversation's order, after the requests
// queued before it, and completes it complete (its run.completed, under
// Accepted.RequestID, says when it took effect). The conversation's
// messages are kept.
func (c *Client) Reset(ctx context.Context, conversation string, o ResetOptions) (Accepted, error) {
	if !o.State && !o.Agent {
		o.State, o.Agent = true, true
	}
	body := map[string]bool{"state": o.State, "agent": o.Agent}
	return c.post(ctx, conversation, "state/reset", body, o.IdempotencyKey)
}

// post posts body to the conversation's endpoint and decodes the 202.
func (c *Client) post(ctx context.Context, conversation, endpoint string, body any, idempotencyKey string) (Accepted, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return Accepted{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/v1/conversations/"+url.PathEscape(conversation)+"/"+endpoint, bytes.NewReader(b))
	if err != nil {
		return Accepted{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	var a Accepted
	err = c.do(req, http.StatusAccepted, &a)
	return a, err
}

// Message is one message of a conversation's history. A turn is its user
// message, then one assistant message per agent's contiguous stretch of
// text (a sub-agent's answer, then the supervisor's: two), all with the
// turn's RequestID; Turns groups them.
type Message struct {
	// Seq numbers the conversation's messages 1, 2, 3 … with no gap.
	Seq     int64  `json:"seq"`
	Role    string `json:"role"`
	Content string `json:"content"`
	// RequestID is the turn's: its user message and every assistant
	// message share it.
	RequestID string `json:"request_id"`
	// Agent is the agent that wrote an assistant message.
	Agent     string    `json:"agent"`
	CreatedAt time.Time `json:"created_at"`
	// Status and Incomplete are the run's, on every assistant message.
	Status     string `json:"status,omitempty"`
	Incomplete bool   `json:"incomplete,omitempty"`
	// Usage is the run's token usage, when known: on the turn's last
	// assistant message only.
	Usage *events.Usage `json:"usage,omitempty"`
	// Interrupt is the question of an interrupted run: on the turn's last
	// assistant message only.
	Interrupt *events.Interrupt `json:"interrupt,omitempty"`
}

// Turn is one turn of a history page: its user message (nil when the page
// starts within the turn) and its assistant messages, in order.
type Turn struct {
	RequestID string
	User      *Message
	Assistant []Message
}

// Last returns the turn's last assistant message, which carries the run's
// usage and interrupt; ok is false when the page holds none of them.
func (t Turn) Last() (m Message, ok bool) {
	if len(t.Assistant) == 0 {
		return Message{}, false
	}
	return t.Assistant[len(t.Assistant)-1], true
}

// Turns groups messages (oldest first, as a page holds them) by turn: a
// new turn at each user message or change of request id.
func Turns(messages []Message) []Turn {
	var out []Turn
	for _, m := range messages {
		if n := len(out); n == 0 || m.Role == "user" || out[n-1].RequestID != m.RequestID {
			out = append(out, Turn{RequestID: m.RequestID})
		}
		t := &out[len(out)-1]
		if m.Role == "user" {
			t.User = &m
		} else {
			t.Assistant = append(t.Assistant, m)
		}
	}
	return out
}

// HistoryPage is one page of history, oldest first.
type HistoryPage struct {
	Messages []Message `json:"messages"`
	// NextBefore is the before of the next older page; nil when there is none.
	NextBefore *int64 `json:"next_before"`
}

// History returns up to limit messages (0: the server's default) before
// seq before (0: the newest).
func (c *Client) History(ctx context.Context, conversation string, limit int, before int64) (HistoryPage, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if before > 0 {
		q.Set("before", strconv.FormatInt(before, 10))
	}
	u := c.BaseURL + "/v1/conversations/" + url.PathEscape(conversation) + "/messages"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return HistoryPage{}, err
	}
	var p HistoryPage
	err = c.do(req, http.StatusOK, &p)
	return p, err
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Timeout: 30 * time.Second}
}

// token returns the bearer token for the next request or dial.
func (c *Client) token(ctx context.Context) (string, error) {
	if c.TokenSource == nil {
		return c.Token, nil
	}
	tok, err := c.TokenSource(ctx)
	if err != nil {
		return "", fmt.Errorf("turnpike: token source: %w", err)
	}
	return tok, nil
}

func (c *Client) do(req *http.Request, want int, out any) error {
	tok, err := c.token(req.Context())
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return fmt.Errorf("turnpike: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		return readAPIError(resp)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("turnpike: read answer: %w", err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("turnpike: decode answer: %w", err)
	}
	return nil
}

// IsCode reports whether err is an APIError with code.
func IsCode(err error, code string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == code
}
