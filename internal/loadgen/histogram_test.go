package loadgen

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestHistogramQuantilesAreWithinOnePercentOfExact(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 11))
	tests := []struct {
		name string
		gen  func() int64
	}{
		{"Uniform values from 0 to 50 ms.", func() int64 { return rng.Int64N(int64(50 * time.Millisecond)) }},
		{"Log-normal values around 2 ms with a long tail.", func() int64 {
			return int64(float64(2*time.Millisecond) * math.Exp(rng.NormFloat64()))
		}},
		{"Small values below 1 µs, many of them equal.", func() int64 { return rng.Int64N(1000) }},
		{"Values spread over ten decades.", func() int64 { return int64(math.Pow(10, 1+9*rng.Float64())) }},
		{"A bimodal mix of 300 µs and 2 s.", func() int64 {
			if rng.IntN(100) < 95 {
				return int64(300*time.Microsecond) + rng.Int64N(1000)
			}
			return int64(2*time.Second) + rng.Int64N(int64(time.Millisecond))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h Histogram
			vals := make([]int64, 50_000)
			var sum int64
			for i := range vals {
				vals[i] = tc.gen()
				sum += vals[i]
				h.Record(time.Duration(vals[i]))
			}
			slices.Sort(vals)
			for _, q := range []float64{0.001, 0.25, 0.5, 0.9, 0.99, 0.999, 1} {
				exact := vals[int(math.Ceil(q*float64(len(vals))))-1]
				got := int64(h.Quantile(q))
				if diff := math.Abs(float64(got - exact)); diff > 0.01*float64(exact) {
					t.Errorf("q%v: histogram %d, exact %d: %.3f%% off", q, got, exact, 100*diff/float64(exact))
				}
			}
			s := h.Summary()
			if s.Count != int64(len(vals)) || int64(s.Max) != vals[len(vals)-1] || int64(s.Mean) != sum/int64(len(vals)) {
				t.Errorf("summary %+v: want count %d, max %d, mean %d", s, len(vals), vals[len(vals)-1], sum/int64(len(vals)))
			}
		})
	}
}

func TestHistogramBucketsCoverEveryValueOnce(t *testing.T) {
	t.Parallel()
	for _, v := range []int64{0, 1, 127, 128, 129, 255, 256, 257, 1000, 1 << 20, 1<<20 + 12345, 1<<maxValueBits - 1} {
		i := bucketOf(v)
		lo, w := bucketRange(i)
		if v < lo || v >= lo+w {
			t.Errorf("value %d: bucket %d covers [%d, %d)", v, i, lo, lo+w)
		}
		if v >= subCount && float64(w) > float64(lo)/subCount {
			t.Errorf("value %d: bucket width %d over 1/%d of %d", v, w, subCount, lo)
		}
	}
	if i := bucketOf(1 << 62); i != numBuckets-1 {
		t.Errorf("a huge value went to bucket %d, want the last, %d", i, numBuckets-1)
	}
}

func TestHistogramCountsNegativeAsZeroAndEmptyAsZero(t *testing.T) {
	t.Parallel()
	var h Histogram
	if s := h.Summary(); s != (Latency{}) {
		t.Errorf("empty summary %+v", s)
	}
	h.Record(-5 * time.Millisecond)
	if q := h.Quantile(0.5); q != 0 {
		t.Errorf("negative value recorded as %v, want 0", q)
	}
}

func TestHistogramRecordIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	var h Histogram
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 10_000 {
				h.Record(time.Duration(g*10_000 + i))
			}
		})
	}
	wg.Wait()
	if n, m := h.Count(), h.Summary().Max; n != 40_000 || m != 39_999 {
		t.Errorf("count %d max %v, want 40000 and 39999ns", n, m)
	}
}

func TestCountAboveCountsTheValuesOverTheThreshold(t *testing.T) {
	t.Parallel()
	var h Histogram
	for _, d := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 28 * time.Millisecond, 30 * time.Millisecond, time.Second} {
		h.Record(d)
	}
	for _, c := range []struct {
		over time.Duration
		want int64
	}{{0, 5}, {1500 * time.Microsecond, 4}, {29 * time.Millisecond, 2}, {time.Second, 0}} {
		if got := h.CountAbove(c.over); got != c.want {
			t.Errorf("CountAbove(%v) = %d, want %d", c.over, got, c.want)
		}
	}
}
