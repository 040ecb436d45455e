package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// runWindow bounds the stream events of one run written and not yet
// acknowledged. Up to that many leave without waiting for the earlier ones'
// acknowledgements; then the run waits, and the tokens that arrive
// meanwhile coalesce into one event in the bridge. A small window is what
// keeps a loaded stack stable: when acknowledgements slow down, each run
// sends fewer, larger events instead of more of them. (Measured at 1,000
// streams of 50 tokens/s each on 2 cores: a window of 256 sent every token
// as its own event and latency grew to seconds.)
const runWindow = 2

// streamWriter writes stream events to the stream topic, keyed by identity
// so that a conversation's events stay in one partition, in order. It is
// asynchronous: kafka-go writes each partition's batches one after another,
// so the events of a run keep their order, and reports acknowledgements to
// the run that wrote them.
type streamWriter struct {
	w *kafka.Writer
	// written observes each event's time from Emit to acknowledgement.
	written prometheus.Observer
	// firstToken observes, for each run (each sink) that emits a token
	// event, the time from its first token event's emission (the event's
	// ts) to the acknowledgement of its record.
	firstToken prometheus.Observer
	// ttft observes, for each run that emits a token event and whose
	// request record's time is known, the time from that record's Kafka
	// timestamp to the acknowledgement of the run's first token record.
	ttft prometheus.Observer
}

func newStreamWriter(brokers []string, streamTopic string, batchTimeout time.Duration, written, firstToken, ttft prometheus.Observer) *streamWriter {
	s := &streamWriter{w: topic.StreamWriter(brokers, streamTopic, batchTimeout), written: written, firstToken: firstToken, ttft: ttft}
	s.w.Async = true
	s.w.Completion = func(msgs []kafka.Message, err error) {
		now := time.Now()
		for _, m := range msgs {
			if pe, ok := m.WriterData.(*pendingEvent); ok {
				s.written.Observe(now.Sub(pe.at).Seconds())
				if pe.firstToken != 0 && err == nil {
					s.firstToken.Observe(max(0, now.Sub(time.Unix(0, pe.firstToken)).Seconds()))
					if !pe.rs.requested.IsZero() {
						s.ttft.Observe(max(0, now.Sub(pe.rs.requested).Seconds()))
					}
				}
				pe.rs.acked(err)
			}
		}
	}
	return s
}

// pendingEvent is an event written and not yet acknowledged.
type pendingEvent struct {
	rs *runSink
	at time.Time
	// firstToken is the ts (unix nanoseconds) of the run's first token
	// event, on that event only.
	firstToken int64
}

// run returns the sink of one run's events; headers (trace context) go on
// every event. requested is the Kafka timestamp of the run's request record
// (the start of its time to first token), zero when the run has none.
func (s *streamWriter) run(headers []kafka.Header, requested time.Time) *runSink {
	return &runSink{w: s.w, window: make(chan struct{}, runWindow), headers: headers, requested: requested}
}

// Close flushes what is buffered and closes the writer.
func (s *streamWriter) Close() error { return s.w.Close() }

// runSink is a bridge.Sink for one run. Emit returns once the event is
// handed to the writer; Flush waits for every acknowledgement and reports
// the first failure. Emit is called from one goroutine (the run's).
type runSink struct {
	w       *kafka.Writer
	headers []kafka.Header
	// requested is the request record's Kafka timestamp (zero: unknown).
	requested time.Time
	// The record key of the run's identity, built once: kafka-go only
	// reads a message's Key, so every event of the run shares it.
	keyOf   events.Identity
	key     []byte
	window  chan struct{} // one token per event written and not yet acknowledged
	pending sync.WaitGroup
	// tokened: a token event was emitted (the first is timed to its
	// acknowledgement).
	tokened bool

	mu  sync.Mutex // guards err
	err error
}

// errStreamFailed is returned by Emit after an earlier event failed.
var errStreamFailed = errors.New("an earlier stream event failed")

// Emit implements bridge.Sink.
func (rs *runSink) Emit(ctx context.Context, id events.Identity, e events.Event) error {
	if err := rs.failed(); err != nil {
		return fmt.Errorf("%w: %w", errStreamFailed, err)
	}
	select {
	case rs.window <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	rs.pending.Add(1)
	// The writer keeps the value until it is written: a fresh buffer each.
	v := events.AppendEvent(make([]byte, 0, 256), e)
	if rs.key == nil || id != rs.keyOf {
		rs.keyOf, rs.key = id, []byte(id.Key())
	}
	pe := &pendingEvent{rs: rs, at: time.Now()}
	if e.Type() == events.TypeToken && !rs.tokened {
		rs.tokened = true
		if pe.firstToken = e.Header().TS; pe.firstToken == 0 {
			pe.firstToken = pe.at.UnixNano()
		}
	}
	m := kafka.Message{Key: rs.key, Value: v, Headers: rs.headers, WriterData: pe}
	if err := rs.w.WriteMessages(ctx, m); err != nil {
		rs.acked(err) // the message never reached the writer
		return fmt.Errorf("write stream event: %w", err)
	}
	return nil
}

// acked is called once per event, by the writer's completion callback.
func (rs *runSink) acked(err error) {
	if err != nil {
		rs.mu.Lock()
		if rs.err == nil {
			rs.err = fmt.Errorf("write stream event: %w", err)
		}
		rs.mu.Unlock()
	}
	<-rs.window
	rs.pending.Done()
}

func (rs *runSink) failed() error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.err
}

// Flush waits until every event emitted is acknowledged, and reports the
// first failure. The record of the run is done only after a nil Flush.
func (rs *runSink) Flush() error {
	rs.pending.Wait()
	return rs.failed()
}
