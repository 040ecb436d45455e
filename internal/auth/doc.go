// Package auth verifies and mints Turnpike's bearer tokens: JWT, HS256 only,
// with claims sub (the user, required), tenant (default "default") and exp
// (required), nbf and iat (optional), decoded exactly: case-sensitive names,
// no duplicates, NumericDates as JSON numbers, no crit header.
//
// A Verifier is immutable and safe for concurrent use.
package auth
