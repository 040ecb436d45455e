// Package auth verifies and mints Turnpike's bearer tokens: JWT, HS256 only,
// with claims sub (the user, required), tenant (default "default") and exp
// (required).
//
// A Verifier is immutable and safe for concurrent use.
package auth
