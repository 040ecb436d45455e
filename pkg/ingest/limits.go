package ingest

import (
	"math"
	"sync"
	"time"
)

// rateLimiter is a token bucket per caller (tenant/user): Rate tokens per
// second, up to Burst. Buckets that refilled completely are forgotten when
// the map grows, so memory follows the active callers.
type rateLimiter struct {
	rate  float64
	burst float64
	now   func() time.Time

	mu      sync.Mutex // guards buckets
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// maxIdleBuckets is how many buckets are kept before full ones are swept.
const maxIdleBuckets = 100_000

func newRateLimiter(rate float64, burst int, now func() time.Time) *rateLimiter {
	return &rateLimiter{rate: rate, burst: float64(burst), now: now, buckets: make(map[string]*bucket)}
}

// allow takes a token for key, or says how long until one is available.
func (l *rateLimiter) allow(key string) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxIdleBuckets {
			l.sweepLocked(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

func (l *rateLimiter) sweepLocked(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// queuedRequests counts the requests this ingest accepted and has not seen
// end, per conversation and per tenant. Workers announce ends on the
// control topic; an entry whose end was never seen expires after ttl. The
// counts are per ingest replica.
type queuedRequests struct {
	ttl time.Duration
	now func() time.Time

	mu         sync.Mutex // guards all below
	lastExpire time.Time
	requests   map[string]queuedRequest // by request id
	convs      map[string]int           // by identity key
	tenants    map[string]int
}

type queuedRequest struct {
	conv, tenant string
	at           time.Time
}

func newQueuedRequests(ttl time.Duration, now func() time.Time) *queuedRequests {
	return &queuedRequests{ttl: ttl, now: now, requests: map[string]queuedRequest{}, convs: map[string]int{}, tenants: map[string]int{}}
}

// admit adds requestID unless the conversation or the tenant is at its
// limit (a limit < 1 is none). A request id already counted is admitted
// again without counting twice (an idempotent retry).
func (q *queuedRequests) admit(requestID, conv, tenant string, maxConv, maxTenant int) bool {
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.requests[requestID]; ok {
		return true
	}
	q.expireLocked(now)
	if (maxConv > 0 && q.convs[conv] >= maxConv) || (maxTenant > 0 && q.tenants[tenant] >= maxTenant) {
		return false
	}
	q.requests[requestID] = queuedRequest{conv: conv, tenant: tenant, at: now}
	q.convs[conv]++
	q.tenants[tenant]++
	return true
}

// forget removes requestID: it ended, or producing it failed.
func (q *queuedRequests) forget(requestID string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.removeLocked(requestID)
}

func (q *queuedRequests) removeLocked(requestID string) {
	r, ok := q.requests[requestID]
	if !ok {
		return
	}
	delete(q.requests, requestID)
	if q.convs[r.conv]--; q.convs[r.conv] <= 0 {
		delete(q.convs, r.conv)
	}
	if q.tenants[r.tenant]--; q.tenants[r.tenant] <= 0 {
		delete(q.tenants, r.tenant)
	}
}

// expireLocked drops entries older than ttl. Map iteration is O(n); it runs
// at most once per second.
func (q *queuedRequests) expireLocked(now time.Time) {
	if now.Sub(q.lastExpire) < time.Second {
		return
	}
	q.lastExpire = now
	for id, r := range q.requests {
		if now.Sub(r.at) > q.ttl {
			q.removeLocked(id)
		}
	}
}
