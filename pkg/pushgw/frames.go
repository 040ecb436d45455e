package pushgw

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Client operations.
const (
	opSubscribe   = "subscribe"
	opUnsubscribe = "unsubscribe"
	opPing        = "ping"
)

// sinceEarliest is the since value asking for every retained event.
const sinceEarliest = "earliest"

// Error frame codes beyond those of the HTTP API.
const (
	codeInvalidArgument = "invalid_argument"
	codeCursorExpired   = "cursor_expired"
	codeRateLimited     = "rate_limited"
	codeUnavailable     = "unavailable"
)

// request is one decoded client frame.
type request struct {
	Op           string
	Conversation string
	Since        string
	hasConv      bool
	hasSince     bool
}

// sinceKind says where a subscription starts.
type sinceKind int

const (
	sinceLive  sinceKind = iota // no since: events after the subscribed frame
	sinceAll                    // since "earliest": every retained event
	sinceAfter                  // since a cursor: events after its offset
)

// since is a parsed subscribe position.
type since struct {
	kind      sinceKind
	partition int   // sinceAfter: the cursor's partition
	offset    int64 // sinceAfter: the cursor's offset
}

// decodeRequest strictly decodes and checks one client frame: a JSON object
// with string members op, conversation and since only, each at most once,
// with exactly the members its op takes. Errors are for the client's eyes.
func decodeRequest(b []byte) (request, error) {
	var r request
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return r, errors.New("invalid JSON")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return r, errors.New("frame must be a JSON object")
	}
	var hasOp bool
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return r, errors.New("invalid JSON")
		}
		key, _ := tok.(string)
		var dst *string
		var seen *bool
		switch key {
		case "op":
			dst, seen = &r.Op, &hasOp
		case "conversation":
			dst, seen = &r.Conversation, &r.hasConv
		case "since":
			dst, seen = &r.Since, &r.hasSince
		default:
			return r, fmt.Errorf("unknown field %q", clip(key, 32))
		}
		if *seen {
			return r, fmt.Errorf("duplicate field %q", key)
		}
		*seen = true
		tok, err = dec.Token()
		if err != nil {
			return r, errors.New("invalid JSON")
		}
		s, ok := tok.(string)
		if !ok {
			return r, fmt.Errorf("field %q must be a string", key)
		}
		*dst = s
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return r, errors.New("invalid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return r, errors.New("data after the JSON object")
	}
	switch r.Op {
	case opSubscribe:
		if !r.hasConv {
			return r, errors.New("subscribe: missing conversation")
		}
	case opUnsubscribe:
		if !r.hasConv {
			return r, errors.New("unsubscribe: missing conversation")
		}
		if r.hasSince {
			return r, errors.New("unsubscribe: unexpected field \"since\"")
		}
	case opPing:
		if r.hasConv || r.hasSince {
			return r, errors.New("ping: takes no other field")
		}
	case "":
		if !hasOp {
			return r, errors.New("missing op")
		}
		return r, errors.New("empty op")
	default:
		return r, fmt.Errorf("unknown op %q", clip(r.Op, 32))
	}
	if r.hasConv {
		if err := events.ValidateID("conversation", r.Conversation); err != nil {
			return r, err
		}
	}
	return r, nil
}

// parseSince parses a subscribe frame's since member.
func parseSince(r request) (since, error) {
	switch {
	case !r.hasSince:
		return since{kind: sinceLive}, nil
	case r.Since == sinceEarliest:
		return since{kind: sinceAll}, nil
	}
	p, o, err := ParseCursor(r.Since)
	if err != nil {
		return since{}, fmt.Errorf("since: %w", err)
	}
	return since{kind: sinceAfter, partition: p, offset: o}, nil
}

// pongFrame answers {"op":"ping"}.
const pongFrame = `{"type":"pong"}`

// subscribedFrame returns {"type":"subscribed","conversation":…,"shard":…}:
// shard is the conversation's home partition, a routing hint for the edge
// (docs/api.md "Shard hints"). The conversation passed the ID rule, so it
// needs no escaping.
func subscribedFrame(conversation string, shard int) []byte {
	return []byte(`{"type":"subscribed","conversation":"` + conversation + `","shard":` + strconv.Itoa(shard) + `}`)
}

type errorFrameBody struct {
	Type         string `json:"type"`
	Code         string `json:"code"`
	Message      string `json:"message"`
	Conversation string `json:"conversation,omitempty"`
}

// errorFrame returns {"type":"error","code":…,"message":…}.
func errorFrame(code, message string) []byte { return conversationErrorFrame("", code, message) }

// conversationErrorFrame returns an error frame that names conversation
// (when not empty): the conversation of the subscribe or unsubscribe it
// answers, or of the subscription it ends, so that a client with several
// subscriptions on one connection knows which one it concerns.
func conversationErrorFrame(conversation, code, message string) []byte {
	b, err := json.Marshal(errorFrameBody{Type: "error", Code: code, Message: message, Conversation: conversation})
	if err != nil { // cannot happen for three strings
		return []byte(`{"type":"error","code":"internal","message":"error frame"}`)
	}
	return b
}

// eventFrame returns value with `,"cursor":"…"}` in place of its closing
// brace: the frame of one stream record, built once for all its recipients.
// value must have passed validValue.
func eventFrame(value []byte, partition int, offset int64) []byte {
	cursor := FormatCursor(partition, offset)
	f := make([]byte, 0, len(value)+len(cursor)+len(`,"cursor":""`))
	f = append(f, value[:len(value)-1]...)
	return events.AppendCursor(f, cursor)
}

// validValue reports whether value can take a cursor: a JSON object (as
// events.AppendEvent writes it) with at least one member, ending in '}'. The
// members themselves are the worker's business and are not re-validated.
func validValue(value []byte) bool {
	if len(value) < 2 || value[0] != '{' || value[len(value)-1] != '}' {
		return false
	}
	for i := len(value) - 2; i > 0; i-- {
		switch value[i] {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return false
		}
		return true
	}
	return false
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
