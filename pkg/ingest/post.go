package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// idempotencyHeader names the optional client-chosen key of a POST.
const idempotencyHeader = "Idempotency-Key"

// accepted is the 202 body of a POST.
type accepted struct {
	RequestID    string `json:"request_id"`
	Conversation string `json:"conversation"`
	Status       string `json:"status"`
}

// postMessage serves POST /v1/conversations/{conversation}/messages: it
// answers 202 only once the request record is durably in the requests topic.
func (s *service) postMessage(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	id, body, ok := s.readPost(w, r, p, s.cfg.MaxBodyBytes)
	if !ok {
		return
	}
	key, err := idempotencyKey(r.Header)
	if err != nil {
		badRequest(w, err)
		return
	}
	msg, err := decodeMessage(body)
	if err != nil {
		badRequest(w, err)
		return
	}
	if err := events.ValidateContent(msg.Content, s.cfg.MaxContentBytes); err != nil {
		if errors.Is(err, events.ErrTooLarge) {
			server.WriteError(w, http.StatusRequestEntityTooLarge, server.CodePayloadTooLarge, err.Error(), 0)
			return
		}
		badRequest(w, err)
		return
	}
	if err := msg.Strategy.Validate(); err != nil {
		badRequest(w, err)
		return
	}
	if msg.Strategy == "" {
		msg.Strategy = events.StrategyEnqueue
	}

	s.enqueue(w, r, id, key, "ingest.post_message", events.Request{Content: msg.Content, Strategy: msg.Strategy})
}

// enqueue rate-limits and admits a request of id, gives it its request id
// (derived from the Idempotency-Key when there is one) and writes its record,
// with req's content, strategy and resume_of, to the requests topic: 202
// once it is durably there.
func (s *service) enqueue(w http.ResponseWriter, r *http.Request, id events.Identity, key, spanName string, req events.Request) {
	var err error
	if ok, wait := s.limiter.allow(id.Tenant + "/" + id.User); !ok {
		s.metrics.limited.WithLabelValues("rate").Inc()
		server.WriteError(w, http.StatusTooManyRequests, server.CodeRateLimited, "too many requests; slow down", wait)
		return
	}
	var requestID string
	if key != "" {
		requestID = idempotentRequestID(id, key)
	} else if requestID, err = s.randomRequestID(); err != nil {
		s.internal(w, r, id, "", err)
		return
	}
	if !s.queued.admit(requestID, id.Key(), id.Tenant, s.cfg.MaxQueuedPerConversation, s.cfg.MaxQueuedPerTenant) {
		s.metrics.limited.WithLabelValues("queued").Inc()
		server.WriteError(w, http.StatusTooManyRequests, server.CodeRateLimited,
			"too many requests queued for this conversation or tenant; wait for some to finish", retryAfter)
		return
	}
	req.V, req.RequestID, req.CreatedAt = events.Version, requestID, s.now().UTC()
	req.Tenant, req.User, req.Conversation = id.Tenant, id.User, id.Conversation
	value, err := events.EncodeRequest(req)
	if err != nil {
		s.internal(w, r, id, requestID, err)
		return
	}

	// The outcome must be known whether or not the client is still there.
	ctx, span := s.tracing.Start(s.tracing.FromHTTP(context.WithoutCancel(r.Context()), r.Header), spanName,
		attribute.String("turnpike.tenant", id.Tenant), attribute.String("turnpike.conversation", id.Conversation),
		attribute.String("turnpike.request_id", requestID))
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ProduceTimeout)
	err = s.producer.Produce(ctx, []byte(id.Key()), value)
	cancel()
	if err != nil {
		s.queued.forget(requestID)
		s.metrics.produceErrors.Inc()
		span.RecordError(err)
		s.log.ErrorContext(r.Context(), "produce request", "status", http.StatusServiceUnavailable,
			"tenant", id.Tenant, "user", id.User, "conversation", id.Conversation, "request_id", requestID, "err", err)
		server.WriteError(w, http.StatusServiceUnavailable, server.CodeUnavailable,
			"could not queue the request; retry later (an Idempotency-Key makes the retry safe)", retryAfter)
		return
	}
	server.WriteJSON(w, http.StatusAccepted, accepted{RequestID: requestID, Conversation: id.Conversation, Status: "queued"})
}

// internal answers 500 and logs err (never the message content).
func (s *service) internal(w http.ResponseWriter, r *http.Request, id events.Identity, requestID string, err error) {
	level := slog.LevelError
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		level = slog.LevelInfo // the client went away: not a fault of ours
	}
	s.log.Log(r.Context(), level, "internal error", "status", http.StatusInternalServerError,
		"route", r.Pattern, "tenant", id.Tenant, "user", id.User, "conversation", id.Conversation, "request_id", requestID, "err", err)
	server.WriteError(w, http.StatusInternalServerError, server.CodeInternal, "internal error", 0)
}

// checkContentType accepts no Content-Type, application/json in UTF-8, and
// application/x-www-form-urlencoded, which curl -d sends unless told
// otherwise: the body is parsed as JSON in every case.
func checkContentType(v string) error {
	if v == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(v)
	if err != nil || (mt != "application/json" && mt != "application/x-www-form-urlencoded") {
		return errors.New("Content-Type must be application/json")
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return errors.New("Content-Type charset must be utf-8")
	}
	return nil
}

// idempotencyKey returns the Idempotency-Key header, "" when absent.
func idempotencyKey(h http.Header) (string, error) {
	vs := h.Values(idempotencyHeader)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		if err := events.ValidateID(idempotencyHeader, vs[0]); err != nil {
			return "", err
		}
		return vs[0], nil
	}
	return "", fmt.Errorf("%w %s: given %d times", events.ErrInvalid, idempotencyHeader, len(vs))
}

// idempotentRequestID derives the request id of a keyed POST, so the same
// identity and key always yield the same id: "i-" and the first 32 hex
// digits of sha256(tenant NUL user NUL conversation NUL key).
func idempotentRequestID(id events.Identity, key string) string {
	h := sha256.New()
	for _, part := range []string{id.Tenant, "\x00", id.User, "\x00", id.Conversation, "\x00", key} {
		h.Write([]byte(part))
	}
	var sum [sha256.Size]byte
	return "i-" + hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// randomRequestID returns "r-" and 32 random hex digits.
func (s *service) randomRequestID() (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(s.random, b[:]); err != nil {
		return "", fmt.Errorf("random request id: %w", err)
	}
	return "r-" + hex.EncodeToString(b[:]), nil
}

// message is the body of a POST.
type message struct {
	Content  string
	Strategy events.Strategy
}

// decodeMessage strictly decodes {"content": "…", "strategy": "…"}
// (strategy optional, but not empty when given).
func decodeMessage(b []byte) (message, error) {
	f, err := decodeStringFields(b, []string{"content"}, []string{"strategy"})
	if err != nil {
		return message{}, err
	}
	if st, ok := f["strategy"]; ok && st == "" {
		return message{}, fmt.Errorf("%w strategy \"\": want enqueue, reject or interrupt, or leave it out for enqueue", events.ErrInvalid)
	}
	return message{Content: f["content"], Strategy: events.Strategy(f["strategy"])}, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
