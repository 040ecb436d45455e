package edgering

import (
	"hash/crc32"
	"slices"
	"strconv"
	"testing"
)

// owner is the documented rule written out without a sorted ring: the
// member of the lowest point at or above the key's CRC32, or of the lowest
// point of all when none is (the ring wraps).
func owner(names []string, key string) int {
	h := crc32.ChecksumIEEE([]byte(key))
	best, bestHash, low, lowHash := -1, uint32(0), -1, uint32(0)
	for m, name := range names {
		for i := range VirtualNodes {
			p := crc32.ChecksumIEEE([]byte(name + "-" + strconv.Itoa(i)))
			if p >= h && (best < 0 || p < bestHash) {
				best, bestHash = m, p
			}
			if low < 0 || p < lowHash {
				low, lowHash = m, p
			}
		}
	}
	if best < 0 {
		return low
	}
	return best
}

// The ring routes every key as the rule in the package doc says, shards
// as the edge hashes them ("0".."159") and the empty key of a connection
// without a hint included.
func TestTheOwnerIsTheMemberOfTheFirstPointAtOrAfterTheKeysCRC32(t *testing.T) {
	names := []string{"pushgw-0", "pushgw-1", "pushgw-2", "pushgw-3"}
	r := New(names)
	keys := []string{""}
	for p := range 160 {
		keys = append(keys, strconv.Itoa(p))
	}
	for _, k := range keys {
		if got, want := r.Owner(k), owner(names, k); got != want {
			t.Errorf("key %q: owner %d, want %d", k, got, want)
		}
	}
}

// Order lists every member once, the owner first, and the next one is the
// owner once the first is taken off the ring (where a load balancer tries
// next when the owner refuses).
func TestOrderListsEveryMemberOnceOwnerFirstThenTheOwnerWithoutIt(t *testing.T) {
	names := []string{"10.0.0.1:8081", "10.0.0.2:8081", "10.0.0.3:8081"}
	r := New(names)
	for p := range 64 {
		k := strconv.Itoa(p)
		o := r.Order(k)
		if got := slices.Sorted(slices.Values(o)); !slices.Equal(got, []int{0, 1, 2}) {
			t.Fatalf("key %q: order %v, want each member once", k, o)
		}
		rest := slices.Delete(slices.Clone(names), o[0], o[0]+1)
		if got, want := names[o[1]], rest[New(rest).Owner(k)]; got != want {
			t.Errorf("key %q: second %s, want %s (the owner without %s)", k, got, want, names[o[0]])
		}
	}
	if o := New(nil).Order("1"); o != nil {
		t.Errorf("empty ring: order %v, want nil", o)
	}
	if o := New(nil).Owner("1"); o != -1 {
		t.Errorf("empty ring: owner %d, want -1", o)
	}
}

// Adding a member moves only keys onto it: no key moves between the
// members that were there.
func TestAddingAMemberMovesKeysOnlyOntoIt(t *testing.T) {
	old := []string{"pushgw-0", "pushgw-1", "pushgw-2"}
	before, after := New(old), New(append(slices.Clone(old), "pushgw-3"))
	moved := 0
	for p := range 1000 {
		k := strconv.Itoa(p)
		was, now := before.Owner(k), after.Owner(k)
		switch {
		case now == 3:
			moved++
		case now != was:
			t.Fatalf("key %q moved from %s to %s", k, old[was], old[now])
		}
	}
	if moved == 0 {
		t.Error("no key moved onto the added member")
	}
}
