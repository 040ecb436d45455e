package ingest

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// resumePath is the pattern of the resume resource (an extension, in
// docs/api.md).
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
func (s *service) postResume(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	id, body, ok := s.readPost(w, r, p, s.cfg.MaxBodyBytes)
	if !ok {
		return
	}
	key, err := idempotencyKey(r.Header)
	if err != nil {
		badRequest(w, err)
		return
	}
	fields, err := decodeStringFields(body, []string{"request_id", "answer"}, nil)
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
