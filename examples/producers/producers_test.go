package main

import (
	"bufio"
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/turnpiketest"
)

// The murmur2 values of Kafka's own test of its Java client
// (org.apache.kafka.common.utils.UtilsTest.testMurmur2).
func TestMurmur2IsKafkas(t *testing.T) {
	t.Parallel()
	java := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for key, want := range java {
		if got := int32(murmur2([]byte(key))); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", key, got, want)
		}
		h := newMurmur2()
		h.Write([]byte(key[:len(key)/2])) // sarama writes the key once; in parts works too
		h.Write([]byte(key[len(key)/2:]))
		if got := int32(h.Sum32()); got != want {
			t.Errorf("newMurmur2 of %q sums %d, want %d", key, got, want)
		}
		h.Reset()
		h.Write([]byte(key))
		if got := int32(h.Sum32()); got != want {
			t.Errorf("newMurmur2 of %q after Reset sums %d, want %d", key, got, want)
		}
		for _, n := range []int{1, 3, 12, 100} {
			if got, want := homePartition([]byte(key), n), int(uint32(want)&0x7fffffff)%n; got != want {
				t.Errorf("homePartition(%q, %d) = %d, want %d", key, got, n, want)
			}
		}
	}
}

// The sarama partitioners of the home partition place every key where
// homePartition does, for many more keys than the pipeline test sends:
// the custom partitioner's WithAbsFirst matters only for keys whose hash
// is negative, and then not for all of them.
func TestSaramaMurmur2PartitionersPlaceOnTheHome(t *testing.T) {
	t.Parallel()
	for name, pc := range map[string]sarama.PartitionerConstructor{
		"saramaConfig":        saramaConfig().Producer.Partitioner,
		"saramaCustomMurmur2": saramaCustomMurmur2,
	} {
		p := pc("turnpike.requests")
		for i := range 2000 {
			key := []byte(fmt.Sprintf("default/dev/c%d", i))
			for _, n := range []int{3, 12, 24} {
				got, err := p.Partition(&sarama.ProducerMessage{Key: sarama.ByteEncoder(key)}, int32(n))
				if err != nil {
					t.Fatal(err)
				}
				if want := homePartition(key, n); int(got) != want {
					t.Fatalf("%s places %q in partition %d of %d, want its home %d", name, key, got, n, want)
				}
			}
		}
	}
}

// partitions is the requests topic's partition count in the test:
// Turnpike's default, so that a client placing by another hash misses
// the home partition for most keys (11 in 12).
const partitions = 12

// conversations and turns size each client's load: the placement of
// several keys, the order of several requests each.
const conversations, turns = 8, 3

// setting is one client with one partitioner setting.
type setting struct {
	name string
	// home is docs/api.md's claim: every keyed record lands in its home
	// partition. Otherwise most land elsewhere, and the worker moves them.
	home bool
	// placement, when set, is where the documented algorithm of an
	// "elsewhere" setting puts a key: every record must land there.
	placement func(key []byte, n int) int
	// scattered: the setting spreads one key's records over partitions
	// (it ignores the key), so they reach home in the order of their
	// moves, not the order produced.
	scattered bool
	open      func(brokers []string, topic string) (producer, error)
}

// fnv1a32 is FNV-1a 32 of key.
func fnv1a32(key []byte) uint32 {
	h := fnv.New32a()
	h.Write(key)
	return h.Sum32()
}

func saramaWith(pc sarama.PartitionerConstructor) func([]string, string) (producer, error) {
	return func(brokers []string, topic string) (producer, error) {
		c := saramaConfig()
		c.Producer.Partitioner = pc
		return newSaramaProducer(brokers, topic, c)
	}
}

func franzWith(opts ...kgo.Opt) func([]string, string) (producer, error) {
	return func(brokers []string, topic string) (producer, error) {
		return newFranzProducer(brokers, topic, opts...)
	}
}

func kafkaGoWith(b kafka.Balancer) func([]string, string) (producer, error) {
	return func(brokers []string, topic string) (producer, error) {
		return newKafkaGoProducer(brokers, topic, b), nil
	}
}

