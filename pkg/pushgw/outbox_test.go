package pushgw

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
)

func TestOutboxTryPushKeepsBothBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		maxFrames int
		maxBytes  int
		frames    []int // sizes pushed in order
		want      []bool
	}{
		{"Frames beyond the frame bound are refused.", 3, 1 << 20, []int{10, 10, 10, 10}, []bool{true, true, true, false}},
		{"A frame beyond the byte bound is refused.", 100, 100, []int{40, 40, 30}, []bool{true, true, false}},
		{"A frame that fits the bytes left is taken.", 100, 100, []int{40, 40, 20}, []bool{true, true, true}},
		{"A frame bigger than the byte bound fits an empty queue only.", 100, 100, []int{500, 1}, []bool{true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := newOutbox(tt.maxFrames, tt.maxBytes)
			for i, n := range tt.frames {
				if got := o.tryPush(make([]byte, n)); got != tt.want[i] {
					t.Fatalf("push %d (%d bytes) = %v, want %v", i, n, got, tt.want[i])
				}
			}
		})
	}
}

func TestOutboxCountsAFrameUntilItIsSent(t *testing.T) {
	t.Parallel()
	o := newOutbox(2, 1<<20)
	o.tryPush([]byte("a"))
	o.tryPush([]byte("bb"))
	f, ok := o.pop()
	if !ok || string(f) != "a" {
		t.Fatalf("pop = %q, %v; want a", f, ok)
	}
	if o.tryPush([]byte("c")) {
		t.Fatal("a third frame fit while the first was still being written")
	}
	if n, b := o.size(); n != 2 || b != 3 {
		t.Fatalf("size = %d frames %d bytes, want 2 and 3", n, b)
	}
	o.sent(len(f))
	if !o.tryPush([]byte("c")) {
		t.Fatal("no room after the first frame was sent")
	}
	var got []string
	for {
		f, ok := o.pop()
		if !ok {
			break
		}
		got = append(got, string(f))
		o.sent(len(f))
	}
	if strings.Join(got, ",") != "bb,c" {
		t.Fatalf("frames = %v, want bb,c in order", got)
	}
	if n, b := o.size(); n != 0 || b != 0 {
		t.Fatalf("size after draining = %d, %d", n, b)
	}
}

func TestOutboxPushWaitsForHalfTheQueue(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	o := newOutbox(4, 1<<20)
	for range 2 {
		if !o.push(ctx, nil, []byte("x")) {
			t.Fatal("push into an empty queue failed")
		}
	}
	pushed := make(chan bool, 1)
	go func() { pushed <- o.push(ctx, nil, []byte("y")) }()
	select {
	case <-pushed:
		t.Fatal("push went past half the queue")
	case <-time.After(50 * time.Millisecond):
	}
	if !o.tryPush([]byte("live")) {
		t.Fatal("a live frame found no room in the top half")
	}
	f, _ := o.pop()
	o.sent(len(f))
	f, _ = o.pop()
	o.sent(len(f))
	select {
	case ok := <-pushed:
		if !ok {
			t.Fatal("push failed once there was room")
		}
	case <-ctx.Done():
		t.Fatal("push still waits with room in the queue")
	}
}

func TestOutboxPushGivesUpWhenTheClientStops(t *testing.T) {
	t.Parallel()
	o := newOutbox(2, 1<<20)
	o.tryPush([]byte("x"))
	stop := make(chan struct{})
	done := make(chan bool, 1)
	ctx := testenv.Context(t, 30*time.Second) // push's own context outlives the wait: only stop ends it
	go func() { done <- o.push(t.Context(), stop, []byte("y")) }()
	close(stop)
	select {
	case ok := <-done:
		if ok {
			t.Fatal("push queued a frame for a stopped client")
		}
	case <-ctx.Done():
		t.Fatal("push did not return when the client stopped")
	}
}

func TestAnIdleOutboxReleasesItsQueue(t *testing.T) {
	t.Parallel()
	o := newOutbox(1000, 1<<20)
	for range 100 {
		o.tryPush([]byte("x"))
	}
	for {
		f, ok := o.pop()
		if !ok {
			break
		}
		o.sent(len(f))
	}
	if o.queue != nil {
		t.Fatalf("an emptied queue keeps %d slots", cap(o.queue))
	}
}
