package ingest

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/internal/tracing"
)

func TestAPostContinuesTheCallersTraceIntoTheRequestRecord(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	brokers := testenv.Kafka(t)
	requests := testenv.Name(t, "requests")
	if err := topic.Ensure(ctx, brokers, 1, requests); err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.New(ctx, tracing.Config{ServiceName: "ingest", SampleRatio: 1, Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	p, err := newKafkaProducer(brokers, requests)
	if err != nil {
		t.Fatal(err)
	}
	p.withTracing(tr)
	t.Cleanup(func() { _ = p.Close() })
	s := newTestServiceWith(t, Config{}, p, nil, nil, func(d *serviceDeps) { d.Tracing = tr })

	// docs/api.md, "Headers": tracestate and baggage travel with
	// traceparent.
	const (
		traceID    = "0af7651916cd43dd8448eb211c80319c"
		tracestate = "congo=t61rcWkgMzE"
		baggage    = "tier=gold"
	)
	w := s.do(http.MethodPost, "/v1/conversations/c1/messages", token(t, "acme", "ann"), `{"content":"hi"}`,
		map[string]string{"traceparent": "00-" + traceID + "-b7ad6b7169203331-01", "tracestate": tracestate, "baggage": baggage})
	if w.Code != http.StatusAccepted {
		t.Fatalf("POST: %d %s", w.Code, w.Body)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: requests, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var tp, ts, bg string
	for _, h := range m.Headers {
		switch h.Key {
		case "traceparent":
			tp = string(h.Value)
		case "tracestate":
			ts = string(h.Value)
		case "baggage":
			bg = string(h.Value)
		}
	}
	if ts != tracestate || bg != baggage {
		t.Errorf("record tracestate %q and baggage %q, want the caller's %q and %q", ts, bg, tracestate, baggage)
	}
	if !strings.HasPrefix(tp, "00-"+traceID+"-") || strings.Contains(tp, "b7ad6b7169203331") {
		t.Fatalf("record traceparent %q: want the caller's trace with ingest's own span", tp)
	}
	if err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "ingest.post_message" || spans[0].Parent.SpanID().String() != "b7ad6b7169203331" ||
		!strings.Contains(tp, spans[0].SpanContext.SpanID().String()) {
		t.Fatalf("spans %+v", spans)
	}
}
