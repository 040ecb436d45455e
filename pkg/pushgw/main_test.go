package pushgw

import (
	"os"
	"testing"
)

// TestMain runs the tests, or, in the load process of the benchmarks
// (bench_test.go), the broker, producer and clients.
func TestMain(m *testing.M) {
	if os.Getenv(benchLoadEnv) != "" {
		os.Exit(runBenchLoad())
	}
	os.Exit(m.Run())
}
