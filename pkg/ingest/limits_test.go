package ingest

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/server"
)

// testClock is a clock the test moves by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// checkLimited asserts a 429 rate_limited that says when to retry
// (docs/api.md, Errors over HTTP: Retry-After in seconds, for a rate or
// queue limit alike).
func checkLimited(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	checkError(t, w, http.StatusTooManyRequests, server.CodeRateLimited)
	if n, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || n < 1 {
		t.Errorf("Retry-After %q, want a whole number of seconds, at least 1", w.Header().Get("Retry-After"))
	}
}

// The bucket's accounting, exactly: a new caller has Burst tokens, each
// POST takes one, the bucket refills at Rate per second up to Burst, and
// a refused caller is told how long until the next token.
func TestRateLimiterTakesAndRefillsTokensExactly(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: testNow}
	l := newRateLimiter(2, 3, clock.now) // a token every 500ms, up to 3
	const key = "acme/ann"
	take := func(step string, want bool, wantWait time.Duration) {
		t.Helper()
		ok, wait := l.allow(key)
		if ok != want || wait != wantWait {
			t.Fatalf("%s: allow = %v, wait %v; want %v, wait %v", step, ok, wait, want, wantWait)
		}
	}
	for i := range 3 {
		take(fmt.Sprintf("token %d of the burst", i+1), true, 0)
	}
	take("past the burst", false, 500*time.Millisecond)
	clock.advance(250 * time.Millisecond)
	take("half a token later", false, 250*time.Millisecond)
	clock.advance(250 * time.Millisecond)
	take("once a whole token refilled", true, 0)
	take("right after taking the refilled token", false, 500*time.Millisecond)
	clock.advance(time.Hour)
	for i := range 3 {
		take(fmt.Sprintf("token %d after a long idle time", i+1), true, 0)
	}
	take("past the burst again: the refill stops at the burst", false, 500*time.Millisecond)
}

// The bucket is per (tenant, user): not per user alone, per tenant alone,
// per conversation or shared.
func TestRateLimitIsABucketPerTenantAndUser(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		tenant, user string
		conversation string
		advance      time.Duration
		wantTokens   int // POSTs accepted before the next 429
	}{
		{name: "The same user in another conversation shares the exhausted bucket.", tenant: "acme", user: "ann", conversation: "c2"},
		{name: "The same user in another tenant has a bucket of their own.", tenant: "globex", user: "ann", conversation: "c1", wantTokens: 2},
		{name: "Another user of the same tenant has a bucket of their own.", tenant: "acme", user: "bob", conversation: "c1", wantTokens: 2},
		{name: "Another user of another tenant has a bucket of their own.", tenant: "globex", user: "bob", conversation: "c1", wantTokens: 2},
		{name: "The same user gets one token back after a refill period.", tenant: "acme", user: "ann", conversation: "c1", advance: time.Second, wantTokens: 1},
		{name: "The same user gets nothing back before a refill period.", tenant: "acme", user: "ann", conversation: "c1", advance: time.Second - time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := &testClock{t: testNow}
			s := newTestServiceWith(t, Config{RatePerSecond: 1, RateBurst: 2}, nil, nil, nil, func(d *serviceDeps) { d.Now = clock.now })
			post := func(tenant, user, conv string) *httptest.ResponseRecorder {
				return s.do(http.MethodPost, "/v1/conversations/"+conv+"/messages", token(t, tenant, user), `{"content":"hi"}`, nil)
			}
			for i := range 2 {
				if w := post("acme", "ann", "c1"); w.Code != http.StatusAccepted {
					t.Fatalf("POST %d within the burst: %d %s", i+1, w.Code, w.Body)
				}
			}
			checkLimited(t, post("acme", "ann", "c1"))
			clock.advance(tt.advance)
			for i := range tt.wantTokens {
				if w := post(tt.tenant, tt.user, tt.conversation); w.Code != http.StatusAccepted {
					t.Fatalf("POST %d of %d: status %d, want 202; body %s", i+1, tt.wantTokens, w.Code, w.Body)
				}
			}
			checkLimited(t, post(tt.tenant, tt.user, tt.conversation))
		})
	}
}

// A POST answered 503 (the request never reached the requests topic) was
// not accepted: it takes no place in the conversation's queue limit.
func TestARequestThatFailedToQueueIsNotCountedAgainstTheQueueLimit(t *testing.T) {
	t.Parallel()
	p := &fakeProducer{err: errors.New("broker down")}
	s := newTestService(t, Config{RatePerSecond: -1, MaxQueuedPerConversation: 1}, p, nil, nil)
	post := func() *httptest.ResponseRecorder {
		return s.do(http.MethodPost, messagesURL, token(t, "acme", "ann"), `{"content":"hi"}`, nil)
	}
	checkError(t, post(), http.StatusServiceUnavailable, server.CodeUnavailable)
	p.err = nil // the broker is back (s.do serves on this goroutine)
	if w := post(); w.Code != http.StatusAccepted {
		t.Fatalf("status %d after a failed POST, want 202: the failed one was counted; body %s", w.Code, w.Body)
	}
	checkLimited(t, post())
}

