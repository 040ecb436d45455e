package worker_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/internal/tracing"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// lockedBuffer is a goroutine-safe log sink.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestAWorkerContinuesTheTraceLogsTheRunAndExportsMetrics(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.New(ctx, tracing.Config{ServiceName: "worker", SampleRatio: 1, Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	reg := prometheus.NewRegistry()

	// The request record arrives with the trace context ingest put on it.
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "traced"}
	if err := topic.Ensure(ctx, s.brokers, 3, s.topics.All()...); err != nil {
		t.Fatal(err)
	}
	traced := testenv.Request(id, "req-t", "hello")
	traced.Headers = []kafka.Header{{Key: "traceparent", Value: []byte("00-" + traceID + "-00f067aa0ba902b7-01")}}
	testenv.Produce(t, ctx, s.brokers, s.topics.Requests, traced)
	stop := s.start(t, ctx, worker.Deps{Registerer: reg, Tracing: tr,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: s.brokers, GroupID: testenv.Name(t, "r"), Topic: s.topics.Stream, StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var tp string
		for _, h := range m.Headers {
			if h.Key == "traceparent" {
				tp = string(h.Value)
			}
		}
		if !strings.Contains(tp, traceID) {
			t.Fatalf("stream event without the request's trace: traceparent %q", tp)
		}
		if e, err := events.DecodeEvent(m.Value); err == nil && e.Type() == events.TypeRunCompleted {
			break
		}
	}
	stop()
	if err := tr.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	var found bool
	for _, sp := range exp.GetSpans() {
		if sp.Name == "worker.request" {
			found = true
			if sp.SpanContext.TraceID().String() != traceID || sp.Parent.SpanID().String() != "00f067aa0ba902b7" {
				t.Fatalf("span %s is not a child of the record's trace: %v / parent %v", sp.Name, sp.SpanContext.TraceID(), sp.Parent.SpanID())
			}
		}
	}
	if !found {
		t.Fatalf("no worker.request span among %d", len(exp.GetSpans()))
	}
	var _ sdktrace.SpanExporter = exp

	// The run's log line names the request, the whole identity and the
	// run; every line about the request carries the whole identity, so two
	// users' conversations of the same name stay apart.
	var sawRun bool
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		_, aboutRequest := rec["request_id"]
		if _, ok := rec["conversation"]; ok || aboutRequest {
			if rec["tenant"] != id.Tenant || rec["user"] != id.User || rec["conversation"] != id.Conversation {
				t.Errorf("log line %v about the request lacks its whole identity %+v", rec, id)
			}
		}
		if rec["msg"] == "run completed" {
			sawRun = true
			for _, k := range []string{"request_id", "conversation", "tenant", "run_id"} {
				if v, _ := rec[k].(string); v == "" {
					t.Fatalf("run log %v lacks %s", rec, k)
				}
			}
		}
	}
	if !sawRun {
		t.Fatalf("no run log in %s", logs)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, name := range []string{"turnpike_worker_runs_total", "turnpike_worker_run_duration_seconds", "turnpike_worker_stream_write_seconds",
		"turnpike_worker_inflight_records", "turnpike_worker_dlq_total"} {
		if !have[name] {
			t.Errorf("metric %s missing", name)
		}
	}
}

// Message content is never logged (README "Observability"): with the
// worker logging at debug, requests that complete, break off, fail and are
// dead-lettered, are discarded, interrupted, cancelled, duplicated, and
// records that are invalid and dead-lettered, all carrying one marker in
// their content (and the answers echoing it), leave no trace of it in the
// logs, while every one of those paths logged.
func TestMessageContentIsNeverLogged(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	const marker = "c0ntent-7f3a9c-never-logged"
	s := newStack(t, history.NewMemoryStore())
	s.cfg.MaxAttempts = 2 // "fail" is retried once, then dead-lettered
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "private"}
	conv := func(name string) events.Identity {
		return events.Identity{Tenant: "acme", User: "ann", Conversation: name}
	}
	valid := []struct {
		id                 events.Identity
		requestID, content string
	}{
		{id, "r-complete", "complete " + marker},
		{id, "r-complete", "complete " + marker}, // a duplicate
		{conv("break"), "r-break", "break " + marker},
		{conv("fail"), "r-fail", "fail " + marker},
		{conv("empty"), "r-empty", "empty " + marker},
		{conv("ask"), "r-ask", "ask " + marker},
		{conv("cancelled"), "r-cancelled", "complete " + marker},
	}
	for _, r := range valid {
		s.produce(t, ctx, r.id.Key(), request(r.id, r.requestID, r.content))
	}
	s.recordCancelAll(t, ctx, conv("cancelled"))
	invalid := []struct {
		key   string
		value []byte
	}{
		{id.Key(), []byte(`{"v":1,"tenant":"acme","user":"ann","conversation":"private","content":"` + marker + `","admin":true}`)},
		{conv("other").Key(), request(id, "r-spoof", marker)},
		{id.Key(), []byte(`{"v":1,"tenant":"acme","user":"ann","conversation":"private","content":"` + marker + `\u0000"}`)},
		{id.Key(), []byte(`{"v":1,"content":"` + marker)},
	}
	for _, r := range invalid {
		s.produce(t, ctx, r.key, r.value)
	}
	logs := &lockedBuffer{}
	stop := s.start(t, ctx, worker.Deps{Model: &outcomeModel{}, Agent: agentConfig(t, outcomeAgent),
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	s.stream(t).events(t, ctx, len(valid))
	dlq := kafka.NewReader(kafka.ReaderConfig{Brokers: s.brokers, GroupID: testenv.Name(t, "dlq"), Topic: s.topics.DLQ, StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
	defer dlq.Close()
	for range len(invalid) + 1 { // and r-fail
		if _, err := dlq.ReadMessage(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stop() // every goroutine that logs has returned

	out := logs.String()
	if i := strings.Index(out, marker); i >= 0 {
		line := out[strings.LastIndex(out[:i], "\n")+1:]
		if j := strings.Index(line, "\n"); j >= 0 {
			line = line[:j]
		}
		t.Fatalf("message content logged: %s", line)
	}
	for _, logged := range []string{`"level":"DEBUG"`, `"msg":"run completed"`, `"msg":"model error"`, `"msg":"attempt failed, retrying"`,
		`"msg":"dead-letter record"`, `"msg":"duplicate request"`, `"msg":"cancelled before it ran"`} {
		if !strings.Contains(out, logged) {
			t.Errorf("no log line has %s: the test does not see that path's logs", logged)
		}
	}
}
