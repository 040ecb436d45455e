package pushgw

import (
	"bytes"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordingConn records each Write as one system call would see it.
type recordingConn struct {
	net.Conn // nil: only Write and SetWriteDeadline are used
	mu       sync.Mutex
	writes   [][]byte
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), nil
}

func (c *recordingConn) SetWriteDeadline(time.Time) error { return nil }

func newTestWire() (*wire, *recordingConn) {
	rc := &recordingConn{}
	pool := &sync.Pool{New: func() any { b := make([]byte, 0, batchBytes); return &b }}
	return &wire{Conn: rc, pool: pool, timeout: time.Second}, rc
}

func TestWireSendsABatchInOneWrite(t *testing.T) {
	t.Parallel()
	w, rc := newTestWire()
	w.Write([]byte("solo"))
	w.begin()
	for _, s := range []string{"a", "b", "c"} {
		w.Write([]byte(s))
	}
	if len(rc.writes) != 1 {
		t.Fatalf("%d writes reached the socket during the batch, want only the one before it", len(rc.writes))
	}
	if err := w.end(); err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("after"))
	got := make([]string, len(rc.writes))
	for i, b := range rc.writes {
		got[i] = string(b)
	}
	if strings.Join(got, "|") != "solo|abc|after" {
		t.Fatalf("socket writes %q, want solo, abc, after", got)
	}
}

func TestWireFlushesAFullBatchAndWritesBigFramesAlone(t *testing.T) {
	t.Parallel()
	w, rc := newTestWire()
	w.begin()
	small := bytes.Repeat([]byte("s"), batchBytes/2+1)
	big := bytes.Repeat([]byte("B"), batchBytes+1)
	w.Write(small)
	w.Write(small) // does not fit behind the first: the first goes out
	w.Write(big)   // bigger than the buffer: the second, then big alone
	w.Write([]byte("tail"))
	if err := w.end(); err != nil {
		t.Fatal(err)
	}
	var sizes []int
	var all []byte
	for _, b := range rc.writes {
		sizes = append(sizes, len(b))
		all = append(all, b...)
	}
	want := append(append(append(append([]byte{}, small...), small...), big...), "tail"...)
	if !bytes.Equal(all, want) {
		t.Fatalf("the socket got %d bytes out of order or changed, want %d", len(all), len(want))
	}
	if len(sizes) != 4 || sizes[2] != len(big) {
		t.Fatalf("socket writes of %v bytes, want small, small, big alone, tail", sizes)
	}
}

func TestWireIsSafeForConcurrentWriters(t *testing.T) {
	t.Parallel()
	w, rc := newTestWire()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				if g == 0 && i%10 == 0 {
					w.begin()
				}
				w.Write([]byte{byte('a' + g)})
				if g == 0 && i%10 == 9 {
					w.end()
				}
			}
		})
	}
	wg.Wait()
	w.end()
	n := 0
	for _, b := range rc.writes {
		n += len(b)
	}
	if n != 800 {
		t.Fatalf("the socket got %d bytes, want 800", n)
	}
}
