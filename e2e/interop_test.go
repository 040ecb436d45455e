package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/devstack"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// The interop tests run real Kafka clients, not re-implementations of
// their hashes, against the devstack, and check docs/api.md's table of
// producers ("The home partition", "Producers"): where each client's
// default and the documented setting place keyed request records, and
// that the pipeline answers them either way. librdkafka runs as kcat,
// kafkajs as e2e/interop/node/produce.js; the Go clients (sarama, franz-go,
// kafka-go) are tested in examples/producers, a module of their own.

// interopPartitions is the requests topic's partition count in these
// tests: Turnpike's default, so that a client placing by another hash
// misses the home partition for most keys (11 in 12).
const interopPartitions = 12

// keyedRequest is one request record as a direct producer writes it: the
// documented key (the identity triple) and value (the request record).
type keyedRequest struct {
	id        events.Identity
	requestID string
	content   string
	value     []byte
}

func (r keyedRequest) key() string { return r.id.Key() }

// realProducer is a real client with one partitioner setting.
type realProducer struct {
	name string
	// home is docs/api.md's claim about the setting: it places every
	// keyed record in its key's home partition. Otherwise, the claim is
	// that it places most of them elsewhere.
	home bool
	// placement, when set, is the partition the documented algorithm of
	// an "elsewhere" setting gives a key (CRC32 for librdkafka's
	// consistent_random): every record must land there.
	placement func(key []byte, partitions int) int
	// need skips (fails, in CI) when the client is not installed.
	need    func(t *testing.T)
	produce func(t *testing.T, ctx context.Context, brokers []string, topic string, recs []keyedRequest)
}

// inCI reports whether the tests run in CI (CI=true): there, a missing
// client fails its test instead of skipping it.
func inCI() bool {
	ci, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && ci
}

// missing skips t, or fails it in CI, because what is not installed.
func missing(t *testing.T, what string) {
	t.Helper()
	if inCI() {
		t.Fatalf("CI=true and %s: in CI a missing client fails the interop test", what)
	}
	msg := "!!! SKIPPING an interop test: " + what
	t.Log(msg)
	fmt.Fprintln(os.Stderr, msg)
	t.Skip(msg)
}

func needKcat(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("kcat"); err != nil {
		missing(t, "no kcat on PATH (install Debian's kcat package, e.g. with .ci/interop)")
	}
}

// nodeDir holds the Node.js clients: the kafkajs producer and the push
// gateway client (node_client_test.go).
const nodeDir = "interop/node"

// needNode skips (fails, in CI) unless node runs and the npm package pkg
// is installed in nodeDir.
func needNode(t *testing.T, pkg string) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		missing(t, "no node on PATH (install Debian's nodejs and npm packages, e.g. with .ci/interop)")
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", pkg, "package.json")); err != nil {
		missing(t, pkg+" is not installed in e2e/"+nodeDir+" (run npm ci there, e.g. with .ci/interop)")
	}
}

func needKafkajs(t *testing.T) { t.Helper(); needNode(t, "kafkajs") }

