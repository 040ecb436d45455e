package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/turnpike-dev/turnpike/internal/auth"
	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// resumePath is the pattern of the resume resource (an extension of
// API.md, issue #9).
const resumePath = "/v1/conversations/{conversation}/resume"

// resumeKeyPrefix puts the Idempotency-Keys of resumes in a space of
// their own: the same key on a message and on a resume yields two
// requests. (A key cannot contain NUL.)
const resumeKeyPrefix = "\x00resume\x00"

// postResume serves POST /v1/conversations/{conversation}/resume with body
// {"request_id":"<the interrupted request>","answer":"<text>"}: the answer
// goes through the requests topic like a message, as a record with
// resume_of, and the worker continues the interrupted run with it in the
// conversation's order. 202 as for a message; whether there is something
// to resume is decided by the worker, in order (a resume of anything but
// the conversation's latest, interrupted turn completes rejected).
func (s *Service) postResume(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	id := p.Identity(r.PathValue("conversation"))
	if err := events.ValidateID("conversation", id.Conversation); err != nil {
		badRequest(w, err)
		return
	}
	if err := checkContentType(r.Header.Get("Content-Type")); err != nil {
		badRequest(w, err)
		return
	}
	key, err := idempotencyKey(r.Header)
	if err != nil {
		badRequest(w, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
			server.WriteError(w, http.StatusRequestEntityTooLarge, server.CodePayloadTooLarge, fmt.Sprintf("body over %d bytes", mbe.Limit), 0)
			return
		}
		badRequest(w, fmt.Errorf("read body: %w", err))
		return
	}
	fields, err := decodeStringFields(body, "request_id", "answer")
	if err != nil {
		badRequest(w, err)
		return
	}
	if err := events.ValidateID("request_id", fields["request_id"]); err != nil {
		badRequest(w, err)
		return
	}
	answer := fields["answer"]
	if err := events.ValidateContent(answer, s.cfg.MaxContentBytes); err != nil {
		if errors.Is(err, events.ErrTooLarge) {
			server.WriteError(w, http.StatusRequestEntityTooLarge, server.CodePayloadTooLarge, err.Error(), 0)
			return
		}
		badRequest(w, fmt.Errorf("answer: %w", err))
		return
	}
	if key != "" {
		key = resumeKeyPrefix + key
	}
	s.enqueue(w, r, id, key, "ingest.post_resume", events.Request{Content: answer, Strategy: events.StrategyEnqueue, ResumeOf: fields["request_id"]})
}

// decodeStringFields strictly decodes a JSON object whose members are
// exactly names (each once, each a string): unknown, duplicated, missing or
// non-string members, invalid UTF-8 and trailing data are errors.
func decodeStringFields(b []byte, names ...string) (map[string]string, error) {
	if !utf8.Valid(b) {
		return nil, fmt.Errorf("%w body: not valid UTF-8", events.ErrInvalid)
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("%w body: want a JSON object", events.ErrInvalid)
	}
	out := make(map[string]string, len(names))
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
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w body: %w", events.ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w body: trailing data after the object", events.ErrInvalid)
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("%w body: %s is required", events.ErrInvalid, n)
		}
	}
	return out, nil
}
