// Package ingest is Turnpike's ingest HTTP API (docs/api.md, "Ingest HTTP API"):
// it accepts user messages, answering 202 only once the request record is
// durably in the requests topic, and it serves a conversation's history and
// the caller's list of conversations (GET /v1/conversations, an extension
// described in the README's Compatibility section).
//
// Each API route runs metrics → auth → handler; tenant and user come only
// from the verified bearer token. The route table in service.go is where
// POST …/cancel goes, and rate limiting (429 rate_limited, keyed by the
// principal) belongs between auth and the handler. Two routes run without
// auth: the demo page (GET / and /ui/…, when Deps.Page is set) and, only
// when Config.DevTokens is set (the devstack), POST /v1/dev/token, which
// mints a token for any user.
//
// A 503 means the outcome of the write is unknown (it may still land), so
// clients retry with the same Idempotency-Key, which yields the same request
// id; the worker persists a request id at most once.
//
// A Service's handler is safe for concurrent use. A KafkaProducer is safe
// for concurrent use; Close it once, after the last Produce has returned.
package ingest
