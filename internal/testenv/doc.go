// Package testenv gives tests their outside services: real servers when
// TURNPIKE_KAFKA_BROKERS / TURNPIKE_MONGO_URI are set, otherwise embedded
// kfake and FerretDB started in-process on random loopback ports and torn
// down by t.Cleanup. Names it hands out are unique per test, so tests can run
// in parallel against a shared real server.
package testenv
