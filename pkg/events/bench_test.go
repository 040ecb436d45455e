package events_test

import (
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

func benchToken() *events.TokenEvent {
	return &events.TokenEvent{Meta: testMeta(), Delta: "the quick brown fox ", Agent: "echo", Role: "assistant"}
}

func BenchmarkAppendEvent(b *testing.B) {
	e := benchToken()
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		e.Seq++
		buf = events.AppendEvent(buf[:0], e)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkDecodeEvent(b *testing.B) {
	value := events.MarshalEvent(benchToken())
	b.ReportAllocs()
	b.SetBytes(int64(len(value)))
	for b.Loop() {
		if _, err := events.DecodeEvent(value); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeRequest(b *testing.B) {
	value := []byte(fullRecord)
	b.ReportAllocs()
	b.SetBytes(int64(len(value)))
	for b.Loop() {
		if _, err := events.DecodeRequest(value, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// The per-token encoder must not allocate when the caller reuses a buffer.
func TestAppendEventDoesNotAllocateIntoAReusedBuffer(t *testing.T) {
	e := benchToken()
	e.Delta = "needs \"escapes\" \n and \u2028 and \xff"
	buf := make([]byte, 0, 512)
	allocs := testing.AllocsPerRun(100, func() {
		buf = events.AppendEvent(buf[:0], e)
	})
	if allocs != 0 {
		t.Fatalf("AppendEvent into a reused buffer: %v allocs per run, want 0", allocs)
	}
}
