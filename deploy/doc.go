// Package deploy holds Turnpike's Kubernetes manifests (k8s/: a kustomize
// base and the dev and prod overlays) and the code that validates them and
// the Dockerfile: every manifest document decodes strictly into its
// Kubernetes API type, or, for the operators' custom resources (Strimzi,
// KEDA, External Secrets), into a documented subset of their schema; the
// overlays build with kustomize as a library; and the built objects are
// checked for consistency: selectors, ports, probes, ConfigMap and Secret
// references, autoscaler targets, NetworkPolicies, security settings, and
// Turnpike's own invariants (topics, partitions, brokers, drain times).
//
// It is a separate Go module (github.com/turnpike-dev/turnpike/deploy) so
// that the Kubernetes libraries never enter the service binaries' module
// graph; the repository's go.work lets `go test ./...` at the root run its
// tests too.
//
// Every function is safe for concurrent use: none keeps state.
package deploy
