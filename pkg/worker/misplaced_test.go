package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/ingest"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// produceAt writes records to one partition of the requests topic, as a
// producer with another partitioner than Murmur2 would.
func (s *stack) produceAt(t *testing.T, ctx context.Context, partition int, key string, values ...[]byte) {
	t.Helper()
	// Its own transport: kafka-go's shared one may not know a partition
	// added a moment ago.
	w := &kafka.Writer{Addr: kafka.TCP(s.brokers...), Topic: s.topics.Requests, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll,
		Balancer: kafka.BalancerFunc(func(kafka.Message, ...int) int { return partition }), Transport: &kafka.Transport{}}
	defer w.Close()
	for _, v := range values {
		if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(key), Value: v}); err != nil {
			t.Fatal(err)
		}
	}
}

// movingConversation returns the first conversation of ann named
// prefix-N whose home partition is another with 3 partitions than with 2,
// and keep accepts its home with 3.
func movingConversation(prefix string, keep func(after int) bool) events.Identity {
	for i := 0; ; i++ {
		id := events.Identity{Tenant: "acme", User: "ann", Conversation: fmt.Sprintf("%s-%d", prefix, i)}
		before, after := topic.Home([]byte(id.Key()), 2), topic.Home([]byte(id.Key()), 3)
		if before != after && keep(after) {
			return id
		}
	}
}

// growRequests adds partitions to the requests topic, up to n; it returns
// the admin client it used.
func (s *stack) growRequests(t *testing.T, ctx context.Context, n int32) *kafka.Client {
	t.Helper()
	cl := &kafka.Client{Addr: kafka.TCP(s.brokers...)}
	resp, err := cl.CreatePartitions(ctx, &kafka.CreatePartitionsRequest{Topics: []kafka.TopicPartitionsConfig{{Name: s.topics.Requests, Count: n}}})
	if err != nil || resp.Errors[s.topics.Requests] != nil {
		t.Fatalf("add partitions up to %d: %v %v", n, err, resp)
	}
	return cl
}

// readPartition returns the first n records of one partition of the
// requests topic.
func (s *stack) readPartition(t *testing.T, ctx context.Context, partition, n int) []kafka.Message {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: s.brokers, Topic: s.topics.Requests, Partition: partition, MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	var out []kafka.Message
	for len(out) < n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("read partition %d after %d records: %v", partition, len(out), err)
		}
		out = append(out, m)
	}
	return out
}

