package topic

import "github.com/segmentio/kafka-go"

// Home is the partition of a topic with the given partition count that
// key belongs in: the Java client's default placement, murmur2 of the key
// with the sign bit masked off, modulo the count (kafka-go's
// Murmur2Balancer, librdkafka's murmur2_random). Every Turnpike producer
// places request records there, and the worker moves a record found in
// another partition there. Home panics if partitions < 1.
func Home(key []byte, partitions int) int {
	return kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: key}, ids(partitions)...)
}

// ids returns 0..n-1: the partition ids of a topic of n partitions.
func ids(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
