// Package history keeps Turnpike's conversations: turns of one user message
// and one assistant answer, bound to the identity triple (tenant, user,
// conversation).
//
// A turn is written atomically as one document and is idempotent per request
// id, without multi-document transactions (FerretDB has none, and the same
// code must behave identically on MongoDB). The user message of a running
// request is held pending in memory (Pending) and written only together with
// its answer, so a request that produces no assistant content leaves nothing
// behind.
//
// Store implementations are safe for concurrent use. A Pending belongs to
// one request and is not.
package history
