// Package server holds what every Turnpike HTTP service shares: serving with
// a graceful shutdown and the hardening of every server (timeouts, net/http's
// own errors in the JSON shape, no path redirects, early answers that do not
// wait for the body), the unauthenticated /healthz, /readyz and /metrics
// endpoints, the JSON error shape of docs/api.md with a code per status, and the
// browser origin policy (OriginPolicy).
//
// All functions are safe for concurrent use.
package server