// kcatProduce writes recs with kcat -P, in one run, with the librdkafka
// settings given (-X name=value each), acks=all and one request in flight,
// so that a retried batch cannot overtake the next one (the test checks
// the order of a conversation's records).
func kcatProduce(settings ...string) func(*testing.T, context.Context, []string, string, []keyedRequest) {
	return func(t *testing.T, ctx context.Context, brokers []string, topic string, recs []keyedRequest) {
		t.Helper()
		var in bytes.Buffer
		for _, r := range recs {
			fmt.Fprintf(&in, "%s\t%s\n", r.key(), r.value)
		}
		args := []string{"-P", "-b", strings.Join(brokers, ","), "-t", topic, "-K", "\t", "-X", "request.required.acks=-1",
			"-X", "max.in.flight.requests.per.connection=1"}
		for _, s := range settings {
			args = append(args, "-X", s)
		}
		cmd := exec.CommandContext(ctx, "kcat", args...)
		cmd.Stdin = &in
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kcat %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// kafkajsProduce writes recs with kafkajs's partitioner (produce.js's
// "default" or "legacy"), one at a time, in order.
func kafkajsProduce(partitioner string) func(*testing.T, context.Context, []string, string, []keyedRequest) {
	return func(t *testing.T, ctx context.Context, brokers []string, topic string, recs []keyedRequest) {
		t.Helper()
		var in bytes.Buffer
		enc := json.NewEncoder(&in)
		for _, r := range recs {
			if err := enc.Encode(map[string]string{"key": r.key(), "value": string(r.value)}); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.CommandContext(ctx, "node", "produce.js", strings.Join(brokers, ","), topic, partitioner)
		cmd.Dir = nodeDir
		cmd.Env = append(os.Environ(), "KAFKAJS_NO_PARTITIONER_WARNING=1")
		cmd.Stdin = &in
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node produce.js %s: %v\n%s", partitioner, err, stderr.Bytes())
		}
		if n := bytes.Count(out, []byte("\n")); n != len(recs) {
			t.Fatalf("produce.js acknowledged %d records, want %d:\n%s%s", n, len(recs), out, stderr.Bytes())
		}
	}
}

// crc32Placement is librdkafka's consistent_random for a keyed record, as
// docs/api.md describes it: CRC32 of the key modulo the partition count.
func crc32Placement(key []byte, partitions int) int {
	return librdkafkaPlacement.Balance(kafka.Message{Key: key}, partitionIDs(partitions)...)
}

// requestRecord is a record of the requests topic: a producer's original,
// or the worker's copy of a misplaced one (with turnpike-source-* headers).
type requestRecord struct {
	partition int
	offset    int64
	key       string
	requestID string
	copy      bool
}

// readRequests reads every partition of the requests topic from its start
// to its end as of the call.
func readRequests(t *testing.T, ctx context.Context, broker, requests string, partitions int) []requestRecord {
	t.Helper()
	var out []requestRecord
	for p := range partitions {
		msgs, err := readPartition(ctx, broker, requests, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			req, err := events.DecodeRequest(m.Value, 0)
			if err != nil {
				t.Fatalf("%s/%d/%d is not a request record: %v: %s", requests, p, m.Offset, err, m.Value)
			}
			rec := requestRecord{partition: p, offset: m.Offset, key: string(m.Key), requestID: req.RequestID}
			for _, h := range m.Headers {
				if strings.HasPrefix(h.Key, "turnpike-source-") {
					rec.copy = true
				}
			}
			out = append(out, rec)
		}
	}
	return out
}

// movedTotal is the worker's count of misplaced records it moved home. A
// scrape that fails (each is given 2 s, which a loaded machine can take)
// is tried again until ctx ends.
func movedTotal(t *testing.T, ctx context.Context, s *stack) float64 {
	t.Helper()
	var moved float64
	poll(t, ctx, "a scrape of the worker's metrics", func() (bool, string) {
		m, err := scrape(ctx, s.IngestAddr)
		if err != nil {
			return false, err.Error()
		}
		moved = m.sum("turnpike_worker_moved_total")
		return true, ""
	})
	return moved
}

// interopConversations and interopTurns size each client's load: a few
// conversations, so that the placement of several keys shows, of a few
// requests each, so that their order shows.
const interopConversations, interopTurns = 8, 3

// checkRealProducer produces interopTurns requests to each of
// interopConversations fresh conversations with p and checks docs/api.md's
// claim about its placement, and the pipeline's answers: every request
// answered once, in the order produced, with moves counted for the
// records placed elsewhere and none for a "home" setting. It returns the
// requests. The stack's other producers must be idle (the move count is
// the stack's).
func checkRealProducer(t *testing.T, ctx context.Context, s *stack, requests string, p realProducer) []keyedRequest {
	t.Helper()
	c := s.client(t, "interop", p.name)
	var convs []events.Identity
	watchers := map[events.Identity]*watcher{}
	for i := range interopConversations {
		id := events.Identity{Tenant: "interop", User: p.name, Conversation: fmt.Sprintf("c%d", i)}
		convs = append(convs, id)
		watchers[id] = watch(t, ctx, c, id.Conversation, "")
	}
	// Turns interleave conversations, as independent producers' records do.
	var recs []keyedRequest
	for j := range interopTurns {
		for _, id := range convs {
			r := keyedRequest{id: id, requestID: fmt.Sprintf("r-%s-%s-%d", p.name, id.Conversation, j), content: fmt.Sprintf("turn %d of %s", j+1, id.Conversation)}
			v, err := events.EncodeRequest(events.Request{V: events.Version, RequestID: r.requestID, Tenant: id.Tenant, User: id.User,
				Conversation: id.Conversation, Content: r.content, Strategy: events.StrategyEnqueue})
			if err != nil {
				t.Fatal(err)
			}
			r.value = v
			recs = append(recs, r)
		}
	}
	before := movedTotal(t, ctx, s)
	p.produce(t, ctx, s.Brokers, requests, recs)

	// Every request answered once, in the order produced.
	for _, id := range convs {
		w := watchers[id]
		started, status := w.completions(ctx, interopTurns)
		oneAtATime(t, w.seen)
		h := historyOf(t, ctx, c, id.Conversation)
		if len(h) != 2*interopTurns {
			t.Fatalf("%s: history has %d messages, want %d", id, len(h), 2*interopTurns)
		}
		j := 0
		for _, r := range recs {
			if r.id != id {
				continue
			}
			if started[r.requestID] != 1 || status[r.requestID] != events.StatusComplete {
				t.Fatalf("%s: request %s started %d times and completed %q, want once and complete", id, r.requestID, started[r.requestID], status[r.requestID])
			}
			user, answer := h[2*j], h[2*j+1]
			if want := fmt.Sprintf("echo #%d: %s", j+1, r.content); user.RequestID != r.requestID || answer.RequestID != r.requestID || answer.Content != want {
				t.Fatalf("%s: turn %d is request %s answered %q, want request %s answered %q", id, j+1, user.RequestID, answer.Content, r.requestID, want)
			}
			j++
		}
	}

	// Where the client put each record, against docs/api.md's claim.
	mine := map[string]bool{}
	for _, id := range convs {
		mine[id.Key()] = true
	}
	var originals, copies []requestRecord
	for _, r := range readRequests(t, ctx, s.Brokers[0], requests, interopPartitions) {
		switch {
		case !mine[r.key]:
		case r.copy:
			copies = append(copies, r)
		default:
			originals = append(originals, r)
		}
	}
	if len(originals) != len(recs) {
		t.Fatalf("the requests topic holds %d records %s produced, want %d", len(originals), p.name, len(recs))
	}
	var elsewhere []string
	for _, r := range originals {
		home := topic.Home([]byte(r.key), interopPartitions)
		if r.partition != home {
			elsewhere = append(elsewhere, fmt.Sprintf("%s in %d (home %d)", r.requestID, r.partition, home))
		}
		if p.placement != nil {
			if want := p.placement([]byte(r.key), interopPartitions); r.partition != want {
				t.Errorf("%s landed in partition %d, but the documented algorithm places its key in %d", r.requestID, r.partition, want)
			}
		}
	}
	if p.home && len(elsewhere) > 0 {
		t.Errorf("docs/api.md says %s places keyed records in their home partition, but %d of %d landed elsewhere: %v", p.name, len(elsewhere), len(recs), elsewhere)
	}
	if !p.home && 2*len(elsewhere) <= len(recs) {
		t.Errorf("docs/api.md says %s places most keyed records outside their home partition, but only %d of %d landed elsewhere: %v", p.name, len(elsewhere), len(recs), elsewhere)
	}

	// The worker moved exactly the records placed elsewhere, each once.
	// A record runs only once it is home, so every copy was written
	// before the answers above; the metric is counted just after a copy
	// is written, so once the copies are all there, wait for it to catch
	// up.
	if len(copies) != len(elsewhere) {
		t.Fatalf("%s: the requests topic holds %d copies of its records, want %d (those placed elsewhere)", p.name, len(copies), len(elsewhere))
	}
	want := float64(len(elsewhere))
	var moved float64
	poll(t, ctx, "the move count", func() (bool, string) {
		moved = movedTotal(t, ctx, s) - before
		return moved >= want, fmt.Sprintf("%v moves, want %v", moved, want)
	})
	if moved != want {
		t.Errorf("%s: the worker moved %v records, want %v (those placed elsewhere)", p.name, moved, want)
	}
	t.Logf("%s: %d of %d records landed outside their home partition; the worker moved %v", p.name, len(elsewhere), len(recs), moved)
	for _, c := range copies {
		if home := topic.Home([]byte(c.key), interopPartitions); c.partition != home {
			t.Errorf("the copy of %s is in partition %d, not its home %d", c.requestID, c.partition, home)
		}
	}
	// And each conversation's requests reached its home partition in the
	// order produced, whether placed there or moved there.
	for _, id := range convs {
		home := topic.Home([]byte(id.Key()), interopPartitions)
		var order, sent []string
		for _, r := range slices.Concat(originals, copies) {
			if r.key == id.Key() && r.partition == home {
				order = append(order, fmt.Sprintf("%020d %s", r.offset, r.requestID))
			}
		}
		slices.Sort(order)
		for i := range order {
			order[i] = order[i][21:]
		}
		for _, r := range recs {
			if r.id == id {
				sent = append(sent, r.requestID)
			}
		}
		if !slices.Equal(order, sent) {
			t.Errorf("%s: the home partition %d holds %v, want %v", id, home, order, sent)
		}
	}
	return recs
}

// kcatStreamRecord is one line of kcat -C -J.
type kcatStreamRecord struct {
	Topic     string  `json:"topic"`
	Partition int     `json:"partition"`
	Offset    int64   `json:"offset"`
	Key       *string `json:"key"`
	Payload   *string `json:"payload"`
}

func TestInteropRealClientsPlaceRequestRecordsAsDocumented(t *testing.T) {
	var names topic.Names
	s := startStack(t, "", func(c *devstack.Config) {
		c.Worker.Partitions = interopPartitions
		names = topic.NewNames(c.Worker.TopicPrefix)
	})
	producers := []realProducer{
		{name: "kcat-default", placement: crc32Placement, need: needKcat, produce: kcatProduce()},
		{name: "kcat-murmur2_random", home: true, need: needKcat, produce: kcatProduce("partitioner=murmur2_random")},
		{name: "kcat-murmur2", home: true, need: needKcat, produce: kcatProduce("partitioner=murmur2")},
		{name: "kafkajs-default", home: true, need: needKafkajs, produce: kafkajsProduce("default")},
		{name: "kafkajs-legacy", need: needKafkajs, produce: kafkajsProduce("legacy")},
	}
	var produced []keyedRequest
	// One at a time: each counts the stack's moves.
	for _, p := range producers {
		t.Run(p.name, func(t *testing.T) {
			p.need(t)
			ctx := testenv.Context(t, 60*time.Second)
			produced = append(produced, checkRealProducer(t, ctx, s, names.Requests, p)...)
		})
	}

	t.Run("kcat reads the stream topic's records as the documented events under the documented key", func(t *testing.T) {
		needKcat(t)
		if len(produced) == 0 {
			t.Skip("no client produced requests")
		}
		ctx := testenv.Context(t, 60*time.Second)
		// -e: up to the end of every partition as of the start. Every
		// request above completed, so its events are all there.
		cmd := exec.CommandContext(ctx, "kcat", "-C", "-b", s.Brokers[0], "-t", names.Stream, "-o", "beginning", "-e", "-q", "-J")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kcat -C: %v\n%s", err, stderr.Bytes())
		}
		keys := map[string]string{} // conversation key by request id
		for _, r := range produced {
			keys[r.requestID] = r.key()
		}
		completed := map[string]int{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(nil, 4<<20)
		n := 0
		for sc.Scan() {
			var rec kcatStreamRecord
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				t.Fatalf("kcat -J line %q: %v", sc.Text(), err)
			}
			if rec.Key == nil || rec.Payload == nil {
				t.Fatalf("stream record without key or value: %s", sc.Text())
			}
			e, err := events.DecodeEvent([]byte(*rec.Payload))
			if err != nil {
				t.Fatalf("stream record %s/%d/%d is not a documented event: %v: %s", rec.Topic, rec.Partition, rec.Offset, err, *rec.Payload)
			}
			var members map[string]json.RawMessage
			if err := json.Unmarshal([]byte(*rec.Payload), &members); err != nil {
				t.Fatal(err)
			}
			if _, ok := members["cursor"]; ok {
				t.Fatalf("stream record %s/%d/%d carries a cursor: %s", rec.Topic, rec.Partition, rec.Offset, *rec.Payload)
			}
			h := e.Header()
			key, ok := keys[h.RequestID]
			if !ok {
				continue
			}
			n++
			if want := key; *rec.Key != want || !strings.HasSuffix(want, "/"+h.Conversation) {
				t.Fatalf("event of request %s (conversation %s) has key %q, want %q", h.RequestID, h.Conversation, *rec.Key, want)
			}
			if home := topic.Home([]byte(*rec.Key), interopPartitions); rec.Partition != home {
				t.Fatalf("event of %s in stream partition %d, want its key's home %d", *rec.Key, rec.Partition, home)
			}
			if e.Type() == events.TypeRunCompleted {
				completed[h.RequestID]++
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		for _, r := range produced {
			if completed[r.requestID] != 1 {
				t.Errorf("request %s has %d run.completed in the stream topic, want 1", r.requestID, completed[r.requestID])
			}
		}
		t.Logf("kcat read %d events of %d requests", n, len(produced))
	})
}
