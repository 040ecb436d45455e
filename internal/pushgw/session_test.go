package pushgw

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/auth"
)

// A frame popped while the session is open is the writer's to write; once
// the session is closing, it is released from the queue's bounds and
// counted as dropped, for either transport.
func TestAFramePoppedAfterTheSessionClosedIsReleasedAndCountedDropped(t *testing.T) {
	t.Parallel()
	v, err := auth.NewVerifier(testSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	gw, err := New(Config{Brokers: []string{"127.0.0.1:1"}}, v, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var s session
	s.init(gw, nil, auth.Token{}, "default/alice", "test")
	pop := func() []byte {
		t.Helper()
		if !s.out.tryPush([]byte("frame")) {
			t.Fatal("push refused")
		}
		f, ok := s.out.pop()
		if !ok {
			t.Fatal("nothing to pop")
		}
		return f
	}

	f := pop()
	if s.dropIfClosed(f) {
		t.Fatal("an open session dropped its frame")
	}
	s.out.sent(len(f)) // written
	f = pop()
	s.fail(0, "gone")
	if !s.dropIfClosed(f) {
		t.Fatal("a closing session kept its frame")
	}
	if n, b := s.out.size(); n != 0 || b != 0 {
		t.Errorf("queue holds %d frames, %d bytes after the drop, want none", n, b)
	}
	checkMetric(t, reg, "turnpike_pushgw_frames_dropped_total", 1)
}
