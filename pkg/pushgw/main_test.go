package pushgw

import (
	"os"
	"testing"
)

// TestMain runs the tests, or, in the load process of the benchmarks
// (bench_test.go), the broker, producer and clients, or in a replica
// process of BenchmarkReplicaScaling (bench_replicas_test.go), a gateway.
func TestMain(m *testing.M) {
	if os.Getenv(benchLoadEnv) != "" {
		os.Exit(runBenchLoad())
	}
	if os.Getenv(benchReplicaEnv) != "" {
		os.Exit(runBenchReplica())
	}
	os.Exit(m.Run())
}
