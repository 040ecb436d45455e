package pushgw

import (
	"sync"
	"time"
)

// limiterSweepEvery is how often a limiter drops the buckets that have
// refilled completely: a full bucket carries no state worth keeping.
const limiterSweepEvery = time.Minute

// limiter is a token bucket per key (a tenant/user): burst tokens at most,
// refilled at rate tokens per second. Its methods are safe for concurrent
// use. A nil *limiter allows everything.
type limiter struct {
	rate  float64 // tokens per second
	burst float64
	now   func() time.Time

	mu sync.Mutex
	// Guarded by mu.
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	tokens float64
	at     time.Time // when tokens was computed
}

// newLimiter returns a limiter of perMinute tokens a minute with burst, or
// nil (no limit) when perMinute is negative. now is the clock (nil:
// time.Now).
func newLimiter(perMinute, burst int, now func() time.Time) *limiter {
	if perMinute < 0 {
		return nil
	}
	if now == nil {
		now = time.Now
	}
	return &limiter{
		rate:      float64(perMinute) / 60,
		burst:     float64(burst),
		now:       now,
		buckets:   make(map[string]*bucket),
		lastSweep: now(),
	}
}

// allow takes a token of key. When none is left it returns false and how
// long until one is.
func (l *limiter) allow(key string) (ok bool, retryAfter time.Duration) {
	if l == nil {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) >= limiterSweepEvery {
		l.sweep(now)
	}
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	} else {
		b.tokens = l.refilled(b, now)
		b.at = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	if l.rate == 0 {
		return false, time.Hour
	}
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return false, max(wait, time.Millisecond)
}

// refilled returns b's tokens at now.
func (l *limiter) refilled(b *bucket, now time.Time) float64 {
	if d := now.Sub(b.at); d > 0 {
		return min(l.burst, b.tokens+d.Seconds()*l.rate)
	}
	return b.tokens
}

// sweep drops the buckets that are full again. Called with mu held.
func (l *limiter) sweep(now time.Time) {
	l.lastSweep = now
	for k, b := range l.buckets {
		if l.refilled(b, now) >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// size returns the number of buckets kept (for tests).
func (l *limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}