var settings = []setting{
	// sarama's default: FNV-1a as an int32, modulo the count, negated when
	// negative.
	{name: "sarama-NewHashPartitioner", open: saramaWith(sarama.NewHashPartitioner), placement: func(k []byte, n int) int {
		p := int32(fnv1a32(k)) % int32(n)
		if p < 0 {
			p = -p
		}
		return int(p)
	}},
	{name: "sarama-NewReferenceHashPartitioner", open: saramaWith(sarama.NewReferenceHashPartitioner), placement: func(k []byte, n int) int {
		return int(fnv1a32(k)&0x7fffffff) % n
	}},
	// The command's own -client choices (main.go): NewMurmur2Partitioner,
	// the custom murmur2 hash, the manual partitioner, franz-go's default
	// and kafka-go's Murmur2Balancer.
	{name: "sarama-NewMurmur2Partitioner", home: true, open: clients["sarama"]},
	{name: "sarama-custom-murmur2", home: true, open: clients["sarama-custom"]},
	{name: "sarama-manual-home", home: true, open: clients["sarama-manual"]},
	{name: "franz-go-default", home: true, open: clients["franz-go"]},
	{name: "franz-go-StickyKeyPartitioner", home: true, open: franzWith(kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))},
	{name: "kafka-go-default", scattered: true, open: kafkaGoWith(nil)},
	{name: "kafka-go-Murmur2Balancer", home: true, open: clients["kafka-go"]},
	{name: "kafka-go-Hash", open: kafkaGoWith(&kafka.Hash{})},
	{name: "kafka-go-ReferenceHash", open: kafkaGoWith(&kafka.ReferenceHash{})},
	{name: "kafka-go-CRC32Balancer", open: kafkaGoWith(&kafka.CRC32Balancer{})},
}

// TestProducersPlaceRequestsAsDocumented produces requests with each
// setting of docs/api.md's table of producers to the whole pipeline and
// checks the claim: where the records landed, and that the worker moved
// exactly those placed elsewhere while every request was answered once,
// in order.
func TestProducersPlaceRequestsAsDocumented(t *testing.T) {
	cfg := turnpiketest.Config()
	cfg.Partitions = partitions
	stack := turnpiketest.StartConfig(t, cfg)
	// One at a time: each counts the stack's moves.
	for _, s := range settings {
		t.Run(s.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			checkSetting(t, ctx, stack, s)
		})
	}
}

// sent is one request a test produced.
type sent struct {
	id        events.Identity
	requestID string
	content   string
}

