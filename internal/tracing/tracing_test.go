package tracing

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// The trace context of a caller: its traceparent (sampled), a tracestate
// of two vendors and a baggage of two members.
const (
	callerTraceID    = "0af7651916cd43dd8448eb211c80319c"
	callerSpanID     = "b7ad6b7169203331"
	callerTracestate = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
	callerBaggage    = "tier=gold,region=eu-west-1"
)

func header(hs []kafka.Header, key string) (string, int) {
	v, n := "", 0
	for _, h := range hs {
		if h.Key == key {
			v, n = string(h.Value), n+1
		}
	}
	return v, n
}

// docs/api.md, "Headers": traceparent, tracestate and baggage travel
// together. Ingest extracts them from the POST and writes its span's
// context into the request record's headers (FromHTTP, Start,
// KafkaHeaders); the worker reads the record's (FromKafka), runs under a
// span of its own and writes them on every stream event (KafkaHeaders).
// Each hop keeps the trace, tracestate and baggage, and names its own span.
func TestTraceStateAndBaggageTravelWithTraceparentAtEveryHop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr, err := New(ctx, Config{ServiceName: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(ctx)

	// Ingest: the POST's headers into the request record's.
	h := http.Header{}
	h.Set("traceparent", "00-"+callerTraceID+"-"+callerSpanID+"-01")
	h.Set("tracestate", callerTracestate)
	h.Set("baggage", callerBaggage)
	ictx, ispan := tr.Start(tr.FromHTTP(ctx, h), "ingest.post_message")
	record := tr.KafkaHeaders(ictx)
	ispan.End()
	checkHeaders(t, "the request record", record, callerSpanID)

	// The worker: the record's headers (among others) into each stream
	// event's.
	record = append([]kafka.Header{{Key: "turnpike-source-topic", Value: []byte("t")}}, record...)
	wctx, wspan := tr.Start(tr.FromKafka(ctx, record), "worker.run")
	event := tr.KafkaHeaders(wctx)
	wspan.End()
	recordSpan := strings.Split(mustHeader(t, record, "traceparent"), "-")[2]
	checkHeaders(t, "a stream event", event, recordSpan)
	if got := strings.Split(mustHeader(t, event, "traceparent"), "-")[2]; got != wspan.SpanContext().SpanID().String() {
		t.Errorf("a stream event's traceparent names span %s, want the worker's %s", got, wspan.SpanContext().SpanID())
	}

	// Without a trace context, no header is written.
	if hs := tr.KafkaHeaders(ctx); len(hs) != 0 {
		t.Errorf("headers without a trace context: %v", hs)
	}
}

func mustHeader(t *testing.T, hs []kafka.Header, key string) string {
	t.Helper()
	v, n := header(hs, key)
	if n != 1 {
		t.Fatalf("%d %s headers in %v, want one", n, key, hs)
	}
	return v
}

// checkHeaders fails unless hs carry the caller's trace under a span other
// than parent's, sampled, with its tracestate and baggage, each once.
func checkHeaders(t *testing.T, what string, hs []kafka.Header, parent string) {
	t.Helper()
	tp := strings.Split(mustHeader(t, hs, "traceparent"), "-")
	if len(tp) != 4 || tp[0] != "00" || tp[1] != callerTraceID || tp[2] == parent || tp[3] != "01" {
		t.Errorf("%s: traceparent %q, want the caller's sampled trace %s under a span of its own", what, strings.Join(tp, "-"), callerTraceID)
	}
	if ts := mustHeader(t, hs, "tracestate"); ts != callerTracestate {
		t.Errorf("%s: tracestate %q, want %q", what, ts, callerTracestate)
	}
	if b := mustHeader(t, hs, "baggage"); !sameMembers(b, callerBaggage) {
		t.Errorf("%s: baggage %q, want the members of %q", what, b, callerBaggage)
	}
}

// sameMembers compares two baggage headers as sets of members (W3C
// baggage does not fix their order).
func sameMembers(a, b string) bool {
	as, bs := strings.Split(a, ","), strings.Split(b, ",")
	if len(as) != len(bs) {
		return false
	}
	set := map[string]bool{}
	for _, m := range as {
		set[strings.TrimSpace(m)] = true
	}
	for _, m := range bs {
		if !set[strings.TrimSpace(m)] {
			return false
		}
	}
	return true
}

// collector is an OTLP/HTTP trace receiver: it answers POST /v1/traces
// (the path the OTLP/HTTP spec gives a collector's traces) and records the
// spans' trace ids and names.
type collector struct {
	*httptest.Server

	mu    sync.Mutex
	spans []string // "<trace id> <name>"
	other []string // requests to anything else
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
			c.mu.Lock()
			c.other = append(c.other, r.Method+" "+r.URL.Path)
			c.mu.Unlock()
			http.NotFound(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if err != nil {
			t.Errorf("collector: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					c.spans = append(c.spans, hex.EncodeToString(s.GetTraceId())+" "+s.GetName())
				}
			}
		}
		c.mu.Unlock()
		resp, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = io.Copy(w, bytes.NewReader(resp))
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *collector) received() (spans, other []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.spans...), append([]string(nil), c.other...)
}