// A request whose end is never announced stops counting once QueuedTTL has
// passed (docs/api.md: "an end never announced expires after 15 minutes"),
// and not before.
func TestAQueuedRequestWhoseEndIsNeverAnnouncedExpires(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: testNow}
	s := newTestServiceWith(t, Config{RatePerSecond: -1, MaxQueuedPerConversation: 1, QueuedTTL: time.Minute}, nil, nil, nil,
		func(d *serviceDeps) { d.Now = clock.now })
	post := func() *httptest.ResponseRecorder {
		return s.do(http.MethodPost, messagesURL, token(t, "acme", "ann"), `{"content":"hi"}`, nil)
	}
	if w := post(); w.Code != http.StatusAccepted {
		t.Fatalf("first POST: %d %s", w.Code, w.Body)
	}
	checkLimited(t, post())
	clock.advance(time.Minute - time.Millisecond)
	checkLimited(t, post())
	clock.advance(time.Second + time.Millisecond)
	if w := post(); w.Code != http.StatusAccepted {
		t.Fatalf("POST after the first request expired: %d %s", w.Code, w.Body)
	}
	checkLimited(t, post())
}

// README, "Observability": ingest counts each POST refused with 429 in
// turnpike_ingest_limited_total under the limit that refused it, rate or
// queued, and nothing else there.
func TestEachRefusalIsCountedUnderItsLimit(t *testing.T) {
	t.Parallel()
	// The clock stands still: a token spent is not refilled.
	s := newTestService(t, Config{RatePerSecond: 1, RateBurst: 2, MaxQueuedPerConversation: 1}, nil, nil, nil)
	limited := func(limit string) float64 {
		mfs, err := s.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "turnpike_ingest_limited_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetName() == "limit" && m.GetLabel()[0].GetValue() == limit {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0 // a series appears with its first refusal
	}
	for i, step := range []struct {
		user, conv   string
		status       int
		rate, queued float64
	}{
		{"ann", "c1", http.StatusAccepted, 0, 0},        // ann's first token; c1's one queued request
		{"ann", "c1", http.StatusTooManyRequests, 0, 1}, // ann's second token; c1 is full
		{"ann", "c2", http.StatusTooManyRequests, 1, 1}, // ann has no token left
		{"bob", "c1", http.StatusAccepted, 1, 1},        // bob's own c1 and bucket
	} {
		w := s.do(http.MethodPost, "/v1/conversations/"+step.conv+"/messages", token(t, "acme", step.user), `{"content":"hi"}`, nil)
		if w.Code != step.status {
			t.Fatalf("step %d: POST by %s to %s: %d, want %d", i, step.user, step.conv, w.Code, step.status)
		}
		if r, q := limited("rate"), limited("queued"); r != step.rate || q != step.queued {
			t.Fatalf("step %d: limited_total rate %v, queued %v; want %v, %v", i, r, q, step.rate, step.queued)
		}
	}
}

// A queued request expires once it is older than QueuedTTL, found by a
// sweep that runs at most once a second: not at exactly QueuedTTL, not
// between sweeps, and at the first sweep a second after the last.
func TestAQueuedRequestExpiresPastItsTTLAtASweepOnceASecond(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: testNow}
	s := newTestServiceWith(t, Config{RatePerSecond: -1, MaxQueuedPerConversation: 1, QueuedTTL: time.Minute}, nil, nil, nil,
		func(d *serviceDeps) { d.Now = clock.now })
	post := func() *httptest.ResponseRecorder {
		return s.do(http.MethodPost, messagesURL, token(t, "acme", "ann"), `{"content":"hi"}`, nil)
	}
	if w := post(); w.Code != http.StatusAccepted {
		t.Fatalf("first POST: %d %s", w.Code, w.Body)
	}
	clock.advance(time.Minute) // a sweep: the request is exactly QueuedTTL old
	checkLimited(t, post())
	clock.advance(time.Second - time.Millisecond) // older, but no sweep yet
	checkLimited(t, post())
	clock.advance(time.Millisecond) // a second after the last sweep
	if w := post(); w.Code != http.StatusAccepted {
		t.Fatalf("POST at the sweep a second later: %d %s", w.Code, w.Body)
	}
}
