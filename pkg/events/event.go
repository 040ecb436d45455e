package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Type names a stream event.
type Type string

// The stream event types of API.md.
const (
	TypeRunStarted   Type = "run.started"
	TypeToken        Type = "token"
	TypeNotice       Type = "notice"
	TypeRunCompleted Type = "run.completed"
)

// Status is how a request ended, carried by run.completed and by assistant
// messages in history.
type Status string

// The statuses of API.md.
const (
	StatusComplete   Status = "complete"
	StatusIncomplete Status = "incomplete"
	StatusCancelled  Status = "cancelled"
	StatusDiscarded  Status = "discarded"
	StatusRejected   Status = "rejected"
	StatusFailed     Status = "failed"
)

// Persisted reports whether the status means an assistant message (and its
// user message) was persisted for the request.
func (s Status) Persisted() bool {
	return s == StatusComplete || s == StatusIncomplete || s == StatusCancelled
}

// Validate reports whether s is a known status.
func (s Status) Validate() error {
	switch s {
	case StatusComplete, StatusIncomplete, StatusCancelled, StatusDiscarded, StatusRejected, StatusFailed:
		return nil
	}
	return fmt.Errorf("%w status %q", ErrInvalid, truncate(string(s), 32))
}

// Size limits of stream event fields. A token event is at most one
// coalesced batch of deltas; producers split longer text over several token
// events. The field limits are chosen so that any event within them encodes
// in at most MaxEventBytes even if every byte is escaped ("\u0001" is 6
// bytes), so what DecodeEvent accepts, AppendEvent re-encodes into something
// DecodeEvent accepts again.
const (
	MaxDeltaBytes   = 8 << 10
	MaxNoticeBytes  = 4 << 10
	MaxAgentBytes   = 256
	MaxCursorBytes  = 128
	MaxEventBytes   = 64 << 10
	maxRoleBytes    = 32
	maxMetaIDFields = MaxIDLen
)

// Meta holds the fields every stream event carries.
type Meta struct {
	Conversation string
	RequestID    string
	RunID        string
	// Seq is 1, 2, 3 … contiguous over all events of a run, in emission order.
	Seq int64
	// TS is the unix time in nanoseconds when the worker emitted the event.
	TS int64
	// Cursor is set by the push gateway only: the opaque resume position of
	// the event. It is never part of the stream topic record.
	Cursor string
}

// Event is one stream event. The concrete types are *RunStartedEvent,
// *TokenEvent, *NoticeEvent and *RunCompletedEvent.
type Event interface {
	Type() Type
	// Header returns the common fields; callers may modify them.
	Header() *Meta
}

// RunStartedEvent says a worker began (or restarted, with a new run id) a request.
type RunStartedEvent struct{ Meta }

// TokenEvent carries one or more tokens of assistant text.
type TokenEvent struct {
	Meta
	Delta string
	Agent string
	Role  string
}

// NoticeEvent is an ephemeral message for clients (for example an error
// notice). It is never persisted.
type NoticeEvent struct {
	Meta
	Message string
}

// RunCompletedEvent ends every request, exactly once.
type RunCompletedEvent struct {
	Meta
	Status Status
}

func (*RunStartedEvent) Type() Type        { return TypeRunStarted }
func (*TokenEvent) Type() Type             { return TypeToken }
func (*NoticeEvent) Type() Type            { return TypeNotice }
func (*RunCompletedEvent) Type() Type      { return TypeRunCompleted }
func (e *RunStartedEvent) Header() *Meta   { return &e.Meta }
func (e *TokenEvent) Header() *Meta        { return &e.Meta }
func (e *NoticeEvent) Header() *Meta       { return &e.Meta }
func (e *RunCompletedEvent) Header() *Meta { return &e.Meta }

