// Package auth verifies and mints Turnpike's bearer tokens: JWT, HS256 only,
// with claims sub (the user, required), tenant (default "default") and exp
// (required), nbf and iat (optional), decoded exactly: case-sensitive names,
// no duplicates, NumericDates as JSON numbers, no crit header.
//
// Ingest and the push gateway verify every request's token with a Verifier
// on TURNPIKE_AUTH_SECRET. A team's own sign-in service mints its users'
// tokens with Mint and the same secret (docs/api.md, "Authentication"):
//
//	tok, err := auth.Mint(secret, "acme", "alice", time.Hour, time.Now())
//	// the browser or service then sends "Authorization: Bearer "+tok
//
// Goroutine safety: a Verifier is immutable and safe for concurrent use;
// Mint and BearerToken are pure functions, safe to call from any goroutine.
package auth