func checkSetting(t *testing.T, ctx context.Context, stack *turnpiketest.Stack, s setting) {
	c := stack.Client(s.name)
	var convs []events.Identity
	followers := map[events.Identity]*turnpiketest.Follower{}
	for i := range conversations {
		id := events.Identity{Tenant: stack.Tenant, User: s.name, Conversation: fmt.Sprintf("c%d", i)}
		convs = append(convs, id)
		followers[id] = c.Follow(id.Conversation)
	}
	p, err := s.open(stack.Brokers, stack.RequestsTopic)
	if err != nil {
		t.Fatal(err)
	}
	before := moved(t, ctx, stack)
	var reqs []sent
	for j := range turns {
		for _, id := range convs {
			r := sent{id: id, requestID: fmt.Sprintf("r-%s-%s-%d", s.name, id.Conversation, j), content: fmt.Sprintf("turn %d of %s", j+1, id.Conversation)}
			rec, err := newRequest(id, r.requestID, r.content)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Produce(ctx, rec); err != nil {
				t.Fatal(err)
			}
			reqs = append(reqs, r)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	// Every request answered (its last run complete), persisted once.
	for _, r := range reqs {
		if run := followers[r.id].Run(r.requestID); run.Status != events.StatusComplete {
			t.Fatalf("%s: %s", r.id, run)
		}
	}
	started := runsStarted(t, ctx, stack)
	contents := map[string]string{}
	for _, r := range reqs {
		contents[r.requestID] = r.content
	}

	// Where the client put each record.
	mine := map[string]bool{}
	for _, id := range convs {
		mine[id.Key()] = true
	}
	var originals, copies []record
	for _, r := range readTopic(t, ctx, stack.Brokers[0], stack.RequestsTopic) {
		switch {
		case !mine[string(r.Key)]:
		case r.copy:
			copies = append(copies, r)
		default:
			originals = append(originals, r)
		}
	}
	if len(originals) != len(reqs) {
		t.Fatalf("the requests topic holds %d records of %s, want %d", len(originals), s.name, len(reqs))
	}
	var elsewhere []string
	for _, r := range originals {
		home := homePartition(r.Key, partitions)
		if r.Partition != home {
			elsewhere = append(elsewhere, fmt.Sprintf("%s in %d (home %d)", r.requestID, r.Partition, home))
		}
		if s.placement != nil {
			if want := s.placement(r.Key, partitions); r.Partition != want {
				t.Errorf("%s landed in partition %d; the documented algorithm places its key in %d", r.requestID, r.Partition, want)
			}
		}
	}
	if s.home && len(elsewhere) > 0 {
		t.Errorf("docs/api.md says %s places keyed records in their home partition; %d of %d landed elsewhere: %v", s.name, len(elsewhere), len(reqs), elsewhere)
	}
	if !s.home && 2*len(elsewhere) <= len(reqs) {
		t.Errorf("docs/api.md says %s places most keyed records elsewhere; only %d of %d did: %v", s.name, len(elsewhere), len(reqs), elsewhere)
	}

	// The worker moved exactly the records placed elsewhere. A record runs
	// only at home, so every copy was written before the answers above;
	// the count is updated just after a copy is written: once the copies
	// are all there, wait for it to catch up.
	if len(copies) != len(elsewhere) {
		t.Fatalf("%s: the requests topic holds %d copies of its records, want %d (those placed elsewhere)", s.name, len(copies), len(elsewhere))
	}
	want := float64(len(elsewhere))
	n := moved(t, ctx, stack) - before
	for n < want && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		n = moved(t, ctx, stack) - before
	}
	if n != want {
		t.Errorf("%s: the worker moved %v records, want %v (those placed elsewhere)", s.name, n, want)
	}
	t.Logf("%s: %d of %d records landed outside their home partition; the worker moved %v", s.name, len(elsewhere), len(reqs), n)

	// Each conversation ran once per request, in its home partition's
	// order, which is the order produced unless the setting scattered the
	// conversation's records.
	for _, id := range convs {
		home := homePartition([]byte(id.Key()), partitions)
		var at []record
		for _, r := range slices.Concat(originals, copies) {
			if string(r.Key) == id.Key() && r.Partition == home {
				at = append(at, r)
			}
		}
		slices.SortFunc(at, func(a, b record) int { return int(a.Offset - b.Offset) })
		var order, produced []string
		for _, r := range at {
			order = append(order, r.requestID)
		}
		for _, r := range reqs {
			if r.id == id {
				produced = append(produced, r.requestID)
			}
		}
		if !s.scattered && !slices.Equal(order, produced) {
			t.Errorf("%s: the home partition %d holds %v, want the order produced %v", id, home, order, produced)
		}
		if !slices.Equal(slices.Sorted(slices.Values(order)), slices.Sorted(slices.Values(produced))) {
			t.Errorf("%s: the home partition %d holds %v, want each of %v once", id, home, order, produced)
		}
		h := c.History(id.Conversation)
		if len(h) != 2*len(order) {
			t.Fatalf("%s: history has %d messages, want %d", id, len(h), 2*len(order))
		}
		for j, rid := range order {
			user, answer := h[2*j], h[2*j+1]
			want := fmt.Sprintf("echo #%d: %s", j+1, contents[rid])
			if user.RequestID != rid || answer.RequestID != rid || answer.Content != want {
				t.Errorf("%s: turn %d is request %s answered %q, want %s answered %q", id, j+1, user.RequestID, answer.Content, rid, want)
			}
			if started[rid] != 1 {
				t.Errorf("%s: request %s started %d runs, want 1", id, rid, started[rid])
			}
		}
	}
}

// record is a record of a topic; for the requests topic, its request id
// and whether it is the worker's copy of a misplaced record (it carries
// turnpike-source-* headers).
type record struct {
	kafka.Message
	requestID string
	copy      bool
}

// readTopic reads every partition of topic from its start to its end as
// of the call.
func readTopic(t *testing.T, ctx context.Context, broker, topic string) []record {
	t.Helper()
	conn, err := kafka.DialContext(ctx, "tcp", broker)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	var out []record
	for _, p := range parts {
		lc, err := kafka.DialLeader(ctx, "tcp", broker, topic, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		first, last, err := lc.ReadOffsets()
		lc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if first >= last {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{broker}, Topic: topic, Partition: p.ID, MaxWait: 50 * time.Millisecond})
		if err := r.SetOffset(first); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := r.ReadMessage(ctx) // without a group, a reader commits nothing
			if err != nil {
				r.Close()
				t.Fatalf("read %s/%d: %v", topic, p.ID, err)
			}
			rec := record{Message: m}
			for _, h := range m.Headers {
				rec.copy = rec.copy || strings.HasPrefix(h.Key, "turnpike-source-")
			}
			if req, err := events.DecodeRequest(m.Value, 0); err == nil {
				rec.requestID = req.RequestID
			}
			out = append(out, rec)
			if m.Offset >= last-1 {
				break
			}
		}
		r.Close()
	}
	return out
}

// runsStarted counts the runs each request started, in the stream topic.
func runsStarted(t *testing.T, ctx context.Context, stack *turnpiketest.Stack) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, r := range readTopic(t, ctx, stack.Brokers[0], stack.StreamTopic) {
		e, err := events.DecodeEvent(r.Value)
		if err != nil {
			t.Fatalf("stream record %s/%d/%d: %v", r.Topic, r.Partition, r.Offset, err)
		}
		if e.Type() == events.TypeRunStarted {
			n[e.Header().RequestID]++
		}
	}
	return n
}

// moved is the worker's count of misplaced records it moved home, from
// the stack's /metrics.
func moved(t *testing.T, ctx context.Context, stack *turnpiketest.Stack) float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, stack.IngestURL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "turnpike_worker_moved_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatal("no turnpike_worker_moved_total in /metrics")
	return 0
}
