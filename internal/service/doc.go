// Package service wires Turnpike's services from their configuration: the
// settings every binary shares (Kafka, MongoDB, auth, topics, model,
// logging), and one Run function per service that cmd/ingest, cmd/worker,
// cmd/pushgw and cmd/devstack call. Each Run owns what it opens and closes
// it, in order, before returning.
package service
