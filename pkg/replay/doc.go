// Package replay replays records of a Turnpike topic (the requests topic
// or its DLQ) in batch: it is cmd/replay (Main without options), and a Go
// program's replay binary that runs the program's own eino agent in
// shadow mode:
//
//	func main() { replay.Main(worker.WithAgentFactory(newAgent)) }
//	// go run . -mode shadow -since 2h -kafka-brokers kafka:9092 -report new.jsonl
//
// Compare a new agent with what production answered before shipping it.
//
// A replay selects records by partition and offset range or by time range
// (Kafka's offset-for-time lookup), filtered by the tenant, user or
// conversation of their key, and runs in one of two modes:
//
//   - redrive re-publishes them to the requests topic, keeping their keys,
//     replacing the DLQ headers by replay headers (source coordinates and
//     replay id), and carrying the request id the worker gives the original
//     record (derived from its original coordinates when it had none), so
//     the worker's idempotence makes a redrive safe to repeat. Requests the
//     live store already decided are skipped; with -rerun-failed, those
//     recorded failed are re-published under a fresh deterministic id.
//   - shadow runs them offline, each through the worker's own run step
//     (worker.Step: the window with an interrupted answer's question,
//     compaction, the agent through the bridge, the resume of an
//     interrupt, what is persisted), so the report's answers are what the
//     worker would persist. The agent is the options' (worker.WithAgent,
//     worker.WithAgentFactory and their hooks), else the settings', as
//     cmd/worker builds it: the agent configuration file (-agent-config),
//     else one chat model agent on -model (with -agent direct, the model
//     streamed directly: no tools, faster). Each conversation's history is
//     rebuilt from the replayed records in a separate store (memory, or a
//     MongoDB database that is not the live one); results go to a JSONL
//     report only: nothing reaches live history or the stream topic.
//     Conversations run concurrently (-concurrency, default 64), each in
//     topic order.
//
// Every replay writes a report (one line per record) and a checkpoint (per
// partition, the first offset not done, the replay id and a fingerprint of
// the selection), atomically replaced every -checkpoint-interval (default
// 1s); an interrupted replay continues with -resume, skipping the records
// its report already has, so each record is reported (and redriven) once.
//
// The settings are flags or TURNPIKE_* environment variables (replay -h
// lists them with their defaults; the README's "Replaying topics" section
// explains them). The agent's settings (-window, -compact-tokens,
// -compact-keep, -run-timeout, -max-content-bytes, -model…) mean what they
// mean for the worker and read the same environment variables.
//
// Main and MainArgs may be called concurrently (from tests) for replays
// with distinct report and checkpoint files; the options' agent factory
// and hooks are called concurrently for requests of different
// conversations, one request at a time for each conversation.
package replay
