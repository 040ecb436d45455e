package main

import (
	"encoding/binary"
	"hash"
)

// murmur2 is Kafka's murmur2 (the Java client's Utils.murmur2, seed
// 0x9747b28c), the hash of the home partition.
func murmur2(b []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	for ; len(b) >= 4; b = b[4:] {
		k := binary.LittleEndian.Uint32(b)
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// homePartition is the partition of a topic of n partitions that key
// belongs in: (murmur2(key) & 0x7fffffff) % n, the Java client's default.
// Turnpike runs a request there, and moves a record found elsewhere there
// first.
func homePartition(key []byte, n int) int {
	return int(murmur2(key)&0x7fffffff) % n
}

// murmur2Hash is murmur2 as a hash.Hash32, for sarama's custom hash
// partitioner (sarama.WithCustomHashFunction). murmur2 is not
// incremental: it keeps what is written and hashes it in Sum32.
type murmur2Hash struct{ b []byte }

// newMurmur2 is the hash function to give sarama.WithCustomHashFunction.
func newMurmur2() hash.Hash32 { return &murmur2Hash{} }

func (h *murmur2Hash) Write(p []byte) (int, error) { h.b = append(h.b, p...); return len(p), nil }
func (h *murmur2Hash) Sum32() uint32               { return murmur2(h.b) }
func (h *murmur2Hash) Reset()                      { h.b = h.b[:0] }
func (h *murmur2Hash) Size() int                   { return 4 }
func (h *murmur2Hash) BlockSize() int              { return 4 }
func (h *murmur2Hash) Sum(b []byte) []byte         { return binary.BigEndian.AppendUint32(b, h.Sum32()) }
