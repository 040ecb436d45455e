package pushgw

import (
	"testing"
	"time"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct{ t time.Time }

func newFakeClock() *fakeClock               { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }
func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// allowN asks for n tokens of key and returns how many were granted.
func allowN(l *limiter, key string, n int) int {
	ok := 0
	for range n {
		if a, _ := l.allow(key); a {
			ok++
		}
	}
	return ok
}

func TestLimiterAllowsTheBurstThenTheRate(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	l := newLimiter(60, 5, clock.now) // one a second
	if n := allowN(l, "t/alice", 10); n != 5 {
		t.Fatalf("a burst of 10 let %d through, want 5", n)
	}
	ok, wait := l.allow("t/alice")
	if ok || wait <= 0 || wait > time.Second {
		t.Fatalf("over the limit: ok %v, retry after %v; want refused within 1s", ok, wait)
	}
	clock.advance(1500 * time.Millisecond)
	if n := allowN(l, "t/alice", 5); n != 1 {
		t.Fatalf("1.5s later %d more went through, want 1", n)
	}
	clock.advance(time.Hour)
	if n := allowN(l, "t/alice", 10); n != 5 {
		t.Fatalf("an hour later %d went through, want the burst of 5 (not more)", n)
	}
}

func TestLimiterKeepsUsersApart(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	l := newLimiter(60, 2, clock.now)
	allowN(l, "t/alice", 5)
	if n := allowN(l, "t/bob", 5); n != 2 {
		t.Fatalf("bob got %d after alice used hers, want his own 2", n)
	}
}

func TestLimiterForgetsFullBuckets(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	l := newLimiter(60, 2, clock.now)
	for _, u := range []string{"a", "b", "c"} {
		l.allow(u)
	}
	if n := l.size(); n != 3 {
		t.Fatalf("%d buckets, want 3", n)
	}
	clock.advance(limiterSweepEvery)
	l.allow("d")
	if n := l.size(); n != 1 {
		t.Fatalf("%d buckets after the sweep, want only d's", n)
	}
}

func TestANegativeRateTurnsTheLimitOff(t *testing.T) {
	t.Parallel()
	l := newLimiter(-1, 1, nil)
	if l != nil {
		t.Fatal("a negative rate made a limiter")
	}
	if n := allowN(l, "t/u", 1000); n != 1000 {
		t.Fatalf("no limit let %d of 1000 through", n)
	}
}
