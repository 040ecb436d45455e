package pushgw

import (
	"net/http"

	"github.com/turnpike-dev/turnpike/internal/server"
)

// originAllowed checks r's origin for every transport of the gateway
// against the policy of Config.AllowedOrigins (only the origins
// configured, never by the Host header): when it is not allowed it answers
// 403 permission_denied, counts the refusal and returns false.
//
// Tokens, not cookies, authenticate, so a foreign page gains nothing it
// does not already hold a token for; the policy is defence in depth that
// keeps other sites from using a visitor's browser as a client.
func (g *gateway) originAllowed(w http.ResponseWriter, r *http.Request) bool {
	if g.origins.Allowed(r) {
		return true
	}
	g.metrics.rejected.WithLabelValues(rejectOrigin).Inc()
	server.WriteError(w, http.StatusForbidden, server.CodePermissionDenied, "origin not allowed", 0)
	return false
}
