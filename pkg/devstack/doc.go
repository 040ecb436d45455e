// Package devstack runs the whole Turnpike pipeline in one process with
// the caller's eino agent, for a team's local development and for tests:
// an embedded Kafka-protocol broker (kfake) and an embedded
// MongoDB-compatible store (FerretDB on SQLite), both keeping their files
// in a data directory, the ingest API (pkg/ingest) with the demo page, the
// push gateway (pkg/pushgw), and a worker (pkg/worker) running the agent
// of pkg/worker's options (none: the agent file's, else one agent on
// Config.Worker.Model). It is cmd/devstack with Go agent code:
//
//	func main() { devstack.Main(worker.WithAgentFactory(newAgent)) }
//
// Run runs it until its context ends; Start returns once every part
// serves, with a Stack saying where (the addresses, the broker, the store,
// the auth secret) and Close and Wait. Point it at a real Kafka or MongoDB
// with Config.Worker.Brokers or MongoURI (TURNPIKE_KAFKA_BROKERS,
// TURNPIKE_MONGO_URI): then that part is not embedded. Not for
// production: use pkg/worker there, with pkg/ingest and pkg/pushgw.
//
// Its ingest serves the demo chat page at / with dev tokens on: POST
// /v1/dev/token mints a token for any user, so the page can offer a user
// picker, to loopback clients only (unless Config.DevTokensRemote) and
// from the push gateway's allowed origins. Nothing but the devstack turns
// that route on. Every listener is on loopback unless configured
// otherwise.
//
// Without a configured auth secret it generates one once and keeps it in
// the data directory (file auth-secret, mode 0600), so the tokens it
// minted stay valid across restarts. Before it starts anything it listens
// on every address it needs, and reports all that are busy at once, each
// with the TURNPIKE_*_ADDR variable that moves it. When a part fails, that
// failure is the error Run returns, not the other parts' stops it caused.
//
// A running devstack owns every server and goroutine it starts and stops
// them in order: ingest and worker first (no new requests; in-flight runs
// drain), then the push gateway, then the embedded stores, which flush
// their files.
package devstack
