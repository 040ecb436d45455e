// Package embedded starts the in-process stand-ins for Turnpike's outside
// services: a Kafka-protocol broker (franz-go's kfake) and a
// MongoDB-compatible store (FerretDB on SQLite).
//
// Only cmd/devstack and tests may import this package: the ingest, worker and
// pushgw binaries must not link kfake or FerretDB (a test in cmd enforces it).
// Start functions return running servers; Close stops them and waits for
// their goroutines, and is safe to call more than once.
package embedded
