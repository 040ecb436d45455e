package edgering

import (
	"cmp"
	"hash/crc32"
	"slices"
	"strconv"
)

// VirtualNodes is the points each member has on the ring (nginx's 160 per
// unit of weight).
const VirtualNodes = 160

// Ring is a consistent-hash ring over named members.
type Ring struct {
	points []point // sorted by hash
	n      int     // members
}

type point struct {
	hash   uint32
	member int // index into the names given to New
}

// New returns the ring of the members named names; Order and Owner answer
// with indices into names. Names should be distinct.
func New(names []string) *Ring {
	r := &Ring{n: len(names), points: make([]point, 0, len(names)*VirtualNodes)}
	for m, name := range names {
		for i := range VirtualNodes {
			r.points = append(r.points, point{crc32.ChecksumIEEE([]byte(name + "-" + strconv.Itoa(i))), m})
		}
	}
	slices.SortStableFunc(r.points, func(a, b point) int { return cmp.Compare(a.hash, b.hash) })
	return r
}

// Order returns every member, as an index into New's names, in ring order
// from key's hash: the key's owner first, then the member a load balancer
// tries next when the owner refuses, and so on. It returns nil for a ring
// without members.
func (r *Ring) Order(key string) []int {
	if len(r.points) == 0 {
		return nil
	}
	h := crc32.ChecksumIEEE([]byte(key))
	i, _ := slices.BinarySearchFunc(r.points, h, func(p point, h uint32) int { return cmp.Compare(p.hash, h) })
	out := make([]int, 0, r.n)
	seen := make([]bool, r.n)
	for k := 0; k < len(r.points) && len(out) < r.n; k++ {
		m := r.points[(i+k)%len(r.points)].member
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

// Owner returns the member key goes to, as an index into New's names, or
// -1 for a ring without members.
func (r *Ring) Owner(key string) int {
	if o := r.Order(key); len(o) > 0 {
		return o[0]
	}
	return -1
}
