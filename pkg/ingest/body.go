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
	if events.LoneSurrogate(b) >= 0 {
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
