package tracing

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config configures tracing.
type Config struct {
	// ServiceName names the service in exported spans.
	ServiceName string
	// Endpoint is the OTLP/HTTP collector, e.g. "http://otel-collector:4318"
	// (TURNPIKE_OTLP_ENDPOINT): spans are posted to its traces path,
	// /v1/traces. An endpoint with another path is the URL spans are
	// posted to. Empty: nothing is exported (default).
	Endpoint string
	// SampleRatio of new traces, 0..1 (default 1); a caller's sampling
	// decision is kept.
	SampleRatio float64
	// Exporter, if set, receives the spans instead of an OTLP endpoint
	// (tests record spans in memory).
	Exporter sdktrace.SpanExporter
}

// Tracing is a tracer provider with the W3C propagators.
type Tracing struct {
	provider   *sdktrace.TracerProvider
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
}

// New returns tracing for cfg. Shutdown flushes exported spans.
func New(ctx context.Context, cfg Config) (*Tracing, error) {
	if cfg.SampleRatio == 0 {
		cfg.SampleRatio = 1
	}
	if cfg.SampleRatio < 0 || cfg.SampleRatio > 1 {
		return nil, fmt.Errorf("tracing: sample ratio %v not in 0..1", cfg.SampleRatio)
	}
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
	}
	exp := cfg.Exporter
	if exp == nil && cfg.Endpoint != "" {
		u, err := tracesURL(cfg.Endpoint)
		if err != nil {
			return nil, err
		}
		e, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u))
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
		}
		exp = e
	}
	if exp != nil {
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	p := sdktrace.NewTracerProvider(opts...)
	name := cfg.ServiceName
	if name == "" {
		name = "turnpike"
	}
	return &Tracing{
		provider:   p,
		tracer:     p.Tracer("github.com/turnpike-dev/turnpike/" + name),
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}, nil
}

// tracesURL is the URL spans are posted to: the collector's traces path
// when endpoint names none (the exporter would post to "/" as given, where
// a collector answers 404), else endpoint itself.
func tracesURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("tracing: OTLP endpoint %q: want http://host:port or https://host:port, optionally with a path", endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// Shutdown flushes and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return t.provider.Shutdown(ctx)
}

// Flush exports the spans ended so far.
func (t *Tracing) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.ForceFlush(ctx)
}

// Start starts a span named name as a child of ctx's span.
func (t *Tracing) Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// FromHTTP returns ctx with the trace context of an incoming request's headers.
func (t *Tracing) FromHTTP(ctx context.Context, h http.Header) context.Context {
	if t == nil {
		return ctx
	}
	return t.propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// FromKafka returns ctx with the trace context of a record's headers.
func (t *Tracing) FromKafka(ctx context.Context, headers []kafka.Header) context.Context {
	if t == nil {
		return ctx
	}
	return t.propagator.Extract(ctx, kafkaCarrier{headers: &headers})
}

// KafkaHeaders returns the headers carrying ctx's trace context (none
// without one).
func (t *Tracing) KafkaHeaders(ctx context.Context) []kafka.Header {
	if t == nil {
		return nil
	}
	var h []kafka.Header
	t.propagator.Inject(ctx, kafkaCarrier{headers: &h})
	return h
}

// kafkaCarrier adapts record headers to the propagators.
type kafkaCarrier struct{ headers *[]kafka.Header }

func (c kafkaCarrier) Get(key string) string {
	for _, h := range *c.headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c kafkaCarrier) Set(key, value string) {
	for i, h := range *c.headers {
		if h.Key == key {
			(*c.headers)[i].Value = []byte(value)
			return
		}
	}
	*c.headers = append(*c.headers, kafka.Header{Key: key, Value: []byte(value)})
}

func (c kafkaCarrier) Keys() []string {
	keys := make([]string, len(*c.headers))
	for i, h := range *c.headers {
		keys[i] = h.Key
	}
	return keys
}
