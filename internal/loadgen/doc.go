// Package loadgen is Turnpike's load and latency harness (cmd/loadgen).
//
// Run drives a running stack the way users do, through the public API
// only: C conversations, each a closed loop of M user messages whose echo
// directives shape the replies ([[tokens:N]], [[delay:D]]), sent over HTTP
// while WebSocket subscriptions (one connection per conversation, or several
// subscriptions per connection) stream the answers. It measures per-token
// latency (receive time − the event's ts, in a log-linear histogram),
// tokens/s, token events/s, turns/s, errors, and the stack's RSS from its
// metrics endpoint. It is also the correctness oracle under load: every
// event is checked against docs/api.md as it arrives (seqs, run.started first,
// no foreign event, exact text, status, order) and every conversation's
// history is read back and compared with what was sent and streamed.
//
// The floor mode measures the same broker with the stream path's own
// kafka-go settings (topic.StreamWriter and topic.PartitionReader with
// topic.LiveMaxWait) and the same load shape, so that pipeline latency can
// be reported as a ratio to what Kafka alone costs.
//
// Latencies compare timestamps of two processes, so the harness and the
// stack must share a clock (the same machine, or well-synchronised ones).
//
// Run is safe to call concurrently (runs share nothing); a Result is plain
// data. Histogram is safe for concurrent use.
package loadgen
