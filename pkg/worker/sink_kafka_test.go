package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// sinkFixture is a stream writer on a broker that hands every produce
// request of the stream topic to a hold function, which answers it.
type sinkFixture struct {
	brokers []string
	stream  string
	w       *streamWriter
	id      events.Identity
	// The writer's histograms: every event's write, each run's first token's.
	written, firstToken, ttft prometheus.Histogram
}

func newSinkFixture(t *testing.T, ctx context.Context, hold func(p heldProduce) (kmsg.Response, bool)) *sinkFixture {
	t.Helper()
	k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	f := &sinkFixture{brokers: []string{k.Addr()}, stream: testenv.Name(t, "stream"), id: events.Identity{Tenant: "acme", User: "ann", Conversation: "sunk"}}
	if err := topic.Ensure(ctx, f.brokers, 3, f.stream); err != nil {
		t.Fatal(err)
	}
	cluster := k.Cluster()
	cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := r.(*kmsg.ProduceRequest)
		if len(req.Topics) == 0 || req.Topics[0].Topic != f.stream {
			return nil, nil, false
		}
		resp, handled := hold(heldProduce{cluster: cluster, req: req})
		return resp, nil, handled
	})
	f.written = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stream_write_seconds"})
	f.firstToken = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "first_token_write_seconds"})
	f.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "time_to_first_token_seconds", Buckets: ttftBuckets})
	f.w = newStreamWriter(f.brokers, f.stream, time.Millisecond, f.written, f.firstToken, f.ttft)
	t.Cleanup(func() { f.w.Close() })
	return f
}

// heldProduce is a produce request of the stream topic in the broker's
// hands.
type heldProduce struct {
	cluster *kfake.Cluster
	req     *kmsg.ProduceRequest
}

// sleep holds the request, without blocking the broker, until wakeup
// returns.
func (c heldProduce) sleep(wakeup func()) { c.cluster.SleepControl(wakeup) }

// refuse is the broker's answer refusing the request.
func (c heldProduce) refuse() kmsg.Response {
	resp := c.req.ResponseKind().(*kmsg.ProduceResponse)
	for _, tp := range c.req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = tp.Topic
		for _, pp := range tp.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = pp.Partition
			rp.ErrorCode = kerr.PolicyViolation.Code // not retried by the writer itself
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// waitOrEnd waits for a value or the close of ch, or the end of the test
// (which releases whatever the broker still holds).
func waitOrEnd(t *testing.T, ch <-chan struct{}) {
	select {
	case <-ch:
	case <-t.Context().Done():
	}
}

// token is the run's event seq.
func (f *sinkFixture) token(seq int64) events.Event {
	return &events.TokenEvent{Meta: events.Meta{Conversation: f.id.Conversation, RequestID: "r1", RunID: "run-1", Seq: seq, TS: time.Now().UnixNano()},
		Delta: "x", Agent: "assistant", Role: "assistant"}
}

// The stream sink (DESIGN.md "Bridge", sink_kafka.go) leaves at most 2
// events of a run unacknowledged: while the broker acknowledges nothing,
// two events are handed over and the third waits, here until its context
// ends. Once the broker answers, every event follows, in emission order,
// in the partition of the run's key, each with the run's headers.
func TestAStreamSinkKeepsARunsEventsInOrderWithAtMostTwoUnacknowledged(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	answer := make(chan struct{}) // closed: the broker answers
	f := newSinkFixture(t, ctx, func(c heldProduce) (kmsg.Response, bool) {
		c.sleep(func() { waitOrEnd(t, answer) })
		return nil, false // then the broker writes it
	})
	headers := []kafka.Header{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}
	rs := f.w.run(headers, time.Time{})
	for seq := int64(1); seq <= 2; seq++ { // the documented window
		if err := rs.Emit(ctx, f.id, f.token(seq)); err != nil {
			t.Fatalf("event %d: %v", seq, err)
		}
	}
	// Nothing is acknowledged while the broker holds its answers, so the
	// third event can only wait: whatever the deadline, it is still
	// waiting when it comes.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := rs.Emit(short, f.id, f.token(3))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third event with two unacknowledged returned %v, want it to wait for an acknowledgement", err)
	}
	close(answer)
	const n = 6
	for seq := int64(3); seq <= n; seq++ {
		if err := rs.Emit(ctx, f.id, f.token(seq)); err != nil {
			t.Fatalf("event %d: %v", seq, err)
		}
	}
	if err := rs.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: f.brokers, Topic: f.stream, Partition: topic.Home([]byte(f.id.Key()), 3), MaxWait: 100 * time.Millisecond})
	defer r.Close()
	for seq := int64(1); seq <= n; seq++ {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read event %d: %v", seq, err)
		}
		e, err := events.DecodeEvent(m.Value)
		if err != nil || e.Header().Seq != seq || string(m.Key) != f.id.Key() {
			t.Fatalf("record %d of the key's partition is %s (key %q, %v), want event %d", m.Offset, m.Value, m.Key, err, seq)
		}
		if len(m.Headers) != 1 || m.Headers[0].Key != headers[0].Key || string(m.Headers[0].Value) != string(headers[0].Value) {
			t.Fatalf("event %d carries headers %v, want the run's %v", seq, m.Headers, headers)
		}
	}
}