// recordCancelAll records a cancel of everything in the conversation as
// ingest does before it publishes one: in every partition, with that
// partition's end offset now. It returns the position it used.
func (s *stack) recordCancelAll(t *testing.T, ctx context.Context, id events.Identity) ingest.Position {
	t.Helper()
	pos, err := ingest.NewKafkaPositions(s.brokers, s.topics.Requests).End(ctx, []byte(id.Key()))
	if err != nil {
		t.Fatal(err)
	}
	for p, end := range pos.Ends {
		if err := s.store.RecordCancel(ctx, id, history.Cancel{Topic: pos.Topic, Partition: p, Before: end, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	return pos
}

// publishCancelAll publishes on the control topic, as ingest does after
// recording it, a cancel of everything in the conversation below offset
// before of partition.
func (s *stack) publishCancelAll(t *testing.T, ctx context.Context, id events.Identity, partition int, before int64) {
	t.Helper()
	v, err := events.EncodeControl(events.Control{V: events.Version, Type: events.ControlCancel, Tenant: id.Tenant, User: id.User,
		Conversation: id.Conversation, Partition: partition, Before: before, At: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Produce(t, ctx, s.brokers, s.topics.Control, kafka.Message{Key: []byte(id.Key()), Value: v})
}

func header(m kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func startedCount(evs []events.Event) map[string]int {
	n := map[string]int{}
	for _, e := range evs {
		if e.Type() == events.TypeRunStarted {
			n[e.Header().RequestID]++
		}
	}
	return n
}

// A worker that moved a record and crashed before committing its offset
// moves it again: both copies carry the request id derived from where the
// record was first written, so it runs once. (The crash is a consumer
// group that never committed: a fresh group reads every partition from the
// start, the original and the first copy included.)
func TestAMisplacedRecordMovedTwiceRunsOnce(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	s.ensureTopics(t, ctx, 3)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "moved-twice"}
	home := topic.Home([]byte(id.Key()), 3)
	away := (home + 1) % 3
	s.produceAt(t, ctx, away, id.Key(), request(id, "", "once"))
	original := s.readPartition(t, ctx, away, 1)[0]
	derived := events.DerivedRequestID(away, original.Offset, original.Time)

	reg := prometheus.NewRegistry()
	stop := s.start(t, ctx, worker.Deps{Registerer: reg})
	st := s.stream(t)
	first := st.events(t, ctx, 1)
	waitCounter(t, ctx, reg, 1, "turnpike_worker_moved_total")
	stop()

	s.cfg.GroupID = testenv.Name(t, "crashed")
	s.start(t, ctx, worker.Deps{})
	again := st.events(t, ctx, 2) // the first copy, then the second: both already decided
	copies := s.readPartition(t, ctx, home, 2)
	for i, c := range copies {
		if header(c, topic.HeaderSourcePartition) != strconv.Itoa(away) || header(c, topic.HeaderSourceOffset) != strconv.FormatInt(original.Offset, 10) ||
			header(c, topic.HeaderSourceTopic) != s.topics.Requests || !c.Time.Equal(original.Time) || string(c.Value) != string(original.Value) {
			t.Fatalf("copy %d %+v does not name its original %s/%d/%d", i, c, s.topics.Requests, away, original.Offset)
		}
	}
	started := startedCount(append(first, again...))
	if len(started) != 1 || started[derived] != 1 {
		t.Fatalf("runs started %v, want %s once", started, derived)
	}
	page, err := s.store.List(ctx, id, 0, 10)
	if err != nil || len(page.Messages) != 2 || page.Messages[0].RequestID != derived {
		t.Fatalf("history %+v, %v: want one turn of %s", page.Messages, err, derived)
	}
}

// ingest records a cancel in every partition with that partition's end
// offset, so a record a direct producer wrote to another partition before
// the cancel is cancelled even when the worker moves it home after it;
// one written after the cancel runs.
func TestACancelCoversAMisplacedRecordMovedAfterIt(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	s.ensureTopics(t, ctx, 3)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "cancel-before-move"}
	home := topic.Home([]byte(id.Key()), 3)
	away := (home + 2) % 3
	s.produceAt(t, ctx, away, id.Key(), request(id, "before", "cancelled before it was moved"))
	s.produce(t, ctx, id.Key(), request(id, "home-before", "cancelled where it is"))

	// The cancel, as ingest records it (no worker runs yet, so nothing
	// has been moved).
	pos := s.recordCancelAll(t, ctx, id)
	if pos.Partition != home || len(pos.Ends) != 3 || pos.Ends[away] != 1 || pos.Ends[home] != 1 {
		t.Fatalf("position %+v: want home %d and one record in partitions %d and %d", pos, home, home, away)
	}
	s.produceAt(t, ctx, away, id.Key(), request(id, "after", "after the cancel"))

	s.start(t, ctx, worker.Deps{})
	evs := s.stream(t).events(t, ctx, 3)
	status := map[string]events.Status{}
	for _, e := range evs {
		if c, ok := e.(*events.RunCompletedEvent); ok {
			status[c.RequestID] = c.Status
		}
	}
	want := map[string]events.Status{"before": events.StatusCancelled, "home-before": events.StatusCancelled, "after": events.StatusComplete}
	if fmt.Sprint(status) != fmt.Sprint(want) {
		t.Fatalf("completed %v, want %v", status, want)
	}
}

// Partitions added to the requests topic change a key's home. The worker
// notices, ends its generation (draining what runs), and in the next one
// places by the new count: records queued in the old home are moved to the
// new one, where ingest now writes. None is lost, each runs once, and two
// requests of the conversation never run at once.
func TestAddingPartitionsMovesQueuedRecordsToTheNewHome(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		// newHomeAdded: the key's new home is the added partition, which
		// no worker reads before the rebalance; otherwise it is an existing
		// partition, whose worker still places by the old count until it
		// notices: it moves the records written there under the new count
		// back to the old home, and after the rebalance they move on again.
		newHomeAdded bool
		maxMoves     float64
	}{
		{name: "The new home is the added partition.", newHomeAdded: true, maxMoves: 2},
		{name: "The new home is an existing partition.", newHomeAdded: false, maxMoves: 6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 60*time.Second)
			s := newStack(t, history.NewMemoryStore())
			s.cfg.Partitions = 2
			s.cfg.PartitionWatchInterval = 100 * time.Millisecond
			s.ensureTopics(t, ctx, 2)
			id := movingConversation("grow", func(after int) bool { return (after == 2) == tt.newHomeAdded })
			oldHome, newHome := topic.Home([]byte(id.Key()), 2), topic.Home([]byte(id.Key()), 3)
			m := &probeModel{hold: make(chan struct{})}
			content := func(i int) string { return fmt.Sprintf("%s m%d", id.Conversation, i) }
			s.produceAt(t, ctx, oldHome, id.Key(), request(id, "r1", content(1)), request(id, "r2", content(2)), request(id, "r3", content(3)))
			reg := prometheus.NewRegistry()
			s.start(t, ctx, worker.Deps{Model: m, Registerer: reg})
			testenv.Eventually(t, ctx, "the first run", func() bool { return m.inFlight() == 1 })

			cl := s.growRequests(t, ctx, 3)
			s.produceAt(t, ctx, newHome, id.Key(), request(id, "r4", content(4)), request(id, "r5", content(5)))
			close(m.hold)

			evs := s.stream(t).events(t, ctx, 5)
			if err := testenv.OneRunAtATime(evs); err != nil {
				t.Fatal(err)
			}
			if _, maxConv, _ := m.stats(); maxConv != 1 {
				t.Fatalf("%d runs of the conversation at once", maxConv)
			}
			if started := startedCount(evs); len(started) != 5 {
				t.Fatalf("runs started %v, want r1..r5 once each", started)
			}
			page, err := s.store.List(ctx, id, 0, 50)
			if err != nil || len(page.Messages) != 10 {
				t.Fatalf("history %+v, %v: want 5 turns", page.Messages, err)
			}
			// Only r2 and r3 (and in the second case r4 and r5, twice) were
			// copied.
			if n := testenv.MetricValue(t, reg, "turnpike_worker_moved_total"); n > tt.maxMoves {
				t.Fatalf("%v records moved, want at most %v", n, tt.maxMoves)
			}
			if !tt.newHomeAdded {
				return
			}
			offs, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{s.topics.Requests: {kafka.LastOffsetOf(oldHome)}}})
			if err != nil || len(offs.Topics[s.topics.Requests]) != 1 || offs.Topics[s.topics.Requests][0].LastOffset != 3 {
				t.Fatalf("old home partition's end %+v, %v: want its 3 records and no copy", offs, err)
			}
		})
	}
}

