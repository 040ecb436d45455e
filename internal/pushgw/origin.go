package pushgw

import (
	"net/http"

	"github.com/turnpike-dev/turnpike/internal/server"
)

// originPolicy decides which browser origins may open a stream (see
// Config.AllowedOrigins): only those configured, never by the Host header.
//
// Tokens, not cookies, authenticate, so a foreign page gains nothing it
// does not already hold a token for; the policy is defence in depth that
// keeps other sites from using a visitor's browser as a client.
type originPolicy struct{ server.OriginPolicy }

// newOriginPolicy parses Config.AllowedOrigins.
func newOriginPolicy(list []string) (originPolicy, error) {
	p, err := server.NewOriginPolicy(list)
	return originPolicy{p}, err
}

// allowed reports whether r may connect: it has no Origin header, or the
// policy lists its origin.
func (p originPolicy) allowed(r *http.Request) bool { return p.Allowed(r) }

// originAllowed checks r's origin for every transport of the gateway: when
// it is not allowed it answers 403 permission_denied, counts the refusal
// and returns false.
func (g *Gateway) originAllowed(w http.ResponseWriter, r *http.Request) bool {
	if g.origins.allowed(r) {
		return true
	}
	g.metrics.rejected.WithLabelValues(rejectOrigin).Inc()
	server.WriteError(w, http.StatusForbidden, server.CodePermissionDenied, "origin not allowed", 0)
	return false
}