// A run's record is done only after every event is acknowledged (DESIGN.md
// "Bridge"): Flush waits for the broker's answer to an event emitted
// before it, and reports the event's failure; every later Emit reports it
// too.
func TestAStreamSinkFlushWaitsForEveryAcknowledgementAndReportsAFailure(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	answer := make(chan struct{})
	f := newSinkFixture(t, ctx, func(c heldProduce) (kmsg.Response, bool) {
		c.sleep(func() { waitOrEnd(t, answer) })
		return c.refuse(), true
	})
	rs := f.w.run(nil, time.Time{})
	if err := rs.Emit(ctx, f.id, f.token(1)); err != nil {
		t.Fatal(err)
	}
	// The event's write is at the broker, which refuses it only now: a
	// Flush that did not wait for the answer would report no failure.
	answer <- struct{}{}
	if err := rs.Flush(); !errors.Is(err, kafka.PolicyViolation) {
		t.Fatalf("Flush returned %v, want the refused event's failure", err)
	}
	if err := rs.Emit(ctx, f.id, f.token(2)); !errors.Is(err, errStreamFailed) || !errors.Is(err, kafka.PolicyViolation) {
		t.Fatalf("an event after a failed one returned %v, want %v", err, errStreamFailed)
	}
}

// A run's first token is timed to its record's acknowledgement once per
// run (turnpike_worker_first_token_write_seconds, README.md
// "Observability"): a run of three token events counts one sample, a run
// without a token event none; every event counts in the write histogram.
func TestAStreamSinkTimesOnlyTheFirstTokenEventOfEachRun(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newSinkFixture(t, ctx, func(heldProduce) (kmsg.Response, bool) { return nil, false })
	meta := func(seq int64) events.Meta {
		return events.Meta{Conversation: f.id.Conversation, RequestID: "r1", RunID: "run-1", Seq: seq, TS: time.Now().UnixNano()}
	}
	for _, run := range [][]events.Event{
		{&events.RunStartedEvent{Meta: meta(1)}, f.token(2), f.token(3), f.token(4), &events.RunCompletedEvent{Meta: meta(5), Status: events.StatusComplete}},
		{&events.RunStartedEvent{Meta: meta(1)}, &events.RunCompletedEvent{Meta: meta(2), Status: events.StatusDiscarded}},
	} {
		rs := f.w.run(nil, time.Time{})
		for _, e := range run {
			if err := rs.Emit(ctx, f.id, e); err != nil {
				t.Fatalf("event %d: %v", e.Header().Seq, err)
			}
		}
		if err := rs.Flush(); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
	for _, c := range []struct {
		name string
		h    prometheus.Histogram
		want uint64
	}{{"first token writes", f.firstToken, 1}, {"event writes", f.written, 7}} {
		var m dto.Metric
		if err := c.h.Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetHistogram().GetSampleCount(); got != c.want {
			t.Errorf("%s: %d samples, want %d", c.name, got, c.want)
		}
	}
}

// The time to first token (turnpike_worker_time_to_first_token_seconds,
// docs/api.md "Health and metrics") runs from the request record's Kafka
// timestamp, not from the token's emission: a run whose request was
// stamped an hour ago counts one sample of at least an hour, a run
// without a token event and a run without a request time (a completion
// written for a request that never ran) none.
func TestAStreamSinkTimesTheFirstTokenFromTheRequestRecord(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	f := newSinkFixture(t, ctx, func(heldProduce) (kmsg.Response, bool) { return nil, false })
	meta := func(seq int64) events.Meta {
		return events.Meta{Conversation: f.id.Conversation, RequestID: "r1", RunID: "run-1", Seq: seq, TS: time.Now().UnixNano()}
	}
	requested := time.Now().Add(-time.Hour)
	for _, run := range []struct {
		requested time.Time
		events    []events.Event
	}{
		{requested, []events.Event{&events.RunStartedEvent{Meta: meta(1)}, f.token(2), f.token(3), &events.RunCompletedEvent{Meta: meta(4), Status: events.StatusComplete}}},
		{requested, []events.Event{&events.RunStartedEvent{Meta: meta(1)}, &events.RunCompletedEvent{Meta: meta(2), Status: events.StatusDiscarded}}},
		{time.Time{}, []events.Event{&events.RunStartedEvent{Meta: meta(1)}, f.token(2), &events.RunCompletedEvent{Meta: meta(3), Status: events.StatusComplete}}},
	} {
		rs := f.w.run(nil, run.requested)
		for _, e := range run.events {
			if err := rs.Emit(ctx, f.id, e); err != nil {
				t.Fatalf("event %d: %v", e.Header().Seq, err)
			}
		}
		if err := rs.Flush(); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
	var m dto.Metric
	if err := f.ttft.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetHistogram().GetSampleCount(); got != 1 {
		t.Errorf("time to first token: %d samples, want 1", got)
	}
	if got := m.GetHistogram().GetSampleSum(); got < time.Hour.Seconds() {
		t.Errorf("time to first token: %v s, want at least an hour (from the request record's timestamp)", got)
	}
}
