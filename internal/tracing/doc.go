// Package tracing carries W3C trace context through Turnpike: from the
// HTTP request at ingest into the request record's Kafka headers, through
// the worker's run, into the headers of the run's stream events. Spans are
// exported over OTLP/HTTP when an endpoint is configured; without one,
// trace context is still created and propagated (so a caller's traceparent
// reaches every hop) and nothing is exported.
//
// A Tracing is safe for concurrent use.
package tracing
