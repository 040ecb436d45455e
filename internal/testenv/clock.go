package testenv

import (
	"sync"
	"time"
)

// Clock is a clock a test steps (a pushgw.Clock): Now stays where the
// test last set it, and a function given to AfterFunc runs, in its own
// goroutine, when Advance brings Now to or past its time. It lets a test
// expire a token when it chooses, instead of waiting for the token's life
// to pass and depending on how fast the machine is meanwhile. Safe for
// concurrent use.
type Clock struct {
	mu     sync.Mutex // guards now and timers
	now    time.Time
	timers map[*clockTimer]struct{}
}

// clockTimer is a function waiting for its time on a Clock.
type clockTimer struct {
	at time.Time
	f  func()
}

// NewClock returns a clock that reads now until Advance moves it.
func NewClock(now time.Time) *Clock {
	return &Clock{now: now, timers: map[*clockTimer]struct{}{}}
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc runs f in its own goroutine once Now is d past the time of the
// call (at once for d <= 0). The function it returns stops that, and
// reports whether it did (false: f already ran or was stopped).
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d <= 0 {
		go f()
		return func() bool { return false }
	}
	t := &clockTimer{at: c.now.Add(d), f: f}
	c.timers[t] = struct{}{}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, waiting := c.timers[t]
		delete(c.timers, t)
		return waiting
	}
}

// Advance moves the clock d ahead and starts the functions whose time has
// come, each in its own goroutine.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for t := range c.timers {
		if !t.at.After(c.now) {
			delete(c.timers, t)
			go t.f()
		}
	}
}
