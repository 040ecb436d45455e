package pushgw_test

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/pushgw"
)

// steppedClock is a Clock a test moves by hand: tokens expire when it
// says, not when their life has passed.
type steppedClock struct{ now time.Time }

func (c *steppedClock) Now() time.Time { return c.now }

// AfterFunc of this sketch runs f at once when d has already passed and
// never otherwise; a real one keeps f and runs it when a step reaches it
// (internal/testenv's Clock does).
func (c *steppedClock) AfterFunc(d time.Duration, f func()) func() bool {
	if d <= 0 {
		go f()
	}
	return func() bool { return d > 0 }
}

// A gateway whose tokens expire on a clock of the caller's: Now decides
// whether a token presented at a connect has expired, and AfterFunc
// when an open connection's token does.
func ExampleWithClock() {
	cfg := pushgw.DefaultConfig()
	cfg.Brokers = []string{"127.0.0.1:9092"}
	cfg.AuthSecret = "example-secret-that-is-32-bytes-long"
	clock := &steppedClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	_, err := pushgw.New(cfg, pushgw.WithClock(clock), pushgw.WithLogger(slog.New(slog.DiscardHandler)))
	fmt.Println("gateway configured:", err == nil)
	// Output: gateway configured: true
}
