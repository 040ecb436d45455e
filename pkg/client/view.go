package client

import (
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Frame types that are not stream events.
const (
	FrameSubscribed = "subscribed"
	FramePong       = "pong"
	FrameError      = "error"
)

// errBadFrame is wrapped by every FrameView.Decode error.
var errBadFrame = errors.New("turnpike: bad frame")

// FrameView is a light decoding of one gateway frame, for readers that must
// keep up with tens of thousands of frames a second (the load generator),
// where Next's strict decoding costs too much.
//
// Decode picks the members it knows out of one JSON object and skips the
// others; it checks the JSON syntax it reads but validates nothing else (no
// ID rule, no required field, no field-per-type rule): use Next for that.
// The byte-slice fields alias the decoded buffer, or the view's own scratch
// space for strings with escapes; they are valid until the next Decode and
// until the buffer is reused. Absent members are left zero.
//
// A FrameView is not safe for concurrent use.
type FrameView struct {
	// Type is the frame's type. The known types (stream events, subscribed,
	// pong, error) are set without allocating.
	Type string
	// Conversation, RequestID and RunID of a stream event; Conversation of a
	// subscribed frame, and of an error frame that names one.
	Conversation, RequestID, RunID []byte
	// Seq and TS of a stream event.
	Seq, TS int64
	// Delta of a token event.
	Delta []byte
	// Status of a run.completed event.
	Status []byte
	// Message of a notice event or an error frame; Code of an error frame.
	Code, Message []byte
	// Cursor of a stream event.
	Cursor []byte

	scratch []byte // unescaped strings
}

// IsEvent reports whether the frame is a stream event of a type this
// package knows: every type of docs/api.md, its extensions included.
func (v *FrameView) IsEvent() bool {
	return knownType(v.Type)
}

// Decode decodes the frame b into v, replacing what v held.
func (v *FrameView) Decode(b []byte) error {
	*v = FrameView{scratch: v.scratch[:0]}
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return fmt.Errorf("%w: want a JSON object", errBadFrame)
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return v.end(b, i+1)
	}
	for {
		key, next, err := v.str(b, i)
		if err != nil {
			return err
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return fmt.Errorf("%w: want ':' at offset %d", errBadFrame, i)
		}
		i = skipSpace(b, i+1)
		switch string(key) {
		case "type":
			var t []byte
			t, i, err = v.str(b, i)
			v.Type = typeName(t)
		case "conversation":
			v.Conversation, i, err = v.str(b, i)
		case "request_id":
			v.RequestID, i, err = v.str(b, i)
		case "run_id":
			v.RunID, i, err = v.str(b, i)
		case "seq":
			v.Seq, i, err = integer(b, i)
		case "ts":
			v.TS, i, err = integer(b, i)
		case "delta":
			v.Delta, i, err = v.str(b, i)
		case "status":
			v.Status, i, err = v.str(b, i)
		case "code":
			v.Code, i, err = v.str(b, i)
		case "message":
			v.Message, i, err = v.str(b, i)
		case "cursor":
			v.Cursor, i, err = v.str(b, i)
		default:
			i, err = skipValue(b, i, 0)
		}
		if err != nil {
			return err
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return fmt.Errorf("%w: unexpected end", errBadFrame)
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
			continue
		case '}':
			return v.end(b, i+1)
		}
		return fmt.Errorf("%w: want ',' or '}' at offset %d", errBadFrame, i)
	}
}

// end checks that only white space follows the object.
func (v *FrameView) end(b []byte, i int) error {
	if skipSpace(b, i) != len(b) {
		return fmt.Errorf("%w: data after the object", errBadFrame)
	}
	return nil
}

// typeName returns t as one of the known type constants when it is one.
func typeName(t []byte) string {
	switch string(t) {
	case string(events.TypeToken):
		return string(events.TypeToken)
	case string(events.TypeRunStarted):
		return string(events.TypeRunStarted)
	case string(events.TypeRunCompleted):
		return string(events.TypeRunCompleted)
	case string(events.TypeNotice):
		return string(events.TypeNotice)
	case FrameSubscribed:
		return FrameSubscribed
	case FramePong:
		return FramePong
	case FrameError:
		return FrameError
	}
	return string(t)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// str reads the JSON string at b[i] and returns its contents and the offset
// after it. Without escapes the contents alias b; otherwise they are
// unescaped into v.scratch.
func (v *FrameView) str(b []byte, i int) ([]byte, int, error) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, fmt.Errorf("%w: want a string at offset %d", errBadFrame, i)
	}
	start := i + 1
	for j := start; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[start:j], j + 1, nil
		case c == '\\':
			return v.unescape(b, start, j)
		case c < 0x20:
			return nil, j, fmt.Errorf("%w: control character in string at offset %d", errBadFrame, j)
		}
	}
	return nil, len(b), fmt.Errorf("%w: unterminated string", errBadFrame)
}

