package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// historyReader reads pages of a conversation and of a user's conversation
// listing (history.Store has both), and a conversation's session state
// (history.StateReader).
type historyReader interface {
	history.StateReader
	// List returns up to limit messages with seq < before (before <= 0:
	// the newest), oldest first; history.ErrNotFound if the conversation
	// does not exist for id.
	List(ctx context.Context, id events.Identity, before int64, limit int) (history.Page, error)
	// Conversations returns up to limit conversations of tenant/user after
	// before (zero: from the newest), newest first.
	Conversations(ctx context.Context, tenant, user string, before history.ConversationCursor, limit int) (history.ConversationPage, error)
}

// A MongoStore is what cmd/ingest passes as the HistoryReader; a
// MemoryStore serves too.
var (
	_ historyReader = (*history.MongoStore)(nil)
	_ historyReader = (*history.MemoryStore)(nil)
)

// createdAtLayout is RFC 3339 with milliseconds.
const createdAtLayout = "2006-01-02T15:04:05.000Z07:00"

// messageJSON is one message of GET …/messages.
type messageJSON struct {
	Seq       int64  `json:"seq"`
	Role      string `json:"role"`
	Content   string `json:"content"`
	RequestID string `json:"request_id"`
	Agent     string `json:"agent"`
	CreatedAt string `json:"created_at"`
	// Status and Incomplete are set on assistant messages only.
	Status     *events.Status `json:"status,omitempty"`
	Incomplete *bool          `json:"incomplete,omitempty"`
	// Usage (the run's token usage, when the model reported it) and
	// Interrupt (what an interrupted answer asks) extend the contract (docs/api.md).
	Usage     *events.Usage     `json:"usage,omitempty"`
	Interrupt *events.Interrupt `json:"interrupt,omitempty"`
}

// pageJSON is the 200 body of GET …/messages.
type pageJSON struct {
	Messages   []messageJSON `json:"messages"`
	NextBefore *int64        `json:"next_before"`
}

// listMessages serves GET /v1/conversations/{conversation}/messages.
func (s *service) listMessages(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	id := p.Identity(r.PathValue("conversation"))
	if err := events.ValidateID("conversation", id.Conversation); err != nil {
		badRequest(w, err)
		return
	}
	q := r.URL.Query()
	limit, ok, err := intParam(q, "limit", 1, int64(s.cfg.HistoryMaxLimit))
	if err != nil {
		badRequest(w, err)
		return
	}
	if !ok {
		limit = int64(s.cfg.HistoryDefaultLimit)
	}
	before, _, err := intParam(q, "before", 1, 0)
	if err != nil {
		badRequest(w, err)
		return
	}
	page, err := s.history.List(r.Context(), id, before, int(limit))
	switch {
	case errors.Is(err, history.ErrNotFound):
		server.WriteError(w, http.StatusNotFound, server.CodeNotFound, "conversation not found", 0)
		return
	case err != nil:
		s.internal(w, r, id, "", fmt.Errorf("list history: %w", err))
		return
	}
	server.WriteJSON(w, http.StatusOK, toPageJSON(page))
}

func toPageJSON(p history.Page) pageJSON {
	out := pageJSON{Messages: make([]messageJSON, len(p.Messages))}
	for i, m := range p.Messages {
		out.Messages[i] = messageJSON{
			Seq:       m.Seq,
			Role:      string(m.Role),
			Content:   m.Content,
			RequestID: m.RequestID,
			Agent:     m.Agent,
			CreatedAt: m.CreatedAt.UTC().Format(createdAtLayout),
		}
		if m.Role == history.RoleAssistant {
			status, incomplete := m.Status, m.Incomplete()
			out.Messages[i].Status, out.Messages[i].Incomplete = &status, &incomplete
			out.Messages[i].Usage = m.Usage
			if in := m.Interrupt; in != nil {
				out.Messages[i].Interrupt = &events.Interrupt{Agent: in.Agent, Tool: in.Tool, Question: in.Question}
			}
		}
	}
	if p.NextBefore > 0 {
		out.NextBefore = &p.NextBefore
	}
	return out
}

// intParam parses query parameter name as an integer >= lo and, when
// hi > 0, <= hi. ok reports whether it was present.
func intParam(q url.Values, name string, lo, hi int64) (v int64, ok bool, err error) {
	vs, ok := q[name]
	if !ok {
		return 0, false, nil
	}
	if len(vs) != 1 {
		return 0, true, fmt.Errorf("%w %s: given %d times", events.ErrInvalid, name, len(vs))
	}
	v, err = strconv.ParseInt(vs[0], 10, 64)
	if err != nil || v < lo || (hi > 0 && v > hi) {
		if hi > 0 {
			return 0, true, fmt.Errorf("%w %s: want an integer in %d..%d", events.ErrInvalid, name, lo, hi)
		}
		return 0, true, fmt.Errorf("%w %s: want an integer >= %d", events.ErrInvalid, name, lo)
	}
	return v, true, nil
}
