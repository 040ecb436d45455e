package stacktest

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
)

// pauser is one pause of conversation's answer through a Gates: in the
// Gates' process, or in another (RemoteAgent's).
type pauser func(ctx context.Context, conversation string) error

// local pauses through g in this process, as Agent's model does.
func local(g *Gates) pauser {
	return func(ctx context.Context, conversation string) error {
		return g.pause(ctx, conversation, time.Nanosecond)
	}
}

// remote pauses through g as RemoteAgent's model does in another process:
// over a connection to g serving on loopback until the test ends.
func remote(t *testing.T, g *Gates) pauser {
	addr := serve(t, g)
	return func(ctx context.Context, conversation string) error {
		if err := passRemote(ctx, addr, conversation); err != nil {
			return err
		}
		return sleep(ctx, time.Nanosecond)
	}
}

// serve runs g.Serve on a loopback port until the test ends, and returns
// its address.
func serve(t *testing.T, g *Gates) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Serve returned %v, want context.Canceled", err)
		}
	})
	return ln.Addr().String()
}

// both runs test for a Gates paused through in this process and from
// another one.
func both(t *testing.T, test func(t *testing.T, g *Gates, pause pauser)) {
	t.Run("in the gates' process", func(t *testing.T) {
		t.Parallel()
		g := NewGates()
		test(t, g, local(g))
	})
	t.Run("from another process", func(t *testing.T) {
		t.Parallel()
		g := NewGates()
		test(t, g, remote(t, g))
	})
}

// paused runs n pauses of conversation's runs through pause, one after
// another, and sends the result of each on the returned channel.
func paused(ctx context.Context, pause pauser, conversation string, n int) <-chan error {
	out := make(chan error, n)
	go func() {
		for range n {
			out <- pause(ctx, conversation)
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
	both(t, func(t *testing.T, g *Gates, pause pauser) {
		ctx := testenv.Context(t, 30*time.Second)
		gate := g.Hold("held", 2)
		pauses := paused(ctx, pause, "held", 6)
		other := paused(ctx, pause, "free", 3)
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
	})
}

func TestAPauseHeldAtAGateEndsWithItsRun(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, g *Gates, pause pauser) {
		gate := g.Hold("held", 0)
		ctx, cancel := context.WithCancel(testenv.Context(t, 30*time.Second))
		pauses := paused(ctx, pause, "held", 1)
		blocked(t, ctx, gate, pauses, "the pause")
		cancel()
		if err := <-pauses; !errors.Is(err, context.Canceled) {
			t.Fatalf("the held pause ended with %v, want context.Canceled", err)
		}
	})
}

// A pause held for a process that went away (its run ended, or it was
// killed: either way its connection closes) stops waiting at the gate
// and takes nothing from it: the token the test allows next goes to the
// next pause.
func TestAHeldPauseOfAProcessThatWentAwayTakesNothingFromTheGate(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	g := NewGates()
	addr := serve(t, g)
	gate := g.Hold("held", 0)
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("held\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gate.Held():
	case <-ctx.Done():
		t.Fatal("the pause never waited at the gate")
	}
	// The process goes away; its connection's half that the gates read
	// ends (as it does when the process dies), and the gates stop waiting
	// for it: they close the connection without a pass.
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	if b, err := io.ReadAll(conn); err != nil || len(b) != 0 {
		t.Fatalf("the gates answered %q, %v to a pause whose process went away: want the connection closed, no pass", b, err)
	}
	gate.Allow(1)
	pauses := paused(ctx, remote(t, g), "held", 2)
	if err := <-pauses; err != nil {
		t.Fatalf("the pause after the one that went away: %v", err)
	}
	blocked(t, ctx, gate, pauses, "the pause after the allowed one")
}

// A pass the gate gave to a pause whose process then went away before it
// acknowledged the pass (killed between the two) goes back to the gate:
// the token the test allowed goes to the next pause, not to nobody. The
// pause that goes away is a raw connection that reads the pass and closes.
func TestAPassGivenToAPauseThatWentAwayBeforeTakingItGoesBackToTheGate(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	g := NewGates()
	addr := serve(t, g)
	gate := g.Hold("dies", 1)
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("dies\n")); err != nil {
		t.Fatal(err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil || b[0] != passByte {
		t.Fatalf("the gates answered %q, %v: want the pass", b[:], err)
	}
	// The process dies before it acknowledges: the pass goes back.
	conn.Close()
	pauses := paused(ctx, remote(t, g), "dies", 2)
	select {
	case err := <-pauses:
		if err != nil {
			t.Fatalf("the pause after the one that went away: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the pass given to a pause that went away before taking it was lost: the next pause waits")
	}
	blocked(t, ctx, gate, pauses, "the pause after the one that took the given-back pass")
}

// A pause whose run ended takes no pass, even a free one: the pass stays
// for the next pause.
func TestAPauseWhoseRunEndedTakesNoPass(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, g *Gates, pause pauser) {
		ctx := testenv.Context(t, 30*time.Second)
		gate := g.Hold("ended", 1)
		ended, cancel := context.WithCancel(ctx)
		cancel()
		if err := pause(ended, "ended"); !errors.Is(err, context.Canceled) {
			t.Fatalf("the pause of an ended run: %v, want context.Canceled", err)
		}
		pauses := paused(ctx, pause, "ended", 2)
		if err := <-pauses; err != nil {
			t.Fatalf("the pause after the ended one: %v", err)
		}
		blocked(t, ctx, gate, pauses, "the pause after the one that took the free pass")
	})
}
