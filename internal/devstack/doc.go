// Package devstack runs the whole Turnpike pipeline in one process: an
// embedded Kafka-protocol broker (kfake), an embedded MongoDB-compatible
// store (FerretDB on SQLite), the ingest API, the worker and the push
// gateway. Given TURNPIKE_KAFKA_BROKERS or TURNPIKE_MONGO_URI it uses those
// instead of the embedded servers.
//
// Its ingest serves the demo chat page at / with dev tokens on: POST
// /v1/dev/token mints a token for any user, so the page can offer a user
// picker, to loopback clients only (unless Config.DevTokensRemote) and
// from the push gateway's allowed origins. Nothing but the devstack turns
// that route on. Every listener is on loopback unless configured otherwise.
//
// Without a configured auth secret it generates one once and keeps it in
// the data directory (SecretFile, mode 0600), so the tokens it minted stay
// valid across restarts. Before it starts anything it listens on every
// address it needs, and reports all that are busy at once, each with the
// TURNPIKE_*_ADDR variable that moves it. When a part fails, that failure
// is the error Run returns, not the other parts' stops it caused.
//
// Run owns every server and goroutine it starts and stops them in order:
// ingest and worker first (no new requests; in-flight runs drain), then the
// push gateway, then the embedded stores, which flush their files.
package devstack
