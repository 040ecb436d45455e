package worker_test

import (
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/pkg/history"
)

// BenchmarkMisplaced measures what records placed outside their home
// partition cost: the same requests (6,000 conversations, one short echo
// request each, 8 partitions, in-memory store) placed by Murmur2 (all
// home) and by librdkafka's default CRC32 (7 in 8 moved first).
//
//	go test -run '^$' -bench Misplaced -benchtime 1x ./pkg/worker/
func BenchmarkMisplaced(b *testing.B) {
	for _, p := range []struct {
		name      string
		placement kafka.Balancer
	}{
		{"placement=murmur2", &kafka.Murmur2Balancer{}},
		{"placement=crc32", kafka.CRC32Balancer{Consistent: true}},
	} {
		b.Run(p.name, func(b *testing.B) {
			for range b.N {
				rate, _, _ := runOrdering(b, history.NewMemoryStore(), "key", 8, 6000, "hello", p.placement)
				b.ReportMetric(rate, "turns/s")
			}
		})
	}
}
