package ingest

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"

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
// Config.DevTokens is set (the devstack), and then served only to a
// loopback peer (unless Config.DevTokensRemote), only from a page of
// Config.DevTokenOrigins (or no page), and only as application/json, which
// a foreign page cannot send without a CORS preflight that is never
// granted.
func (s *Service) devToken(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.DevTokensRemote && !loopbackPeer(r) {
		server.WriteError(w, http.StatusForbidden, server.CodePermissionDenied,
			"dev tokens are served to loopback clients only", 0)
		return
	}
	if !s.devOrigins.Allowed(r) {
		server.WriteError(w, http.StatusForbidden, server.CodePermissionDenied, "origin not allowed", 0)
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		badRequest(w, errors.New("Content-Type must be application/json"))
		return
	}
	if err := checkContentType(r.Header.Get("Content-Type")); err != nil {
		badRequest(w, err)
		return
	}
	var req devTokenRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, devTokenBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok || isTimeout(err) {
			server.WriteBodyError(w, err)
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

// loopbackPeer reports whether r comes from a loopback address.
func loopbackPeer(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// isTimeout reports whether err is a read deadline passing.
func isTimeout(err error) bool {
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}
