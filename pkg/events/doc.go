// Package events holds Turnpike's wire schemas: the request record of the
// requests topic and the stream events of the stream topic (which are also
// the objects sent on the push gateway's WebSocket).
//
// Decoding is strict: unknown fields, a wrong version, an identifier that
// breaks the ID rule, invalid UTF-8, a NUL in user content or an oversized
// field is an error, never a silently repaired value. Encoding of stream
// events is hand-written ([AppendEvent]) because it sits on the per-token hot
// path.
//
// Every function in this package is safe for concurrent use; values are plain
// data and are not synchronised.
package events