// unescape decodes the string that starts at b[start], whose first escape
// is at b[j], into v.scratch.
func (v *FrameView) unescape(b []byte, start, j int) ([]byte, int, error) {
	from := len(v.scratch)
	out := append(v.scratch, b[start:j]...)
	for j < len(b) {
		c := b[j]
		switch {
		case c == '"':
			v.scratch = out
			return out[from:len(out):len(out)], j + 1, nil
		case c < 0x20:
			return nil, j, fmt.Errorf("%w: control character in string at offset %d", errBadFrame, j)
		case c != '\\':
			out = append(out, c)
			j++
			continue
		}
		if j+1 >= len(b) {
			break
		}
		switch e := b[j+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(b, j+2)
			if !ok {
				return nil, j, fmt.Errorf("%w: bad \\u escape at offset %d", errBadFrame, j)
			}
			j += 6
			if utf16.IsSurrogate(r) {
				// A pair makes one rune; a lone surrogate is U+FFFD, as
				// encoding/json decodes it.
				if r2, ok := hex4(b, j+2); ok && j+1 < len(b) && b[j] == '\\' && b[j+1] == 'u' {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						out = utf8.AppendRune(out, d)
						j += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return nil, j, fmt.Errorf("%w: bad escape at offset %d", errBadFrame, j)
		}
		j += 2
	}
	return nil, len(b), fmt.Errorf("%w: unterminated string", errBadFrame)
}

// hex4 reads the four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// integer reads the JSON integer at b[i].
func integer(b []byte, i int) (int64, int, error) {
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	var n uint64
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		if n > (1<<63)/10 {
			return 0, i, fmt.Errorf("%w: integer overflow at offset %d", errBadFrame, start)
		}
		n = n*10 + uint64(b[i]-'0')
		i++
	}
	switch {
	case i == start:
		return 0, i, fmt.Errorf("%w: want an integer at offset %d", errBadFrame, start)
	case i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E'):
		return 0, i, fmt.Errorf("%w: want an integer at offset %d", errBadFrame, start)
	case n > 1<<63 || (n == 1<<63 && !neg):
		return 0, i, fmt.Errorf("%w: integer overflow at offset %d", errBadFrame, start)
	}
	if neg {
		return -int64(n), i, nil
	}
	return int64(n), i, nil
}

// maxSkipDepth bounds the nesting of skipped values.
const maxSkipDepth = 64

// skipValue skips the JSON value at b[i] (checking only its shape) and
// returns the offset after it.
func skipValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return i, fmt.Errorf("%w: unexpected end", errBadFrame)
	}
	if depth > maxSkipDepth {
		return i, fmt.Errorf("%w: nested too deeply", errBadFrame)
	}
	switch c := b[i]; {
	case c == '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '"':
				return j + 1, nil
			case '\\':
				j++
			}
		}
		return len(b), fmt.Errorf("%w: unterminated string", errBadFrame)
	case c == '{' || c == '[':
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == closing {
			return i + 1, nil
		}
		for {
			var err error
			if c == '{' {
				if i >= len(b) || b[i] != '"' {
					return i, fmt.Errorf("%w: want a key at offset %d", errBadFrame, i)
				}
				if i, err = skipValue(b, i, depth+1); err != nil {
					return i, err
				}
				i = skipSpace(b, i)
				if i >= len(b) || b[i] != ':' {
					return i, fmt.Errorf("%w: want ':' at offset %d", errBadFrame, i)
				}
				i = skipSpace(b, i+1)
			}
			if i, err = skipValue(b, i, depth+1); err != nil {
				return i, err
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return i, fmt.Errorf("%w: unexpected end", errBadFrame)
			}
			if b[i] == closing {
				return i + 1, nil
			}
			if b[i] != ',' {
				return i, fmt.Errorf("%w: want ',' at offset %d", errBadFrame, i)
			}
			i = skipSpace(b, i+1)
		}
	case c == '-' || ('0' <= c && c <= '9'):
		j := i + 1
		for j < len(b) && (('0' <= b[j] && b[j] <= '9') || b[j] == '.' || b[j] == 'e' || b[j] == 'E' || b[j] == '+' || b[j] == '-') {
			j++
		}
		return j, nil
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
			return i + len(lit), nil
		}
	}
	return i, fmt.Errorf("%w: unexpected %q at offset %d", errBadFrame, b[i], i)
}
