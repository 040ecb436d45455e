// Package replay replays records of a Turnpike topic (the requests topic
// or its DLQ) in batch, for cmd/replay.
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
//     live store already decided are skipped; with RerunFailed, those
//     recorded failed are re-published under a fresh deterministic id.
//   - shadow runs them offline through an agent (the worker's: a chat model
//     agent over the configured model, behind the same bridge), rebuilding
//     each conversation's history from the replayed records in a separate
//     store (memory, or a MongoDB database that is not the live one), and
//     writes the results to a JSONL report only: nothing reaches live
//     history or the stream topic. Conversations run concurrently, each in
//     topic order.
//
// Every replay writes a report (one line per record) and a checkpoint (per
// partition, the first offset not done, the replay id and a fingerprint of
// the selection), atomically replaced every CheckpointInterval; an
// interrupted replay continues with Resume, skipping the records its
// report already has, so each record is reported (and redriven) once.
//
// Run is safe to call concurrently for replays with distinct report and
// checkpoint files. A Summary is plain data.
package replay
