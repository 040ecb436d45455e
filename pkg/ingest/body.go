package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// readPost does what every POST on a conversation starts with: it checks
// the conversation id and the Content-Type and reads the body, bounded by
// maxBody. When it fails it has answered (400 or 413) and ok is false.
func (s *service) readPost(w http.ResponseWriter, r *http.Request, p auth.Principal, maxBody int64) (id events.Identity, body []byte, ok bool) {
	id = p.Identity(r.PathValue("conversation"))
	if err := events.ValidateID("conversation", id.Conversation); err != nil {
		badRequest(w, err)
		return id, nil, false
	}
	if err := checkContentType(r.Header.Get("Content-Type")); err != nil {
		badRequest(w, err)
		return id, nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		server.WriteBodyError(w, err)
		return id, nil, false
	}
	return id, body, true
}

// decodeStringFields strictly decodes a JSON object whose members are
// string-valued and named in required (each must be present) or optional:
// unknown (names are case-sensitive, unlike encoding/json's), duplicated,
// missing or non-string members, invalid UTF-8 and \u escapes of lone
// surrogates (encoding/json would silently turn either into U+FFFD, and
// content is persisted verbatim) and trailing data are errors.
func decodeStringFields(b []byte, required, optional []string) (map[string]string, error) {
	if !utf8.Valid(b) {
		return nil, fmt.Errorf("%w body: not valid UTF-8", events.ErrInvalid)
	}
	if hasLoneSurrogate(b) {
		return nil, fmt.Errorf("%w body: a \\u escape is a lone UTF-16 surrogate (not a character; encode the pair, or the character in UTF-8)", events.ErrInvalid)
	}
	want := make(map[string]bool, len(required)+len(optional))
	for _, n := range append(append([]string(nil), required...), optional...) {
		want[n] = true
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("%w body: want a JSON object", events.ErrInvalid)
	}
	out := make(map[string]string, len(want))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w body: %w", events.ErrInvalid, err)
		}
		name, _ := tok.(string)
		if !want[name] {
			return nil, fmt.Errorf("%w body: unknown field %q", events.ErrInvalid, truncate(name, 32))
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%w body: duplicate field %q", events.ErrInvalid, name)
		}
		tok, err = dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w body: %w", events.ErrInvalid, err)
		}
		v, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("%w body: %s must be a string", events.ErrInvalid, name)
		}
		out[name] = v
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fmt.Errorf("%w body: %w", events.ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w body: trailing data after the object", events.ErrInvalid)
	}
	for _, n := range required {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("%w body: %s is required", events.ErrInvalid, n)
		}
	}
	return out, nil
}

// hasLoneSurrogate reports whether the JSON text b has a \u escape of a
// UTF-16 surrogate that is not half of a high-low pair. A backslash only
// occurs inside strings in valid JSON, so b is scanned escape by escape.
func hasLoneSurrogate(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if i+1 >= len(b) || b[i+1] != 'u' {
			i++ // a one-character escape: skip what it escapes
			continue
		}
		r, ok := hex4(b, i+2)
		if !ok {
			return false // not valid JSON: the decoder reports it
		}
		i += 5
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return true // a low half without its high half
		case r >= 0xD800 && r <= 0xDBFF:
			if i+6 >= len(b) || b[i+1] != '\\' || b[i+2] != 'u' {
				return true
			}
			lo, ok := hex4(b, i+3)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 6
		}
	}
	return false
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
