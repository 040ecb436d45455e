package ingest

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// conversationJSON is one conversation of GET /v1/conversations.
type conversationJSON struct {
	Conversation string `json:"conversation"`
	UpdatedAt    string `json:"updated_at"`
	Messages     int64  `json:"messages"`
}

// conversationsJSON is the 200 body of GET /v1/conversations.
type conversationsJSON struct {
	Conversations []conversationJSON `json:"conversations"`
	NextBefore    *string            `json:"next_before"`
}

// listConversations serves GET /v1/conversations?limit=&before=: the
// caller's conversations, newest first by last activity (ties by name,
// descending). next_before is an opaque cursor to pass as before for the
// next older page, null on the last one.
func (s *service) listConversations(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	q := r.URL.Query()
	limit, ok, err := intParam(q, "limit", 1, int64(s.cfg.HistoryMaxLimit))
	if err != nil {
		badRequest(w, err)
		return
	}
	if !ok {
		limit = int64(s.cfg.HistoryDefaultLimit)
	}
	before, err := cursorParam(q, "before")
	if err != nil {
		badRequest(w, err)
		return
	}
	page, err := s.history.Conversations(r.Context(), p.Tenant, p.User, before, int(limit))
	if err != nil {
		s.internal(w, r, p.Identity(""), "", fmt.Errorf("list conversations: %w", err))
		return
	}
	out := conversationsJSON{Conversations: make([]conversationJSON, len(page.Conversations))}
	for i, c := range page.Conversations {
		out.Conversations[i] = conversationJSON{
			Conversation: c.Conversation,
			UpdatedAt:    c.UpdatedAt.UTC().Format(createdAtLayout),
			Messages:     c.Messages,
		}
	}
	if !page.Next.IsZero() {
		next := formatCursor(page.Next)
		out.NextBefore = &next
	}
	server.WriteJSON(w, http.StatusOK, out)
}

// formatCursor encodes a listing position for next_before:
// "<unix milliseconds>:<conversation>". Clients treat it as opaque.
func formatCursor(c history.ConversationCursor) string {
	return strconv.FormatInt(c.UpdatedAt.UnixMilli(), 10) + ":" + c.Conversation
}

// cursorParam parses query parameter name as a cursor of formatCursor's
// form; the zero cursor when absent.
func cursorParam(q url.Values, name string) (history.ConversationCursor, error) {
	vs, ok := q[name]
	if !ok {
		return history.ConversationCursor{}, nil
	}
	if len(vs) != 1 {
		return history.ConversationCursor{}, fmt.Errorf("%w %s: given %d times", events.ErrInvalid, name, len(vs))
	}
	bad := fmt.Errorf("%w %s: not a next_before of this API", events.ErrInvalid, name)
	ms, conv, found := strings.Cut(vs[0], ":")
	if !found {
		return history.ConversationCursor{}, bad
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	// Dates past year 9999 do not survive RFC 3339 or BSON; refuse them.
	if err != nil || n <= 0 || n > maxCursorMillis || events.ValidateID("conversation", conv) != nil {
		return history.ConversationCursor{}, bad
	}
	return history.ConversationCursor{UpdatedAt: time.UnixMilli(n).UTC(), Conversation: conv}, nil
}

// maxCursorMillis is 9999-12-31T23:59:59.999Z in Unix milliseconds.
const maxCursorMillis = 253402300799999
