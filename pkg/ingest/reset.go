package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// resetPath is the pattern of the state reset resource (an extension, in
// docs/api.md "Resetting a conversation's state").
const resetPath = "/v1/conversations/{conversation}/state/reset"

// resetKeyPrefix puts the Idempotency-Keys of resets in a space of their
// own, as resumeKeyPrefix does for resumes.
const resetKeyPrefix = "\x00reset\x00"

// maxResetBody bounds a reset's body: {"state":false,"agent":false} with
// room for whitespace.
const maxResetBody = 1 << 10

// postReset serves POST /v1/conversations/{conversation}/state/reset with
// an optional body {"state":bool,"agent":bool} (absent or empty: both
// true): the reset goes through the requests topic as a record with
// reset, keyed by the token's identity, and the worker applies it in the
// conversation's order, after the requests queued before it. 202 as for a
// message; the request's run.completed (complete) says when it took effect.
func (s *service) postReset(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	id, body, ok := s.readPost(w, r, p, maxResetBody)
	if !ok {
		return
	}
	key, err := idempotencyKey(r.Header)
	if err != nil {
		badRequest(w, err)
		return
	}
	reset, err := decodeReset(body)
	if err != nil {
		badRequest(w, err)
		return
	}
	if key != "" {
		key = resetKeyPrefix + key
	}
	s.enqueue(w, r, id, key, "ingest.post_reset", events.Request{Strategy: events.StrategyEnqueue, Reset: &reset})
}

// decodeReset decodes a reset's body strictly (events.Reset's rules: no
// unknown or duplicated member, booleans only); an empty body resets both.
func decodeReset(b []byte) (events.Reset, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return events.Reset{State: true, Agent: true}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var r events.Reset
	if err := dec.Decode(&r); err != nil {
		return events.Reset{}, fmt.Errorf("%w body: %w", events.ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return events.Reset{}, fmt.Errorf("%w body: trailing data after the object", events.ErrInvalid)
	}
	if !r.State && !r.Agent {
		return events.Reset{}, fmt.Errorf("%w body: the reset clears nothing (want state, agent or both true)", events.ErrInvalid)
	}
	return r, nil
}
