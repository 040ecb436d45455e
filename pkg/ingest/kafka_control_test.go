package ingest

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// seenCompletions is KafkaCompletions as the Service runs it, reporting
// each request id it hands over after the Service has handled it.
type seenCompletions struct {
	*kafkaCompletions
	seen chan string
}

func (s seenCompletions) Run(ctx context.Context, done func(requestID string)) error {
	return s.kafkaCompletions.Run(ctx, func(id string) {
		done(id)
		s.seen <- id
	})
}

// docs/api.md, "POST …/messages" and "Control records": the counts of
// queued requests drop on the completed records workers announce on the
// control topic, read from every partition; a cancel record, or a
// completed record of a request this ingest did not count, changes
// nothing.
func TestQueueCountsDropOnTheCompletedRecordsOfTheControlTopic(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	brokers := testenv.Kafka(t)
	control := testenv.Name(t, "control")
	const partitions = 2
	if err := topic.Ensure(ctx, brokers, partitions, control); err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 64)
	s := newTestServiceWith(t, Config{RatePerSecond: -1, MaxQueuedPerConversation: 1}, nil, nil, nil, func(d *serviceDeps) {
		d.Completions = seenCompletions{newKafkaCompletions(brokers, control, nil), seen}
	})
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- s.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// A conversation of each partition of the control topic; a record of
	// it is keyed, and so placed, as a worker places it.
	var convs [partitions]string
	for i, found := 0, 0; found < partitions; i++ {
		c := fmt.Sprintf("ctl-%d", i)
		if p := topic.Home([]byte(events.Identity{Tenant: "acme", User: "ann", Conversation: c}.Key()), partitions); convs[p] == "" {
			convs[p], found = c, found+1
		}
	}
	record := func(typ events.ControlType, conv, requestID string) kafka.Message {
		c := events.Control{V: events.Version, Type: typ, Tenant: "acme", User: "ann", Conversation: conv, RequestID: requestID, At: testNow}
		if typ == events.ControlCompleted {
			c.Status = events.StatusComplete
		}
		b, err := events.EncodeControl(c)
		if err != nil {
			t.Fatal(err)
		}
		return kafka.Message{Key: []byte(c.Identity().Key()), Value: b}
	}
	w := testenv.Producer(t, brokers, control)
	write := func(msgs ...kafka.Message) {
		t.Helper()
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	post := func(conv string) (int, string) {
		w := s.do(http.MethodPost, "/v1/conversations/"+conv+"/messages", token(t, "acme", "ann"), `{"content":"hi"}`, nil)
		var a accepted
		_ = decodeStrictJSON(w.Body.Bytes(), &a)
		return w.Code, a.RequestID
	}
	var ids [partitions]string
	for p, conv := range convs {
		code, id := post(conv)
		if code != http.StatusAccepted {
			t.Fatalf("POST to %s: %d", conv, code)
		}
		ids[p] = id
		if code, _ := post(conv); code != http.StatusTooManyRequests {
			t.Fatalf("a second POST to %s: %d, want 429 (one queued at most)", conv, code)
		}
	}

	// next is the next request id handed over; "" when the test's time
	// is up. within bounds the wait, for the warm-up below.
	next := func(within <-chan time.Time) string {
		select {
		case id := <-seen:
			return id
		case <-within:
			return ""
		case <-ctx.Done():
			t.Fatalf("waiting for a completion (%v): the completed records of the control topic are not handed over", ctx.Err())
			return ""
		}
	}

	// KafkaCompletions starts at each partition's end: announce ends of
	// requests this ingest never counted, in every partition, until one of
	// each arrives.
	warm := map[int]bool{}
	for round := 0; len(warm) < partitions; round++ {
		for p, conv := range convs {
			write(record(events.ControlCompleted, conv, fmt.Sprintf("warm-%d-%d", p, round)))
		}
		timer := time.NewTimer(100 * time.Millisecond)
		for id := next(timer.C); id != "" && len(warm) < partitions; id = next(timer.C) {
			var p, r int
			if _, err := fmt.Sscanf(id, "warm-%d-%d", &p, &r); err != nil {
				t.Fatalf("completion of %q during the warm-up", id)
			}
			warm[p] = true
		}
		timer.Stop()
	}

	// A cancel of the first request changes nothing: the completion
	// written after it in its partition arrives, the count stays.
	write(record(events.ControlCancel, convs[0], ids[0]), record(events.ControlCompleted, convs[0], "after-the-cancel"))
	for id := next(nil); id != "after-the-cancel"; id = next(nil) {
		if id == ids[0] {
			t.Fatalf("a cancel record of %s was taken for its completion", id)
		}
	}
	if code, _ := post(convs[0]); code != http.StatusTooManyRequests {
		t.Fatalf("POST to %s after a cancel record: %d, want 429: only a completion lowers the count", convs[0], code)
	}

	// The completion of each counted request frees its conversation.
	for p, conv := range convs {
		write(record(events.ControlCompleted, conv, ids[p]))
		for next(nil) != ids[p] {
		}
		if code, _ := post(conv); code != http.StatusAccepted {
			t.Fatalf("POST to %s after its request completed: %d, want 202", conv, code)
		}
	}
}
