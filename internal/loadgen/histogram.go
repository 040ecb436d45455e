package loadgen

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// The histogram is log-linear, as HdrHistogram: values below 2^subBits
// have a bucket each; above, every power-of-two range [2^k, 2^(k+1)) is split
// into 2^subBits equal buckets, so a bucket is at most 1/128 of its lowest
// value wide. Reporting a bucket's midpoint bounds the relative error by
// 1/256 (0.4 %).
const (
	subBits  = 7
	subCount = 1 << subBits
	// maxValueBits caps recorded values at 2^maxValueBits-1 ns (about 9 days).
	maxValueBits = 50
	numBuckets   = (maxValueBits - subBits + 1) * subCount
)

// Histogram records durations in nanoseconds with at most 0.4 % relative
// error at any percentile, in fixed memory (about 45 KiB). Record is
// lock-free; it and Snapshot are safe for concurrent use.
type Histogram struct {
	counts [numBuckets]atomic.Uint64
	n      atomic.Int64
	sum    atomic.Int64
	max    atomic.Int64
}

// bucketOf returns the bucket of v >= 0.
func bucketOf(v int64) int {
	if v < subCount {
		return int(v)
	}
	if v >= 1<<maxValueBits {
		v = 1<<maxValueBits - 1
	}
	shift := bits.Len64(uint64(v)) - 1 - subBits
	return (shift+1)*subCount + int(v>>shift) - subCount
}

// bucketRange returns the lowest value of bucket i and its width.
func bucketRange(i int) (lo, width int64) {
	if i < 2*subCount {
		return int64(i), 1
	}
	shift := i/subCount - 1
	return int64(i%subCount+subCount) << shift, 1 << shift
}

// Record adds one duration; negative ones count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[bucketOf(v)].Add(1)
	h.n.Add(1)
	h.sum.Add(v)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			return
		}
	}
}

// Count returns how many values were recorded.
func (h *Histogram) Count() int64 { return h.n.Load() }

// Quantile returns the value at quantile q (0 < q <= 1) by the nearest-rank
// rule: the smallest recorded value with at least q of all values at or
// below it, within the histogram's precision. Zero when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	rank = min(max(rank, 1), n)
	maxV := h.max.Load()
	var seen int64
	for i := range h.counts {
		seen += int64(h.counts[i].Load())
		if seen >= rank {
			lo, w := bucketRange(i)
			return time.Duration(min(lo+(w-1)/2, maxV))
		}
	}
	return time.Duration(maxV) // counts lag n during concurrent Records
}

// CountAbove returns how many recorded values are above d, within the
// histogram's precision (a value counts by its bucket's midpoint, at most
// the largest value recorded, as Quantile reports it).
func (h *Histogram) CountAbove(d time.Duration) int64 {
	var n int64
	maxV := h.max.Load()
	for i := range h.counts {
		if lo, w := bucketRange(i); min(lo+(w-1)/2, maxV) > int64(d) {
			n += int64(h.counts[i].Load())
		}
	}
	return n
}

// Latency summarises a Histogram.
type Latency struct {
	Count int64         `json:"count"`
	Mean  time.Duration `json:"mean_ns"`
	P50   time.Duration `json:"p50_ns"`
	P90   time.Duration `json:"p90_ns"`
	P99   time.Duration `json:"p99_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Summary returns the histogram's count, mean, p50, p90, p99 and max.
func (h *Histogram) Summary() Latency {
	n := h.n.Load()
	if n == 0 {
		return Latency{}
	}
	return Latency{
		Count: n,
		Mean:  time.Duration(h.sum.Load() / n),
		P50:   h.Quantile(0.50),
		P90:   h.Quantile(0.90),
		P99:   h.Quantile(0.99),
		Max:   time.Duration(h.max.Load()),
	}
}
