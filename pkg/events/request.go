package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Version is the schema version of the request record ("v").
const Version = 1

// DefaultMaxContentBytes is the default upper bound on a user message.
const DefaultMaxContentBytes = 32768

// MaxRecordBytes bounds a whole request record value when the content limit
// is DefaultMaxContentBytes. JSON may spend up to 6 bytes on one content
// byte ("\u0001"), so the bound leaves room for a maximal content escaped
// throughout; with a larger content limit, DecodeRequest scales it up.
const MaxRecordBytes = maxEscape*DefaultMaxContentBytes + recordOverheadBytes

// maxEscape is the most bytes JSON text can spend on one byte of a string.
const maxEscape = 6

// recordOverheadBytes bounds everything of a request record but its content:
// keys, punctuation, version, four identifiers, strategy and timestamp, even
// fully escaped.
const recordOverheadBytes = 8 << 10

// maxRecordBytes is the record bound for a content limit (> 0).
func maxRecordBytes(maxContent int) int {
	return max(MaxRecordBytes, maxEscape*maxContent+recordOverheadBytes)
}

// Strategy says what happens when a request arrives while another request of
// the same conversation is running or queued.
type Strategy string

// The strategies of docs/api.md.
const (
	StrategyEnqueue   Strategy = "enqueue"
	StrategyReject    Strategy = "reject"
	StrategyInterrupt Strategy = "interrupt"
)

// Validate reports whether s is a known strategy. The empty strategy is
// valid and means enqueue.
func (s Strategy) Validate() error {
	switch s {
	case "", StrategyEnqueue, StrategyReject, StrategyInterrupt:
		return nil
	}
	return fmt.Errorf("%w strategy %q: want enqueue, reject or interrupt", ErrInvalid, truncate(string(s), 32))
}

// Request is a record of the requests topic: one user message for one
// conversation. Key: Identity().Key().
type Request struct {
	V            int       `json:"v"`
	RequestID    string    `json:"request_id,omitempty"`
	Tenant       string    `json:"tenant"`
	User         string    `json:"user"`
	Conversation string    `json:"conversation"`
	Content      string    `json:"content"`
	Strategy     Strategy  `json:"strategy,omitempty"`
	CreatedAt    time.Time `json:"created_at,omitzero"`
	// ResumeOf, when set, makes the record a resume (an extension, in
	// docs/api.md): Content is the user's answer to the question of
	// request ResumeOf, whose run was interrupted, and the worker continues
	// that run from its checkpoint instead of starting a new one. It runs in
	// the conversation's order like any request; it is rejected when
	// ResumeOf is not the conversation's latest turn or that turn is not
	// interrupted.
	ResumeOf string `json:"resume_of,omitempty"`
	// Reset, when set, makes the record a reset (an extension, in
	// docs/api.md "Resetting a conversation's state"): it carries no
	// content, and the worker clears the parts of the conversation's state
	// it names, in the conversation's order, instead of running an agent.
	Reset *Reset `json:"reset,omitempty"`
}

// Reset is what a reset record clears: the conversation's state (its
// conversation-scoped keys; never user: or tenant: keys), the agent the
// conversation is left with (it returns to the root), or both. At least
// one is true.
type Reset struct {
	State bool `json:"state"`
	Agent bool `json:"agent"`
}

var resetKeys = map[string]bool{"state": true, "agent": true}

// UnmarshalJSON decodes a reset as strictly as the record around it:
// unknown and duplicated members are refused.
func (r *Reset) UnmarshalJSON(b []byte) error {
	if err := checkKeys(b, len(b), resetKeys); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	type plain Reset
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("%w reset: %w", ErrInvalid, err)
	}
	*r = Reset(p)
	return nil
}

// Identity returns the identity triple of the request.
func (r *Request) Identity() Identity {
	return Identity{Tenant: r.Tenant, User: r.User, Conversation: r.Conversation}
}

// Validate checks the request against the schema. maxContent <= 0 means
// DefaultMaxContentBytes. The request id may be empty (direct producers).
func (r *Request) Validate(maxContent int) error {
	var errs []error
	if r.V != Version {
		errs = append(errs, fmt.Errorf("%w v: %d, want %d", ErrInvalid, r.V, Version))
	}
	if r.RequestID != "" {
		errs = append(errs, ValidateID("request_id", r.RequestID))
	}
	errs = append(errs, r.Identity().Validate(), r.Strategy.Validate())
	if r.Reset != nil {
		errs = append(errs, r.validateReset())
	} else {
		errs = append(errs, ValidateContent(r.Content, maxContent))
	}
	if r.ResumeOf != "" {
		errs = append(errs, ValidateID("resume_of", r.ResumeOf))
		if r.RequestID != "" && r.ResumeOf == r.RequestID {
			errs = append(errs, fmt.Errorf("%w resume_of: a request cannot resume itself", ErrInvalid))
		}
	}
	return errors.Join(errs...)
}

