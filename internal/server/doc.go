// Package server holds what every Turnpike HTTP service shares: serving with
// a graceful shutdown, the unauthenticated /healthz, /readyz and /metrics
// endpoints, and the JSON error shape of API.md.
//
// All functions are safe for concurrent use.
package server
