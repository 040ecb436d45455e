package ingest

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the service's Prometheus collectors (prefix turnpike_ingest_).
type metrics struct {
	requests      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	produceErrors prometheus.Counter
	limited       *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_ingest_limited_total", Help: "POSTs refused with 429, by limit (rate, queued).",
		}, []string{"limit"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "turnpike", Subsystem: "ingest", Name: "http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "turnpike", Subsystem: "ingest", Name: "http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
		produceErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "turnpike", Subsystem: "ingest", Name: "produce_errors_total",
			Help: "Request records that could not be written to Kafka (answered 503).",
		}),
	}
	// Every limit's series exists from the start, so that a rate over it
	// (a dashboard's, an alert's) reads 0 before the first refusal.
	for _, l := range []string{"rate", "queued"} {
		m.limited.WithLabelValues(l)
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.produceErrors, m.limited} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	return m, nil
}

// instrument counts and times every request of one route. route is a
// registered pattern, so the label set stays bounded.
func (m *metrics) instrument(route string, h http.Handler) http.Handler {
	duration := m.duration.WithLabelValues(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		duration.Observe(time.Since(start).Seconds())
		m.requests.WithLabelValues(route, strconv.Itoa(sw.code)).Inc()
	})
}

// statusWriter remembers the status code written through it.
type statusWriter struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.code, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
