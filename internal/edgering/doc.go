// Package edgering is the consistent-hash ring an edge routes push gateway
// connections by (docs/pushgw.md, "Routing by shard"): ketama on CRC32, as
// nginx's `hash $arg_shard consistent` and HAProxy's `hash-type consistent`
// are. Each member has VirtualNodes points on the ring, at the CRC32 (IEEE)
// of "<name>-<i>" for i in 0..VirtualNodes-1; a key goes to the member of
// the first point at or after the CRC32 of the key, wrapping past the top.
//
// The end-to-end failover test's edge (e2e/failover_test.go) and the
// replica benchmark of pkg/pushgw (bench_replicas_test.go) route by it.
// It is a model of those load balancers, not a copy of any one of them:
// each hashes its members' names in its own way, so the shards a replica
// owns differ between them, while the spread over the replicas and what
// moves when one is added are alike.
//
// A Ring is immutable and safe for concurrent use.
package edgering
