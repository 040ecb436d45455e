package ingest

import (
	"context"
	"fmt"
	"net/http"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// memoriesPath is the long-term memory resource of the token's user
// (docs/api.md "Memory").
const memoriesPath = "/v1/memories"

// memoryDeleter deletes a user's memories (history.MemoryService's Delete).
type memoryDeleter interface {
	Delete(ctx context.Context, tenant, user, conversation string) (int64, error)
}

var _ memoryDeleter = history.MemoryService(nil)

// deletedJSON is the 200 body of DELETE /v1/memories.
type deletedJSON struct {
	// Conversation is the conversation whose memories were deleted;
	// absent when all of the user's were.
	Conversation string `json:"conversation,omitempty"`
	Deleted      int64  `json:"deleted"`
}

// deleteMemories serves DELETE /v1/memories[?conversation=c]: the token's
// user's memories of conversation c, or all of them, are deleted. Tenant
// and user come from the token only; any other query parameter, a
// repeated or empty conversation, or an invalid name is 400. 200 with the
// count, 0 included (deleting is idempotent).
func (s *service) deleteMemories(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	q := r.URL.Query()
	for k := range q {
		if k != "conversation" {
			badRequest(w, fmt.Errorf("%w query parameter %q: unknown (only conversation)", events.ErrInvalid, k))
			return
		}
	}
	conversation := ""
	if vs, ok := q["conversation"]; ok {
		if len(vs) != 1 {
			badRequest(w, fmt.Errorf("%w conversation: given %d times", events.ErrInvalid, len(vs)))
			return
		}
		if err := events.ValidateID("conversation", vs[0]); err != nil {
			badRequest(w, err)
			return
		}
		conversation = vs[0]
	}
	id := p.Identity(conversation)
	n, err := s.memory.Delete(r.Context(), id.Tenant, id.User, conversation)
	if err != nil {
		s.internal(w, r, id, "", fmt.Errorf("delete memories: %w", err))
		return
	}
	server.WriteJSON(w, http.StatusOK, deletedJSON{Conversation: conversation, Deleted: n})
}
