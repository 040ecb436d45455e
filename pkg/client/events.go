package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// EventsOptions are the optional parts of Events.
type EventsOptions struct {
	// Since is where to start: "" for live events, "earliest", or a cursor
	// (sent as Last-Event-ID, as a reconnecting browser does).
	Since string
	// Follow is a request id: the stream then carries only that request's
	// events and ends after its run.completed. Without Since it starts at
	// "earliest", so a request sent before the stream opened is complete.
	Follow string
}

// maxEventBytes bounds one Server-Sent Event read by an EventStream.
const maxEventBytes = 1 << 20

// EventStream is one Server-Sent Events stream of the push gateway: the
// events of one conversation, as GET /v1/conversations/{c}/events sends
// them. Each event's data is the frame a WebSocket subscription would get,
// and Next decodes it as Conn.Next does. Unlike a Subscription it does not
// reconnect: when it ends (io.EOF from Next), open another from the last
// cursor. Next must be called from one goroutine; Close may be called from
// any.
type EventStream struct {
	body   io.ReadCloser
	br     *bufio.Reader
	cancel context.CancelFunc
	retry  time.Duration
}

// Events opens the Server-Sent Events stream of conversation on the push
// gateway (EventsURL, or StreamURL's host). ctx bounds the request until
// the gateway answers; the stream then lasts until Close, its end, or a
// Next whose ctx ends. A refusal (bad token 401, foreign origin 403, bad
// position 400, over the rate 429) is an *APIError. Client.HTTP's
// transport is used, but not its timeout, which would cut the stream.
func (c *Client) Events(ctx context.Context, conversation string, o EventsOptions) (*EventStream, error) {
	return c.events(ctx, conversation, o, -1)
}

// events is Events with the shard hint ?shard=<shard> (shard >= 0), which
// saves the gateway's redirect to it.
func (c *Client) events(ctx context.Context, conversation string, o EventsOptions, shard int) (*EventStream, error) {
	u, err := c.eventsURL(conversation)
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	if shard >= 0 {
		q.Set("shard", strconv.Itoa(shard))
	}
	if o.Since == "earliest" {
		q.Set("since", "earliest")
	}
	if o.Follow != "" {
		q.Set("follow", o.Follow)
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	tok, err := c.token(ctx)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, u, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tok)
	if o.Since != "" && o.Since != "earliest" {
		req.Header.Set("Last-Event-ID", o.Since)
	}
	hc := &http.Client{}
	if c.HTTP != nil {
		hc.Transport, hc.Jar, hc.CheckRedirect = c.HTTP.Transport, c.HTTP.Jar, c.HTTP.CheckRedirect
	}
	stop := context.AfterFunc(ctx, cancel)
	resp, err := hc.Do(req)
	stop()
	if err != nil {
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("turnpike: events %s: %w", conversation, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		return nil, fmt.Errorf("turnpike: events %s: %w", conversation, readAPIError(resp))
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		cancel()
		resp.Body.Close()
		return nil, fmt.Errorf("turnpike: events %s: content type %q, want text/event-stream", conversation, ct)
	}
	return &EventStream{body: resp.Body, br: bufio.NewReader(resp.Body), cancel: cancel}, nil
}

// eventsURL is the events endpoint of conversation.
func (c *Client) eventsURL(conversation string) (string, error) {
	base := c.EventsURL
	if base == "" {
		u, err := url.Parse(c.StreamURL)
		if err != nil || u.Host == "" {
			return "", fmt.Errorf("turnpike: no EventsURL, and StreamURL %q is not a URL", c.StreamURL)
		}
		scheme := "http"
		if u.Scheme == "wss" || u.Scheme == "https" {
			scheme = "https"
		}
		base = scheme + "://" + u.Host
	}
	return strings.TrimSuffix(base, "/") + "/v1/conversations/" + url.PathEscape(conversation) + "/events", nil
}

// Retry is the reconnection delay the gateway asked for (its retry
// field), 0 until it sent one.
func (s *EventStream) Retry() time.Duration { return s.retry }

// Next reads the next event and returns its frame: "subscribed" first,
// then stream events, or one "error" frame after which the stream ends
// (code "unauthenticated" when the stream's token expired: open another
// with a fresh token from the last cursor).
// Comments (heartbeats) are skipped. The end of the stream is io.EOF; when
// ctx ends the stream is closed and Next returns ctx.Err().
func (s *EventStream) Next(ctx context.Context) (Frame, error) {
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, s.cancel)
		defer stop()
	}
	data, err := s.read()
	if err != nil {
		if ctx.Err() != nil {
			return Frame{}, ctx.Err()
		}
		return Frame{}, err
	}
	return decodeFrame(data)
}

// read returns the data of the next event, per the event stream format:
// lines up to a blank one, "data" lines joined with "\n", comments and
// other fields skipped (the id is the data's cursor already). What it
// holds, the data so far and the line, stays within maxEventBytes.
func (s *EventStream) read() ([]byte, error) {
	var data []byte
	has := false
	for {
		line, err := s.br.ReadSlice('\n')
		size := len(data) + len(line)
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: gather it whole, within the bound.
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) && size <= maxEventBytes {
				line, err = s.br.ReadSlice('\n')
				size += len(line)
				long = append(long, line...)
			}
			line = long
		}
		if size > maxEventBytes {
			return nil, fmt.Errorf("turnpike: event over %d bytes", maxEventBytes)
		}
		if err != nil {
			if errors.Is(err, io.EOF) && !has && len(line) == 0 {
				return nil, io.EOF
			}
			if errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		line = trimEOL(line)
		if len(line) == 0 {
			if has {
				return data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		// bytes, not a string: a data line (the whole frame) is copied once,
		// into data.
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data":
			if has {
				data = append(data, '\n')
			}
			data, has = append(data, value...), true
		case "retry":
			if ms, err := strconv.Atoi(string(value)); err == nil && ms >= 0 {
				s.retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
}

func trimEOL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// Close ends the stream.
func (s *EventStream) Close() error {
	s.cancel()
	return s.body.Close()
}
