package stacktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
)

// paused runs n pauses of conversation's runs through g, one after another,
// and sends the result of each on the returned channel.
func paused(ctx context.Context, g *Gates, conversation string, n int) <-chan error {
	out := make(chan error, n)
	go func() {
		for range n {
			out <- g.pause(ctx, conversation, time.Nanosecond)
		}
	}()
	return out
}

// blocked waits until a pause waits at gate, and fails t if one passed it
// before: the pauses run one after another, so a pause that wrongly passed
// has sent its result by then.
func blocked(t *testing.T, ctx context.Context, gate *Gate, c <-chan error, what string) {
	t.Helper()
	select {
	case <-gate.Held():
	case <-ctx.Done():
		t.Fatalf("%s never waited at the gate", what)
	}
	select {
	case err := <-c:
		t.Fatalf("%s passed the gate (%v)", what, err)
	default:
	}
}

func TestAGateLetsThroughWhatTheTestAllowsAndHoldsTheRest(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	g := NewGates()
	gate := g.Hold("held", 2)
	pauses := paused(ctx, g, "held", 6)
	other := paused(ctx, g, "free", 3)
	for i := range 3 {
		if err := <-other; err != nil {
			t.Fatalf("pause %d of a conversation without a gate: %v", i, err)
		}
	}
	for i := range 2 {
		if err := <-pauses; err != nil {
			t.Fatalf("pause %d, before the gate holds: %v", i, err)
		}
	}
	blocked(t, ctx, gate, pauses, "the third pause")
	gate.Allow(1)
	if err := <-pauses; err != nil {
		t.Fatalf("the allowed pause: %v", err)
	}
	blocked(t, ctx, gate, pauses, "the fourth pause")
	gate.Release()
	for i := range 2 {
		if err := <-pauses; err != nil {
			t.Fatalf("pause %d after the release: %v", i+4, err)
		}
	}
}

func TestAPauseHeldAtAGateEndsWithItsRun(t *testing.T) {
	t.Parallel()
	g := NewGates()
	gate := g.Hold("held", 0)
	ctx, cancel := context.WithCancel(testenv.Context(t, 30*time.Second))
	pauses := paused(ctx, g, "held", 1)
	blocked(t, ctx, gate, pauses, "the pause")
	cancel()
	if err := <-pauses; !errors.Is(err, context.Canceled) {
		t.Fatalf("the held pause ended with %v, want context.Canceled", err)
	}
}
