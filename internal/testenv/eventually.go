package testenv

import (
	"context"
	"testing"
	"time"
)

// Eventually polls cond every 5 ms until it holds, and fails t with what
// when ctx ends first: the test's own bound, not one of the wait's.
func Eventually(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("not before the test's context ended: %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
