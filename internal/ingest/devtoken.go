package ingest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/turnpike-dev/turnpike/internal/auth"
	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// devTokenRequest is the body of POST /v1/dev/token.
type devTokenRequest struct {
	User string `json:"user"`
}

// devTokenJSON is the 200 body of POST /v1/dev/token.
type devTokenJSON struct {
	Token  string `json:"token"`
	Tenant string `json:"tenant"`
	User   string `json:"user"`
}

// devTokenBodyBytes bounds the body of POST /v1/dev/token.
const devTokenBodyBytes = 1 << 10

// devToken serves POST /v1/dev/token {"user":"alice"}: a bearer token of
// tenant "default" for that user, without authentication. Routed only when
// Config.DevTokens is set (the devstack).
func (s *Service) devToken(w http.ResponseWriter, r *http.Request) {
	if err := checkContentType(r.Header.Get("Content-Type")); err != nil {
		badRequest(w, err)
		return
	}
	var req devTokenRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, devTokenBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			server.WriteError(w, http.StatusRequestEntityTooLarge, server.CodePayloadTooLarge,
				fmt.Sprintf("body over %d bytes", devTokenBodyBytes), 0)
			return
		}
		badRequest(w, fmt.Errorf("%w body: want {\"user\":\"<id>\"}: %w", events.ErrInvalid, err))
		return
	}
	if dec.More() {
		badRequest(w, fmt.Errorf("%w body: trailing data after the object", events.ErrInvalid))
		return
	}
	if err := events.ValidateID("user", req.User); err != nil {
		badRequest(w, err)
		return
	}
	tok, err := s.mint(req.User)
	if err != nil {
		s.internal(w, r, events.Identity{Tenant: auth.DefaultTenant, User: req.User}, "", fmt.Errorf("mint dev token: %w", err))
		return
	}
	server.WriteJSON(w, http.StatusOK, devTokenJSON{Token: tok, Tenant: auth.DefaultTenant, User: req.User})
}
