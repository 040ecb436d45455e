// Package worker consumes the requests topic in a consumer group and runs
// each request: it loads the history window, runs the eino agent, and hands
// the agent's events to the bridge, which streams tokens to the stream topic
// and commits the turn. A record's offset is committed only once its side
// effects are durable, so a crash re-delivers, and re-delivery is idempotent
// per request id.
//
// Ordering: all records of a conversation share a key and so a partition;
// each partition is processed in topic order.
//
// Goroutines: Run owns everything it starts — one goroutine per assigned
// partition (started through the consumer group generation, so none
// outlives its partition) plus the bridge's two per run — and waits for all
// of them before it returns. A Worker is used by one Run at a time.
package worker