// AppendEvent appends the JSON encoding of e to dst. "type" comes first,
// then the common fields in a fixed order, then the type's own fields.
// Invalid UTF-8 in strings is replaced by U+FFFD, as encoding/json does.
func AppendEvent(dst []byte, e Event) []byte {
	m := e.Header()
	dst = append(dst, `{"type":"`...)
	dst = append(dst, e.Type()...)
	dst = append(dst, `","conversation":`...)
	dst = appendString(dst, m.Conversation)
	dst = append(dst, `,"request_id":`...)
	dst = appendString(dst, m.RequestID)
	dst = append(dst, `,"run_id":`...)
	dst = appendString(dst, m.RunID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, m.Seq, 10)
	dst = append(dst, `,"ts":`...)
	dst = strconv.AppendInt(dst, m.TS, 10)
	switch e := e.(type) {
	case *TokenEvent:
		dst = append(dst, `,"delta":`...)
		dst = appendString(dst, e.Delta)
		dst = append(dst, `,"agent":`...)
		dst = appendString(dst, e.Agent)
		dst = append(dst, `,"role":`...)
		dst = appendString(dst, e.Role)
	case *NoticeEvent:
		dst = append(dst, `,"message":`...)
		dst = appendString(dst, e.Message)
	case *RunCompletedEvent:
		dst = append(dst, `,"status":`...)
		dst = appendString(dst, string(e.Status))
	}
	if m.Cursor != "" {
		return AppendCursor(dst, m.Cursor)
	}
	return append(dst, '}')
}

// AppendCursor appends `,"cursor":"…"}` to dst. With dst holding an encoded
// event without its closing brace, this adds a cursor without decoding the
// event; the push gateway uses it to stamp one encoding per event.
func AppendCursor(dst []byte, cursor string) []byte {
	dst = append(dst, `,"cursor":`...)
	dst = appendString(dst, cursor)
	return append(dst, '}')
}

// MarshalEvent returns the JSON encoding of e.
func MarshalEvent(e Event) []byte { return AppendEvent(make([]byte, 0, 192), e) }

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaping as encoding/json does
// (without HTML escaping) and replacing invalid UTF-8 by U+FFFD.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		// U+2028 and U+2029 are valid JSON but break JavaScript parsers.
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// wireEvent is the decoding shape of every stream event.
type wireEvent struct {
	Type         Type    `json:"type"`
	Conversation string  `json:"conversation"`
	RequestID    string  `json:"request_id"`
	RunID        string  `json:"run_id"`
	Seq          int64   `json:"seq"`
	TS           int64   `json:"ts"`
	Cursor       *string `json:"cursor"`
	Delta        *string `json:"delta"`
	Agent        *string `json:"agent"`
	Role         *string `json:"role"`
	Message      *string `json:"message"`
	Status       *Status `json:"status"`
}

var eventKeys = map[string]bool{
	"type": true, "conversation": true, "request_id": true, "run_id": true, "seq": true, "ts": true,
	"cursor": true, "delta": true, "agent": true, "role": true, "message": true, "status": true,
}