// README, "Observability": spans are exported over OTLP/HTTP when
// TURNPIKE_OTLP_ENDPOINT (a collector, e.g. http://otel-collector:4318) is
// set, sampled by TURNPIKE_TRACE_SAMPLE_RATIO, the share of new traces;
// a caller's sampling decision is kept. Shutdown flushes the export, so
// the counts are final when it returns.
func TestSpansAreExportedOverOTLPHTTPSampledByTheRatio(t *testing.T) {
	t.Parallel()
	const newTraces = 20
	for _, tt := range []struct {
		name     string
		endpoint func(c *collector) string
		ratio    float64
		want     int // spans of new traces exported
	}{
		{"At ratio 1 every new trace is exported to the collector's address.", func(c *collector) string { return c.URL }, 1, newTraces},
		{"An address with a trailing slash is the collector's too.", func(c *collector) string { return c.URL + "/" }, 1, newTraces},
		{"A full traces URL is used as given.", func(c *collector) string { return c.URL + "/v1/traces" }, 1, newTraces},
		// 1e-12 of the trace id space: no trace of 20 is in it but once
		// in 10^10 runs.
		{"At a ratio near 0 no new trace is exported.", func(c *collector) string { return c.URL }, 1e-12, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c := newCollector(t)
			tr, err := New(ctx, Config{ServiceName: "test", Endpoint: tt.endpoint(c), SampleRatio: tt.ratio})
			if err != nil {
				t.Fatal(err)
			}
			for range newTraces {
				_, s := tr.Start(ctx, "new")
				s.End()
			}
			// A caller's sampled trace is exported whatever the ratio.
			h := http.Header{}
			h.Set("traceparent", "00-"+callerTraceID+"-"+callerSpanID+"-01")
			_, s := tr.Start(tr.FromHTTP(ctx, h), "continued")
			s.End()
			if err := tr.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			spans, other := c.received()
			if len(other) > 0 {
				t.Errorf("requests to other paths than POST /v1/traces: %v", other)
			}
			got, continued := 0, 0
			for _, s := range spans {
				switch {
				case s == callerTraceID+" continued":
					continued++
				case strings.HasSuffix(s, " new"):
					got++
				default:
					t.Errorf("unexpected span %q", s)
				}
			}
			if got != tt.want || continued != 1 {
				t.Errorf("exported %d spans of %d new traces and %d of the caller's; want %d and 1", got, newTraces, continued, tt.want)
			}
		})
	}
}

// An endpoint that is not an http(s) URL is refused at start, rather than
// spans going elsewhere (the exporter would log the error and post to
// localhost:4318).
func TestNewRefusesAnEndpointThatIsNotAnHTTPURL(t *testing.T) {
	t.Parallel()
	for _, endpoint := range []string{"otel-collector:4318", "otel-collector", "grpc://otel-collector:4317", "http://"} {
		if _, err := New(context.Background(), Config{Endpoint: endpoint}); err == nil || !strings.Contains(err.Error(), "OTLP endpoint") {
			t.Errorf("New with endpoint %q: %v, want it refused", endpoint, err)
		}
	}
}
