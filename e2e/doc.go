// Package e2e holds Turnpike's end-to-end tests: the whole devstack runs
// in-process on random loopback ports, and the tests drive it over real
// HTTP, the Kafka protocol and a real WebSocket, through the public API
// only (pkg/client), exactly as a user would.
package e2e
