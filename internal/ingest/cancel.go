package ingest

import (
	"context"
	"net/http"

	"github.com/turnpike-dev/turnpike/internal/auth"
	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// cancelPath is the pattern of the cancel resource.
const cancelPath = "/v1/conversations/{conversation}/cancel"

// Canceller durably records cancels (history.Store implements it).
type Canceller interface {
	RecordCancel(ctx context.Context, id events.Identity, c history.Cancel) error
}

// Positions tells where a conversation's requests go: the requests topic,
// the partition of key, and that partition's end offset now.
type Positions interface {
	End(ctx context.Context, key []byte) (topic string, partition int, end int64, err error)
}

// maxCancelBody bounds a cancel's body.
const maxCancelBody = 4 << 10

// postCancel serves POST /v1/conversations/{conversation}/cancel. Without a
// request id it cancels the running and every queued request of the
// conversation: everything whose record precedes the end of the
// conversation's partition right now. The cancel is first recorded in the
// store (so a worker about to start, or re-running a request after a
// crash, finds it), then sent over the control topic to the worker running
// the request.
func (s *Service) postCancel(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	id, body, ok := s.readPost(w, r, p, maxCancelBody)
	if !ok {
		return
	}
	var requestID string
	if len(body) > 0 {
		f, err := decodeStringFields(body, nil, []string{"request_id"})
		if err != nil {
			badRequest(w, err)
			return
		}
		if requestID = f["request_id"]; requestID != "" {
			if err := events.ValidateID("request_id", requestID); err != nil {
				badRequest(w, err)
				return
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.cfg.ProduceTimeout)
	defer cancel()
	key := []byte(id.Key())
	topicName, partition, end, err := s.positions.End(ctx, key)
	if err != nil {
		s.unavailable(w, r, id, "locate the conversation's partition", err)
		return
	}
	c := history.Cancel{Topic: topicName, Partition: partition, RequestID: requestID, At: s.now().UTC()}
	if requestID == "" {
		c.Before = end
	}
	if err := s.cancels.RecordCancel(ctx, id, c); err != nil {
		s.unavailable(w, r, id, "record cancel", err)
		return
	}
	ctl := events.Control{V: events.Version, Type: events.ControlCancel, Tenant: id.Tenant, User: id.User,
		Conversation: id.Conversation, RequestID: requestID, At: c.At}
	if requestID == "" {
		ctl.Partition, ctl.Before = partition, end
	}
	v, err := events.EncodeControl(ctl)
	if err != nil {
		s.internal(w, r, id, requestID, err)
		return
	}
	if err := s.control.Produce(ctx, key, v); err != nil {
		// The cancel is recorded: queued requests and re-runs will see it;
		// only a run in progress would finish. The client may retry.
		s.unavailable(w, r, id, "publish cancel", err)
		return
	}
	server.WriteJSON(w, http.StatusAccepted, map[string]string{"status": "cancelling"})
}

// unavailable answers 503 with Retry-After and logs err.
func (s *Service) unavailable(w http.ResponseWriter, r *http.Request, id events.Identity, what string, err error) {
	s.log.ErrorContext(r.Context(), what, "status", http.StatusServiceUnavailable, "tenant", id.Tenant, "user", id.User, "conversation", id.Conversation, "err", err)
	server.WriteError(w, http.StatusServiceUnavailable, server.CodeUnavailable, "could not "+what+"; retry later", retryAfter)
}