// A worker whose count read after the group's assignment differs from the
// one it read before joining (partitions were added around the rebalance,
// so another worker may have read the other count) starts no partition:
// it rejoins, and places by the count every worker then agrees on.
func TestAPartitionCountChangedAroundARebalanceRejoinsBeforeRunning(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	s.ensureTopics(t, ctx, 3)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "rejoin"}
	s.produce(t, ctx, id.Key(), request(id, "r1", "after the rejoin"))
	logs := &lockedBuffer{}
	w := s.newWorker(t, worker.Deps{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	worker.SetCountBeforeJoin(w, 2)
	s.run(t, ctx, w)
	evs := s.stream(t).events(t, ctx, 1)
	if txt, st := text(evs); txt != "echo #1: after the rejoin" || st != events.StatusComplete {
		t.Fatalf("streamed %q (%s)", txt, st)
	}
	out := logs.String()
	rejoined := strings.Index(out, "partition count changed around the rebalance")
	assigned := strings.Index(out, "requests_partitions=3")
	if rejoined < 0 || assigned < rejoined || strings.Contains(out[:max(rejoined, 0)], "partitions assigned") {
		t.Fatalf("want a rejoin before any partition is started, then partitions placed by 3; logs:\n%s", out)
	}
}

// While partitions are being added, ingest names a conversation's new home
// in a cancel of everything, but its run may still be in the old one
// (the worker has not noticed yet). The cancel reaches it all the same.
func TestACancelDuringAPartitionChangeReachesARunInTheOldHome(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	s.cfg.Partitions = 2
	s.cfg.PartitionWatchInterval = time.Hour // the worker does not notice during the test
	s.ensureTopics(t, ctx, 2)
	id := movingConversation("cancel-grow", func(int) bool { return true })
	m := &probeModel{hold: make(chan struct{})}
	defer close(m.hold)
	s.produceAt(t, ctx, topic.Home([]byte(id.Key()), 2), id.Key(), request(id, "r1", id.Conversation+" m1"))
	s.start(t, ctx, worker.Deps{Model: m})
	st := s.stream(t)
	testenv.Eventually(t, ctx, "the run", func() bool { return m.inFlight() == 1 })

	s.growRequests(t, ctx, 3)
	pos := s.recordCancelAll(t, ctx, id)
	if pos.Partition != topic.Home([]byte(id.Key()), 3) {
		t.Fatalf("ingest's home %d, want the new one", pos.Partition)
	}
	s.publishCancelAll(t, ctx, id, pos.Partition, pos.Ends[pos.Partition])
	if _, status := text(st.events(t, ctx, 1)); status != events.StatusCancelled {
		t.Fatalf("the run in the old home completed %s, want cancelled", status)
	}
}

// A record a direct producer wrote to another partition, moved home and
// running when a cancel of everything arrives over the control topic, is
// cancelled when the cancel covers it where it was first written: ingest
// read the end offsets before the move, so the home partition's does not
// cover the copy, but the origin partition's covers the original.
func TestACancelReachesARunningMovedRecordThroughItsOrigin(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	s.ensureTopics(t, ctx, 3)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "cancel-running-moved"}
	home := topic.Home([]byte(id.Key()), 3)
	away := (home + 1) % 3
	m := &probeModel{hold: make(chan struct{})}
	defer close(m.hold)
	s.produceAt(t, ctx, away, id.Key(), request(id, "r1", "moved, then cancelled while it runs"))
	s.start(t, ctx, worker.Deps{Model: m})
	st := s.stream(t)
	testenv.Eventually(t, ctx, "the moved record's run", func() bool { return m.inFlight() == 1 })

	// The cancel as ingest records and publishes it had it read the end
	// offsets before the move: the original (offset 0 of away) below its
	// partition's end, the copy (offset 0 of home) not below home's.
	for p, before := range map[int]int64{away: 1, home: 0} {
		if err := s.store.RecordCancel(ctx, id, history.Cancel{Topic: s.topics.Requests, Partition: p, Before: before, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	s.publishCancelAll(t, ctx, id, home, 0)
	if _, status := text(st.events(t, ctx, 1)); status != events.StatusCancelled {
		t.Fatalf("the moved record's run completed %s, want cancelled", status)
	}
}

// Invalid records are not moved (docs/api.md "Records outside their home
// partition"): one found outside its key's home partition is dead-lettered
// from the partition it was found in, and no copy of it is written
// anywhere.
func TestAnInvalidRecordOutsideItsHomeIsDeadLetteredWhereItWasFound(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	s.ensureTopics(t, ctx, 3)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "invalid-away"}
	other := events.Identity{Tenant: "acme", User: "bob", Conversation: "invalid-away"}
	bad := []struct {
		name, key string
		value     []byte
	}{
		{"not JSON", id.Key(), []byte("{nope")},
		{"a key of another identity", other.Key(), request(id, "spoof", "spoof")},
		{"an unknown field", id.Key(), []byte(`{"v":1,"tenant":"acme","user":"ann","conversation":"invalid-away","content":"x","admin":true}`)},
	}
	placed := map[string]int{} // value -> the partition it was written to
	want := make([]int64, 3)   // records written to each partition
	for _, b := range bad {
		away := (topic.Home([]byte(b.key), 3) + 1) % 3
		s.produceAt(t, ctx, away, b.key, b.value)
		placed[string(b.value)] = away
		want[away]++
	}
	reg := prometheus.NewRegistry()
	s.start(t, ctx, worker.Deps{Registerer: reg})

	dlq := kafka.NewReader(kafka.ReaderConfig{Brokers: s.brokers, GroupID: testenv.Name(t, "dlq"), Topic: s.topics.DLQ, StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
	defer dlq.Close()
	for range bad {
		m, err := dlq.ReadMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		away, ok := placed[string(m.Value)]
		if !ok {
			t.Fatalf("dead letter %q is none of the records written", m.Value)
		}
		delete(placed, string(m.Value))
		if got := header(m, worker.HeaderSourcePartition); got != strconv.Itoa(away) || header(m, worker.HeaderSourceOffset) == "" {
			t.Errorf("dead letter %q names partition %q, want %d where it was found", m.Value, got, away)
		}
	}
	// Every record was dead-lettered: had one been moved, its copy would be
	// in its home partition before its dead letter was written.
	if got := testenv.EndOffsets(t, ctx, s.brokers, s.topics.Requests, 3); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests partitions hold %v records, want %v: an invalid record was copied home", got, want)
	}
	if n := testenv.MetricValue(t, reg, "turnpike_worker_moved_total"); n != 0 {
		t.Errorf("%v records moved, want none", n)
	}
	if n := testenv.MetricValue(t, reg, "turnpike_worker_dlq_total"); n != float64(len(bad)) {
		t.Errorf("%v records dead-lettered, want %d", n, len(bad))
	}
}

// A copy Kafka refuses is retried for as long as the worker owns the
// partition, and each move is logged at info with the listed fields and
// counted (docs/api.md "Records outside their home partition"): the
// broker refuses the copy three times MaxAttempts in a row; then the copy
// lands, once, in the home partition, the record runs there once, and the
// move is one count of turnpike_worker_moved_total and one log line.
func TestAMoveIsRetriedWhileKafkaRefusesTheCopyThenLoggedAndCounted(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	s := newStack(t, history.NewMemoryStore())
	s.brokers = []string{k.Addr()}
	s.cfg.Brokers = s.brokers
	s.cfg.MaxAttempts = outageAttempts
	s.cfg.RetryBackoffMin, s.cfg.RetryBackoffMax = time.Millisecond, time.Millisecond
	s.ensureTopics(t, ctx, 3)
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "refused-copy"}
	home := topic.Home([]byte(id.Key()), 3)
	away := (home + 2) % 3
	s.produceAt(t, ctx, away, id.Key(), request(id, "r1", "moved after refusals"))

	// From now on the broker refuses the first writes to the requests
	// topic: the worker's copies.
	const refusals = 3 * outageAttempts
	refused := refuseProduces(k, s.topics.Requests, refusals)
	logs := &lockedBuffer{}
	reg := prometheus.NewRegistry()
	s.start(t, ctx, worker.Deps{Registerer: reg, Logger: slog.New(slog.NewJSONHandler(logs, nil))})

	// The move is counted once its copy is acknowledged: the copy is then
	// in the home partition.
	waitCounter(t, ctx, reg, 1, "turnpike_worker_moved_total")
	want := make([]int64, 3)
	want[away], want[home] = 1, 1
	if got := testenv.EndOffsets(t, ctx, s.brokers, s.topics.Requests, 3); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("requests partitions hold %v records, want %v: the original and one copy", got, want)
	}
	if n := refused.Load(); n != refusals {
		t.Fatalf("the broker refused %d copies, want %d: the outage was not exercised", n, refusals)
	}
	evs := s.stream(t).events(t, ctx, 1)
	if txt, st := text(evs); txt != "echo #1: moved after refusals" || st != events.StatusComplete {
		t.Fatalf("the moved record streamed %q %s", txt, st)
	}
	if n := testenv.MetricValue(t, reg, "turnpike_worker_retries_total"); n != refusals {
		t.Errorf("%v retries, want one per refused copy (%d)", n, refusals)
	}

	var moves []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if rec["msg"] == "misplaced record moved to its home partition" {
			delete(rec, "time")
			moves = append(moves, rec)
		}
	}
	wantLog := map[string]any{
		"level": "INFO", "msg": "misplaced record moved to its home partition",
		"tenant": id.Tenant, "user": id.User, "conversation": id.Conversation, "request_id": "r1",
		"topic": s.topics.Requests, "partition": float64(away), "offset": float64(0), "home_partition": float64(home),
		"source_topic": s.topics.Requests, "source_partition": float64(away), "source_offset": float64(0),
	}
	if len(moves) != 1 || !reflect.DeepEqual(moves[0], wantLog) {
		t.Errorf("moves logged %v, want one line %v", moves, wantLog)
	}
}

