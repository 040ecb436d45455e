package ingest

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

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
func (s *service) devToken(w http.ResponseWriter, r *http.Request) {
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
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, devTokenBodyBytes))
	if err != nil {
		server.WriteBodyError(w, err)
		return
	}
	f, err := decodeStringFields(body, []string{"user"}, nil)
	if err != nil {
		badRequest(w, err)
		return
	}
	user := f["user"]
	if err := events.ValidateID("user", user); err != nil {
		badRequest(w, err)
		return
	}
	tok, err := s.mint(user)
	if err != nil {
		s.internal(w, r, events.Identity{Tenant: auth.DefaultTenant, User: user}, "", fmt.Errorf("mint dev token: %w", err))
		return
	}
	server.WriteJSON(w, http.StatusOK, devTokenJSON{Token: tok, Tenant: auth.DefaultTenant, User: user})
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