// validateReset checks a reset record: it names a part to clear, and has
// no content, no resume_of and no strategy but enqueue (a reset waits for
// the conversation's running request; it never cancels or refuses one).
func (r *Request) validateReset() error {
	var errs []error
	if !r.Reset.State && !r.Reset.Agent {
		errs = append(errs, fmt.Errorf("%w reset: clears nothing (want state, agent or both true)", ErrInvalid))
	}
	if r.Content != "" {
		errs = append(errs, fmt.Errorf("%w reset: a reset has no content", ErrInvalid))
	}
	if r.ResumeOf != "" {
		errs = append(errs, fmt.Errorf("%w reset: a reset is not a resume", ErrInvalid))
	}
	if r.Strategy != "" && r.Strategy != StrategyEnqueue {
		errs = append(errs, fmt.Errorf("%w reset: strategy %q, want enqueue", ErrInvalid, r.Strategy))
	}
	return errors.Join(errs...)
}

// ErrTooLarge is wrapped by ValidateContent when content is over the limit,
// so HTTP can answer 413 rather than 400.
var ErrTooLarge = errors.New("too large")

// ValidateContent checks a user message: valid UTF-8, no NUL, 1..max bytes.
// max <= 0 means DefaultMaxContentBytes.
func ValidateContent(s string, max int) error {
	if max <= 0 {
		max = DefaultMaxContentBytes
	}
	switch {
	case s == "":
		return fmt.Errorf("%w content: empty", ErrInvalid)
	case len(s) > max:
		return fmt.Errorf("%w content: %w: %d bytes, at most %d allowed", ErrInvalid, ErrTooLarge, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w content: not valid UTF-8", ErrInvalid)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w content: contains NUL", ErrInvalid)
	}
	return nil
}

var requestKeys = map[string]bool{
	"v": true, "request_id": true, "tenant": true, "user": true, "conversation": true,
	"content": true, "strategy": true, "created_at": true, "resume_of": true, "reset": true,
}

// DecodeRequest strictly decodes and validates a request record value.
// maxContent <= 0 means DefaultMaxContentBytes.
func DecodeRequest(b []byte, maxContent int) (Request, error) {
	if maxContent <= 0 {
		maxContent = DefaultMaxContentBytes
	}
	limit := maxRecordBytes(maxContent)
	var r Request
	if err := checkKeys(b, limit, requestKeys); err != nil {
		return Request{}, err
	}
	if err := decodeStrict(b, limit, &r); err != nil {
		return Request{}, err
	}
	if err := r.Validate(maxContent); err != nil {
		return Request{}, err
	}
	return r, nil
}

// EncodeRequest encodes r as a record value. It does not validate. Unlike
// json.Marshal it does not escape <, > and &, which would take 6 bytes each.
func EncodeRequest(r Request) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// DerivedRequestID is the request id of a record that carries none: it is
// derived from the record's coordinates, so reprocessing the same record
// yields the same id, and from its timestamp, so a recreated topic (whose
// offsets start again at 0) never collides with old ids.
func DerivedRequestID(partition int, offset int64, ts time.Time) string {
	b := make([]byte, 0, 48)
	b = append(b, "d-"...)
	b = strconv.AppendInt(b, int64(partition), 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, offset, 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, ts.UnixMilli(), 10)
	return string(b)
}

// decodeStrict decodes exactly one JSON object into v, rejecting invalid
// UTF-8 and unpaired surrogate escapes such as "\ud800" (encoding/json would
// silently replace both by U+FFFD), unknown fields and trailing data.
func decodeStrict(b []byte, max int, v any) error {
	if len(b) > max {
		return fmt.Errorf("%w record: %w: %d bytes, at most %d allowed", ErrInvalid, ErrTooLarge, len(b), max)
	}
	if !utf8.Valid(b) {
		return fmt.Errorf("%w record: not valid UTF-8", ErrInvalid)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w json: %w", ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w json: trailing data after the object", ErrInvalid)
	}
	return checkSurrogates(b)
}

// checkSurrogates rejects a \u escape of a UTF-16 surrogate that is not part
// of a high-low pair: it stands for no character, and encoding/json would
// turn it into U+FFFD.
func checkSurrogates(b []byte) error {
	if i := LoneSurrogate(b); i >= 0 {
		return fmt.Errorf("%w json: unpaired surrogate \\u%s", ErrInvalid, b[i+2:i+6])
	}
	return nil
}

// LoneSurrogate returns the offset in the JSON text b of the first \u
// escape of a UTF-16 surrogate that is not half of a high-low pair, or -1
// when there is none. Such an escape stands for no character, and
// encoding/json silently decodes it as U+FFFD; the record decoders of this
// package refuse it (ErrInvalid), and so does ingest, before decoding a
// body. b need not be valid JSON: a backslash only occurs inside strings
// in valid JSON, so b is scanned escape by escape, and an incomplete or
// malformed escape ends the scan (-1: the JSON decoder reports it). Safe
// for concurrent use.
func LoneSurrogate(b []byte) int {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if i+1 >= len(b) || b[i+1] != 'u' {
			i++ // a one-character escape: skip what it escapes, which may be a backslash
			continue
		}
		r, ok := hex4(b, i+2)
		if !ok {
			return -1
		}
		switch {
		case r >= 0xdc00 && r <= 0xdfff:
			return i // a low half without its high half
		case r >= 0xd800 && r <= 0xdbff:
			if i+7 >= len(b) || b[i+6] != '\\' || b[i+7] != 'u' {
				return i
			}
			if lo, ok := hex4(b, i+8); !ok || lo < 0xdc00 || lo > 0xdfff {
				return i
			}
			i += 11
		default:
			i += 5
		}
	}
	return -1
}

// hex4 decodes the four hex digits of b at i.
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}
