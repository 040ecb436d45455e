package topic_test

import (
	"testing"

	"github.com/turnpike-dev/turnpike/internal/topic"
)

// The murmur2 values of Kafka's own test of its Java client
// (org.apache.kafka.common.utils.UtilsTest.testMurmur2): Home must place a
// key where the Java client's default partitioner does,
// toPositive(murmur2(key)) % partitions.
func TestHomeIsTheJavaClientsPlacement(t *testing.T) {
	t.Parallel()
	javaMurmur2 := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for key, h := range javaMurmur2 {
		for _, n := range []int{1, 3, 12, 24, 100} {
			want := int(uint32(h)&0x7fffffff) % n
			if got := topic.Home([]byte(key), n); got != want {
				t.Errorf("Home(%q, %d) = %d, want %d (the Java client's)", key, n, got, want)
			}
		}
	}
}
