package ingest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// nopProducer accepts every record and keeps none.
type nopProducer struct{}

func (nopProducer) Produce(context.Context, []byte, []byte) error { return nil }

// BenchmarkPostMessage measures the POST handler end to end (auth, body,
// validation, request id, encoding) with a producer that costs nothing.
func BenchmarkPostMessage(b *testing.B) {
	for _, bc := range []struct {
		name    string
		content string
		key     string
	}{
		{name: "small", content: "hello, how are you today?"},
		{name: "small-idempotent", content: "hello, how are you today?", key: "key-1"},
		{name: "32KiB", content: strings.Repeat("lorem ipsum ", 32768/12)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := newTestService(b, Config{}, nopProducer{}, nil, nil)
			h := s.Handler()
			body := `{"content":"` + bc.content + `","strategy":"enqueue"}`
			auth := "Bearer " + token(b, "acme", "alice")
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, messagesURL, strings.NewReader(body))
				r.Header.Set("Authorization", auth)
				r.Header.Set("Content-Type", "application/json")
				if bc.key != "" {
					r.Header.Set("Idempotency-Key", bc.key)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusAccepted {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}