// A moved record is an ordinary request of its home partition (docs/api.md
// "Records outside their home partition"): its copy runs in the home's
// order, after the requests already there, even ones written after the
// original; and its strategy meets what is queued or running there, not
// where it was found. In the partition it was found in, a record being
// moved never counts as busy: a rejecting record behind it of the same
// conversation is moved too, not rejected there.
func TestAMovedRecordRunsInItsHomesOrderAndMeetsItsStrategyThere(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	s.ensureTopics(t, ctx, 3)
	q := events.Identity{Tenant: "acme", User: "ann", Conversation: "moved-queue"}
	i := events.Identity{Tenant: "acme", User: "ann", Conversation: "moved-interrupt"}
	away := func(id events.Identity) int { return (topic.Home([]byte(id.Key()), 3) + 1) % 3 }
	home := func(id events.Identity) int { return topic.Home([]byte(id.Key()), 3) }

	// The originals first: every request of the home partitions is
	// written after them, and runs before their copies all the same.
	s.produceAt(t, ctx, away(q), q.Key(),
		strategyRequest(q, "q-moved", "q moved", events.StrategyEnqueue),
		strategyRequest(q, "q-reject", "q reject", events.StrategyReject))
	s.produceAt(t, ctx, away(i), i.Key(), strategyRequest(i, "i-interrupt", "i interrupt", events.StrategyInterrupt))
	s.produceAt(t, ctx, home(q), q.Key(),
		strategyRequest(q, "q-1", "q 1", events.StrategyEnqueue),
		strategyRequest(q, "q-2", "q 2", events.StrategyEnqueue))
	s.produceAt(t, ctx, home(i), i.Key(), strategyRequest(i, "i-1", "i 1", events.StrategyEnqueue))

	// "q 1" holds its conversation until the rejecting copy has met it;
	// "i 1" is held until the interrupting copy cancels it.
	m := newGatedModel("q 1", "i 1")
	gate := m.gate("q 1")
	reg := prometheus.NewRegistry()
	s.start(t, ctx, worker.Deps{Model: m, Registerer: reg})
	st := s.stream(t)
	status := map[string]events.Status{}
	// Each of these completes only after the request it names: its
	// conversation's requests run one at a time, in the home's order.
	after := map[string]string{"q-2": "q-1", "q-moved": "q-2", "i-interrupt": "i-1"}
	completed := func(want ...string) {
		t.Helper()
		for slices.ContainsFunc(want, func(r string) bool { return status[r] == "" }) {
			e := st.next(t, ctx)
			c, ok := e.(*events.RunCompletedEvent)
			if !ok {
				continue
			}
			if first, ok := after[c.RequestID]; ok && status[first] == "" {
				t.Fatalf("%s completed before %s (completed so far %v)", c.RequestID, first, status)
			}
			status[c.RequestID] = c.Status
		}
	}
	completed("q-reject", "i-1")
	close(gate)
	completed("q-1", "q-2", "q-moved", "i-interrupt")

	want := map[string]events.Status{
		"q-1": events.StatusComplete, "q-2": events.StatusComplete, "q-moved": events.StatusComplete,
		"q-reject": events.StatusRejected, "i-1": events.StatusCancelled, "i-interrupt": events.StatusComplete,
	}
	if !reflect.DeepEqual(status, want) {
		t.Errorf("completed %v, want %v", status, want)
	}
	m.mu.Lock()
	var order []string
	for _, c := range m.runs {
		if strings.HasPrefix(c, "q ") {
			order = append(order, c)
		}
	}
	m.mu.Unlock()
	if want := []string{"q 1", "q 2", "q moved"}; !reflect.DeepEqual(order, want) {
		t.Errorf("%s ran %q, want %q: the moved request after those of its home", q.Conversation, order, want)
	}
	if n := m.ran()["i interrupt"]; n != 1 {
		t.Errorf("the interrupting copy ran %d times, want once", n)
	}
	if n := counterValue(t, reg, "turnpike_worker_moved_total"); n != 3 {
		t.Errorf("moved_total %v, want 3: every original moved, none rejected or run where it was found", n)
	}
}
