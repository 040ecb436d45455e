// Package cli is the turnpike command-line client: send a message and watch
// its answer stream, watch a conversation, read its history. It talks to a
// running stack through the public API only (pkg/client). One command talks
// to Kafka instead: `turnpike topics` creates the topics that do not exist
// yet, for deployments (deploy/k8s runs it as a Job).
//
// Run may be called from several goroutines at once: it keeps no state.
package cli
