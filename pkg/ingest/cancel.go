package ingest

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// cancelPath is the pattern of the cancel resource.
const cancelPath = "/v1/conversations/{conversation}/cancel"

// canceller durably records cancels (history.Store implements it).
type canceller interface {
	RecordCancel(ctx context.Context, id events.Identity, c history.Cancel) error
}

// positionFinder tells where a conversation's requests are: the requests
// topic, key's home partition, and the end offset of every partition now.
type positionFinder interface {
	End(ctx context.Context, key []byte) (Position, error)
}

// Position is the requests topic as a cancel sees it.
type Position struct {
	Topic string
	// Partition is the key's home partition (topic.Home).
	Partition int
	// Ends holds the end offset of each partition, by partition id.
	Ends []int64
}

// maxCancelBody bounds a cancel's body.
const maxCancelBody = 4 << 10

// postCancel serves POST /v1/conversations/{conversation}/cancel. Without a
// request id it cancels the running and every queued request of the
// conversation: everything whose record precedes the end of its partition
// right now. The cancel is first recorded in the store (so a worker about
// to start, or re-running a request after a crash, finds it), then sent
// over the control topic to the worker running the request.
//
// It is recorded for every partition of the requests topic, with that
// partition's end offset: a record a direct producer wrote to a partition
// other than its home is moved home by the worker, maybe after the
// cancel, and is cancelled when it was written, where it was written,
// before the cancel (see recordCancels).
func (s *service) postCancel(w http.ResponseWriter, r *http.Request, p auth.Principal) {
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
	pos, err := s.positions.End(ctx, key)
	if err != nil {
		s.unavailable(w, r, id, "locate the conversation's partition", err)
		return
	}
	at := s.now().UTC()
	if err := s.recordCancels(ctx, id, pos, requestID, at); err != nil {
		s.unavailable(w, r, id, "record cancel", err)
		return
	}
	ctl := events.Control{V: events.Version, Type: events.ControlCancel, Tenant: id.Tenant, User: id.User,
		Conversation: id.Conversation, RequestID: requestID, At: at}
	if requestID == "" {
		ctl.Partition, ctl.Before = pos.Partition, pos.Ends[pos.Partition]
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
func (s *service) unavailable(w http.ResponseWriter, r *http.Request, id events.Identity, what string, err error) {
	s.log.ErrorContext(r.Context(), what, "status", http.StatusServiceUnavailable, "tenant", id.Tenant, "user", id.User, "conversation", id.Conversation, "err", err)
	server.WriteError(w, http.StatusServiceUnavailable, server.CodeUnavailable, "could not "+what+"; retry later", retryAfter)
}

// cancelWrites bounds the cancel documents one cancel writes at once.
const cancelWrites = 8

// recordCancels records the cancel in every partition of pos: one cancel
// of requestID, or of everything below each partition's end offset. The
// worker checks the partition a record runs in and, for a record it moved
// home, the partition it was first written to; so whichever partition a
// producer chose, a request written before a cancel is cancelled by it.
// All are durable when it returns nil; a failure leaves some recorded,
// which a retry of the cancel completes (cancels only ever widen).
func (s *service) recordCancels(ctx context.Context, id events.Identity, pos Position, requestID string, at time.Time) error {
	if pos.Partition < 0 || pos.Partition >= len(pos.Ends) {
		return fmt.Errorf("home partition %d of %d", pos.Partition, len(pos.Ends))
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(cancelWrites)
	for p, end := range pos.Ends {
		c := history.Cancel{Topic: pos.Topic, Partition: p, RequestID: requestID, At: at}
		if requestID == "" {
			c.Before = end
		}
		g.Go(func() error { return s.cancels.RecordCancel(ctx, id, c) })
	}
	return g.Wait()
}
