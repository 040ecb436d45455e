package ingest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// stateJSON is the 200 body of GET …/state.
type stateJSON struct {
	Conversation string `json:"conversation"`
	// State is the conversation's state: each key's value, the JSON the
	// agent stored.
	State map[string]json.RawMessage `json:"state"`
	// ActiveAgent is the agent the conversation is left with; absent for
	// the root.
	ActiveAgent string `json:"active_agent,omitempty"`
	// User is the caller's user: state (keys without the prefix).
	User map[string]json.RawMessage `json:"user"`
}

// getState serves GET /v1/conversations/{conversation}/state: the
// conversation's session state as its newest committed turn left it, its
// active agent, and the caller's user: state. A conversation without a
// committed turn for the token's identity (another identity's included)
// is 404, as GET …/messages. tenant: keys are not returned (docs/api.md
// "Session state over the API").
func (s *service) getState(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	id := p.Identity(r.PathValue("conversation"))
	if err := events.ValidateID("conversation", id.Conversation); err != nil {
		badRequest(w, err)
		return
	}
	cs, err := s.history.ConversationState(r.Context(), id)
	switch {
	case errors.Is(err, history.ErrNotFound):
		server.WriteError(w, http.StatusNotFound, server.CodeNotFound, "conversation not found", 0)
		return
	case err != nil:
		s.internal(w, r, id, "", fmt.Errorf("read state: %w", err))
		return
	}
	server.WriteJSON(w, http.StatusOK, stateJSON{
		Conversation: id.Conversation,
		State:        rawValues(cs.Values),
		ActiveAgent:  cs.Agent,
		User:         rawValues(cs.User),
	})
}

// rawValues is m as JSON values (an empty object when m is empty).
func rawValues(m map[string][]byte) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