// DecodeEvent strictly decodes one stream event, as read from the stream
// topic or from the push gateway's WebSocket (where it carries a cursor).
// Fields of another event type, unknown or duplicated fields, a missing
// field, a bad identifier, invalid UTF-8 or an oversized field are errors.
func DecodeEvent(b []byte) (Event, error) {
	if err := checkKeys(b, MaxEventBytes, eventKeys); err != nil {
		return nil, err
	}
	var w wireEvent
	if err := decodeStrict(b, MaxEventBytes, &w); err != nil {
		return nil, err
	}
	m := Meta{Conversation: w.Conversation, RequestID: w.RequestID, RunID: w.RunID, Seq: w.Seq, TS: w.TS}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("%s event: %w", truncate(string(w.Type), 32), err)
	}
	if w.Cursor != nil {
		if *w.Cursor == "" || len(*w.Cursor) > MaxCursorBytes {
			return nil, fmt.Errorf("%w cursor: want 1..%d bytes", ErrInvalid, MaxCursorBytes)
		}
		m.Cursor = *w.Cursor
	}
	allowed := func(fields ...bool) error {
		// fields lists, in the order delta, agent, role, message, status,
		// whether the event type has that field.
		present := []bool{w.Delta != nil, w.Agent != nil, w.Role != nil, w.Message != nil, w.Status != nil}
		names := []string{"delta", "agent", "role", "message", "status"}
		for i, want := range fields {
			if present[i] != want {
				if want {
					return fmt.Errorf("%w %s event: missing %s", ErrInvalid, w.Type, names[i])
				}
				return fmt.Errorf("%w %s event: unexpected field %s", ErrInvalid, w.Type, names[i])
			}
		}
		return nil
	}
	switch w.Type {
	case TypeRunStarted:
		if err := allowed(false, false, false, false, false); err != nil {
			return nil, err
		}
		return &RunStartedEvent{Meta: m}, nil
	case TypeToken:
		if err := allowed(true, true, true, false, false); err != nil {
			return nil, err
		}
		switch {
		case len(*w.Delta) > MaxDeltaBytes:
			return nil, fmt.Errorf("%w token event: delta over %d bytes", ErrInvalid, MaxDeltaBytes)
		case len(*w.Agent) > MaxAgentBytes:
			return nil, fmt.Errorf("%w token event: agent over %d bytes", ErrInvalid, MaxAgentBytes)
		case *w.Role == "" || len(*w.Role) > maxRoleBytes:
			return nil, fmt.Errorf("%w token event: role must be 1..%d bytes", ErrInvalid, maxRoleBytes)
		}
		return &TokenEvent{Meta: m, Delta: *w.Delta, Agent: *w.Agent, Role: *w.Role}, nil
	case TypeNotice:
		if err := allowed(false, false, false, true, false); err != nil {
			return nil, err
		}
		if len(*w.Message) > MaxNoticeBytes {
			return nil, fmt.Errorf("%w notice event: message over %d bytes", ErrInvalid, MaxNoticeBytes)
		}
		return &NoticeEvent{Meta: m, Message: *w.Message}, nil
	case TypeRunCompleted:
		if err := allowed(false, false, false, false, true); err != nil {
			return nil, err
		}
		if err := w.Status.Validate(); err != nil {
			return nil, fmt.Errorf("run.completed event: %w", err)
		}
		return &RunCompletedEvent{Meta: m, Status: *w.Status}, nil
	case "":
		return nil, fmt.Errorf("%w event: missing type", ErrInvalid)
	}
	return nil, fmt.Errorf("%w event: unknown type %q", ErrInvalid, truncate(string(w.Type), 32))
}

func (m *Meta) validate() error {
	if err := ValidateID("conversation", m.Conversation); err != nil {
		return err
	}
	if err := ValidateID("request_id", m.RequestID); err != nil {
		return err
	}
	if err := ValidateID("run_id", m.RunID); err != nil {
		return err
	}
	if m.Seq < 1 {
		return fmt.Errorf("%w seq: %d, want >= 1", ErrInvalid, m.Seq)
	}
	if m.TS <= 0 {
		return fmt.Errorf("%w ts: %d, want unix nanoseconds > 0", ErrInvalid, m.TS)
	}
	return nil
}

// checkKeys walks the top level of a JSON object and rejects keys outside
// allowed and duplicated keys. encoding/json matches keys case-insensitively
// and keeps the last duplicate; strict decoding allows neither.
func checkKeys(b []byte, max int, allowed map[string]bool) error {
	if len(b) > max {
		return fmt.Errorf("%w record: %w: %d bytes, at most %d allowed", ErrInvalid, ErrTooLarge, len(b), max)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w json: %w", ErrInvalid, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("%w json: want an object", ErrInvalid)
	}
	seen := make(map[string]bool, len(allowed))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%w json: %w", ErrInvalid, err)
		}
		k, _ := tok.(string)
		if !allowed[k] {
			return fmt.Errorf("%w json: unknown field %q", ErrInvalid, truncate(k, 32))
		}
		if seen[k] {
			return fmt.Errorf("%w json: duplicate field %q", ErrInvalid, k)
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return fmt.Errorf("%w json: %w", ErrInvalid, err)
		}
	}
	return nil
}
