// Package service holds what is left of the services' wiring: the shared
// settings (Shared) that cmd/replay reads. Ingest and the push gateway are
// pkg/ingest and pkg/pushgw, the worker pkg/worker; this package goes
// when the replay takes its settings into pkg/replay.
package service
