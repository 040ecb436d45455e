package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/testenv/stacktest"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/ingest"
	"github.com/turnpike-dev/turnpike/pkg/pushgw"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// TestMain lets the test binary stand in for cmd/worker, cmd/ingest and
// cmd/pushgw (and for a worker with a Go agent of its own: durable_test.go),
// so fault tests can run them as processes and kill them.
func TestMain(m *testing.M) {
	if role := os.Getenv("TURNPIKE_TEST_RUN_SERVICE"); role != "" {
		os.Exit(runServiceProcess(role))
	}
	os.Exit(m.Run())
}

// runServiceProcess runs one service as cmd/<role> does, configured from
// the environment, on the listener its parent passed, until SIGTERM.
func runServiceProcess(role string) int {
	ln, err := inheritedListener()
	if err != nil {
		fmt.Fprintln(os.Stderr, role+":", err)
		return 2
	}
	var run func(ctx context.Context) error
	switch role {
	case "ingest":
		c, err := ingest.LoadConfig(nil, os.LookupEnv)
		if err != nil {
			fmt.Fprintln(os.Stderr, role+":", err)
			return 2
		}
		s, err := ingest.New(c, ingest.WithListener(ln))
		if err != nil {
			fmt.Fprintln(os.Stderr, role+":", err)
			return 1
		}
		run = s.Run
	case "worker":
		return runWorkerProcess(ln)
	case "gated-worker":
		return runWorkerProcess(ln, stacktest.RemoteAgent)
	case "durable-worker":
		return runDurableWorkerProcess(ln)
	case "state-worker":
		return runStateWorkerProcess(ln)
	case "pushgw":
		c, err := pushgw.LoadConfig(nil, os.LookupEnv)
		if err != nil {
			fmt.Fprintln(os.Stderr, role+":", err)
			return 2
		}
		s, err := pushgw.New(c, pushgw.WithListener(ln))
		if err != nil {
			fmt.Fprintln(os.Stderr, role+":", err)
			return 1
		}
		run = s.Run
	default:
		fmt.Fprintln(os.Stderr, "unknown role", role)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, role+" stopped:", err)
		return 1
	}
	return 0
}

// envGates names the address of the test's gates (stacktest.Gates.Serve)
// to a gated worker process.
const envGates = "TURNPIKE_TEST_GATES"

// runWorkerProcess runs the worker as cmd/worker does (pkg/worker's
// Main), configured from the environment, with its ops endpoints on ln.
// With gated, its agent is the one gated returns (stacktest.RemoteAgent),
// its pauses held by the gates of the test's process at envGates.
func runWorkerProcess(ln net.Listener, gated ...func(worker.Config, string) worker.Option) int {
	c, err := worker.LoadConfig(nil, os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	opts := []worker.Option{worker.WithListener(ln)}
	for _, agent := range gated {
		opts = append(opts, agent(c, os.Getenv(envGates)))
	}
	w, err := worker.New(c, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker stopped:", err)
		return 1
	}
	return 0
}

// faultPartitions is the partition count of the fault stack's topics.
const faultPartitions = 4

// faultStack is a broker and a store in this process (the store behind a
// proxy, so that it can restart on a new port while clients keep one
// address), and worker processes, all on one set of topics.
type faultStack struct {
	t        *testing.T
	kafka    *embedded.Kafka
	mongo    *embedded.Mongo
	mongoDir string
	proxy    *tcpProxy
	prefix   string
	db       string
	group    string
	env      []string

	gated     *stacktest.Gates // gates(): nil until a test asks
	gatesAddr string           // where gated serves

	mu      sync.Mutex // guards workers
	workers map[int]*workerProc
}

// workerProc is a worker process and the address of its /metrics.
type workerProc struct {
	cmd *exec.Cmd
	ops string
}

func newFaultStack(t *testing.T) *faultStack {
	t.Helper()
	return newFaultStackStream(t, faultPartitions)
}

// newFaultStackStream is newFaultStack with a stream topic of stream
// partitions (TURNPIKE_STREAM_PARTITIONS), the others of faultPartitions.
func newFaultStackStream(t *testing.T, stream int) *faultStack {
	t.Helper()
	f := &faultStack{t: t, workers: map[int]*workerProc{}, mongoDir: t.TempDir(), prefix: testenv.Name(t, "f") + ".", db: "faults",
		group: testenv.Name(t, "g")}
	f.kafka = testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	f.startMongo()
	f.proxy = newTCPProxy(t, hostOf(t, f.mongo.URI()), 0)
	f.env = []string{
		"TURNPIKE_KAFKA_BROKERS=" + f.kafka.Addr(),
		"TURNPIKE_MONGO_URI=" + f.mongoURI(),
		"TURNPIKE_MONGO_DB=" + f.db,
		"TURNPIKE_TOPIC_PREFIX=" + f.prefix,
		"TURNPIKE_MODEL=echo", "TURNPIKE_ECHO_DELAY=0",
		"TURNPIKE_LOG_LEVEL=error",
		"TURNPIKE_PARTITIONS=" + strconv.Itoa(faultPartitions), "TURNPIKE_STREAM_PARTITIONS=" + strconv.Itoa(stream), "TURNPIKE_WORKER_GROUP=" + f.group,
		"TURNPIKE_SESSION_TIMEOUT=6s", "TURNPIKE_DRAIN_TIMEOUT=2s",
	}
	names := topic.NewNames(f.prefix)
	if err := topic.Ensure(testenv.Context(t, 10*time.Second), []string{f.kafka.Addr()}, faultPartitions, names.Requests, names.DLQ, names.Control); err != nil {
		t.Fatal(err)
	}
	if err := topic.Ensure(testenv.Context(t, 10*time.Second), []string{f.kafka.Addr()}, stream, names.Stream); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.killAll)
	return f
}

// hostOf is the host:port of a mongodb:// URI.
func hostOf(t *testing.T, uri string) string {
	t.Helper()
	u, err := url.Parse(uri)
	if err != nil || u.Host == "" {
		t.Fatalf("store URI %q: %v", uri, err)
	}
	return u.Host
}

// mongoURI is the store through the proxy; an operation gives up on an
// unreachable store after 2s (the driver's default is 30s).
func (f *faultStack) mongoURI() string {
	return "mongodb://" + f.proxy.addr() + "/?serverSelectionTimeoutMS=2000"
}

// startMongo starts the store on a new random port (on the same files)
// and points the proxy at it. Each one is stopped at cleanup, if not
// before.
func (f *faultStack) startMongo() {
	f.t.Helper()
	f.mongo = testenv.EmbeddedMongo(f.t, f.mongoDir)
	if f.proxy != nil {
		f.proxy.retarget(hostOf(f.t, f.mongo.URI()))
	}
}

// stopMongo makes the store unreachable at once (every connection
// broken, new ones refused), then stops it.
func (f *faultStack) stopMongo() {
	f.proxy.cut()
	f.mongo.Close()
}

func (f *faultStack) store() history.Store {
	f.t.Helper()
	s, err := history.NewMongoStore(testenv.Context(f.t, 10*time.Second), testenv.MongoClient(f.t, f.mongoURI()).Database(f.db), history.MongoConfig{})
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// spawn starts worker process i (replacing a dead one), serving its
// metrics on a loopback port of its own.
func (f *faultStack) spawn(i int) {
	f.t.Helper()
	f.spawnAs(i, "worker")
}

// gates serves gates (stacktest.Gates) in this process for the gated
// workers of spawnGated, until the test ends.
func (f *faultStack) gates() *stacktest.Gates {
	f.t.Helper()
	if f.gated != nil {
		return f.gated
	}
	g, ln := stacktest.NewGates(), loopback(f.t)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	f.t.Cleanup(func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			f.t.Errorf("gates: %v", err)
		}
	})
	f.gated, f.gatesAddr = g, ln.Addr().String()
	return g
}

// spawnGated starts worker process i (replacing a dead one) with its echo
// model's pauses held by f.gates(): an answer that pauses ([[delay:D]])
// runs on only as far as the test lets it.
func (f *faultStack) spawnGated(i int) {
	f.t.Helper()
	f.gates()
	f.spawnAs(i, "gated-worker", envGates+"="+f.gatesAddr)
}

// spawnAs starts worker process i as role (a role of TestMain's that runs
// a worker), with env added to the stack's.
func (f *faultStack) spawnAs(i int, role string, env ...string) {
	f.t.Helper()
	ln := loopback(f.t)
	defer ln.Close() // the child holds its own descriptor
	cmd, err := startProcess(role, append(slices.Clip(f.env), env...), ln)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	f.workers[i] = &workerProc{cmd: cmd, ops: ln.Addr().String()}
	f.mu.Unlock()
}

// kill sends SIGKILL to worker i and reaps it.
func (f *faultStack) kill(i int) {
	f.mu.Lock()
	w := f.workers[i]
	delete(f.workers, i)
	f.mu.Unlock()
	if w != nil {
		if err := w.cmd.Process.Kill(); err != nil {
			f.t.Errorf("kill worker %d: %v", i, err)
		}
		_ = w.cmd.Wait() // "signal: killed"
	}
}

func (f *faultStack) killAll() {
	f.mu.Lock()
	ids := make([]int, 0, len(f.workers))
	for i := range f.workers {
		ids = append(ids, i)
	}
	f.mu.Unlock()
	for _, i := range ids {
		f.kill(i)
	}
}

// live returns the live workers by index.
func (f *faultStack) live() map[int]*workerProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[int]*workerProc, len(f.workers))
	for i, w := range f.workers {
		out[i] = w
	}
	return out
}

// poll calls cond every 10ms until it returns true; it fails the test
// when ctx ends first, reporting what the last call said.
func poll(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	for n := 1; ; n++ {
		done, state := cond()
		if done {
			return
		}
		if n%1000 == 0 {
			t.Logf("still waiting for %s: %s", what, state)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s: %s", what, state)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitConsuming waits until n workers are alive and the group's
// partitions are all consumed, each worker consuming at least one.
func (f *faultStack) waitConsuming(ctx context.Context, n int) {
	f.t.Helper()
	poll(f.t, ctx, fmt.Sprintf("%d workers consuming", n), func() (bool, string) {
		live := f.live()
		if len(live) != n {
			return false, fmt.Sprintf("%d workers alive", len(live))
		}
		total, each := 0, map[int]int{}
		for i, w := range live {
			m, err := scrape(ctx, w.ops)
			if err != nil {
				return false, fmt.Sprintf("worker %d: %v", i, err)
			}
			each[i] = len(m[metricLag])
			total += each[i]
			if each[i] == 0 {
				return false, fmt.Sprintf("partitions consumed by worker: %v", each)
			}
		}
		return total == faultPartitions, fmt.Sprintf("partitions consumed by worker: %v", each)
	})
}

// waitRunning waits until a live worker has a run in flight and returns
// its index.
func (f *faultStack) waitRunning(ctx context.Context) int {
	f.t.Helper()
	victim := -1
	poll(f.t, ctx, "a worker with a run in flight", func() (bool, string) {
		for i, w := range f.live() {
			if m, err := scrape(ctx, w.ops); err == nil && m.sum(metricRunning) > 0 {
				victim = i
				return true, ""
			}
		}
		return false, "no run in flight"
	})
	return victim
}

// workerSum adds up a metric over the live workers.
func (f *faultStack) workerSum(ctx context.Context, name string) (float64, error) {
	var s float64
	for i, w := range f.live() {
		m, err := scrape(ctx, w.ops)
		if err != nil {
			return 0, fmt.Errorf("metrics of worker %d: %w", i, err)
		}
		s += m.sum(name)
	}
	return s, nil
}

// load is C conversations × M messages, each reply 5 filler words.
type load struct {
	convs, msgs int
	user        string
	// extra is appended to every message (e.g. a [[delay:…]] directive).
	extra string
}

func (l load) id(i int) events.Identity {
	return events.Identity{Tenant: "acme", User: l.user, Conversation: fmt.Sprintf("c%d", i)}
}

func (l load) content(j int) string { return fmt.Sprintf("m%d [[tokens:5]]%s", j, l.extra) }

// produce writes the load to the requests topic, message by message (all
// conversations' message 1, then message 2, …), pausing between rounds.
func (f *faultStack) produce(ctx context.Context, l load, pause time.Duration) error {
	w := testenv.Producer(f.t, []string{f.kafka.Addr()}, topic.NewNames(f.prefix).Requests)
	w.MaxAttempts, w.WriteBackoffMax = 20, 100*time.Millisecond
	for j := 1; j <= l.msgs; j++ {
		var batch []kafka.Message
		for i := 1; i <= l.convs; i++ {
			batch = append(batch, testenv.Request(l.id(i), fmt.Sprintf("c%d-m%d", i, j), l.content(j)))
		}
		for {
			err := w.WriteMessages(ctx, batch...)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return err
			}
			time.Sleep(50 * time.Millisecond) // a fault-injected broker: try again
		}
		time.Sleep(pause)
	}
	return nil
}

// waitCommitted waits until the worker group has committed every record of
// the requests topic: nothing more will be run or redelivered.
func (f *faultStack) waitCommitted(ctx context.Context) {
	f.t.Helper()
	reqTopic := topic.NewNames(f.prefix).Requests
	c := &kafka.Client{Addr: kafka.TCP(f.kafka.Addr()), Timeout: 5 * time.Second}
	parts := make([]int, faultPartitions)
	last := make([]kafka.OffsetRequest, faultPartitions)
	for p := range faultPartitions {
		parts[p], last[p] = p, kafka.LastOffsetOf(p)
	}
	poll(f.t, ctx, "every request record committed", func() (bool, string) {
		ends, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{reqTopic: last}})
		if err != nil {
			return false, err.Error()
		}
		got, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: f.group, Topics: map[string][]int{reqTopic: parts}})
		if err == nil {
			err = got.Error
		}
		if err != nil {
			return false, err.Error()
		}
		committed := map[int]int64{}
		for _, p := range got.Topics[reqTopic] {
			committed[p.Partition] = p.CommittedOffset
		}
		var behind []string
		for _, p := range ends.Topics[reqTopic] {
			// An empty partition has nothing to commit (-1 against end 0).
			if max(committed[p.Partition], 0) < p.LastOffset {
				behind = append(behind, fmt.Sprintf("%d: %d of %d", p.Partition, committed[p.Partition], p.LastOffset))
			}
		}
		return len(behind) == 0, "partitions behind: " + strings.Join(behind, ", ")
	})
}

// waitDone waits until the load is fully persisted and every record of it
// committed, then checks history and the stream topic.
func (f *faultStack) waitDone(t *testing.T, ctx context.Context, l load) *verdict {
	t.Helper()
	store := f.store()
	poll(t, ctx, "the load persisted", func() (bool, string) {
		v, _, err := check(ctx, store, l)
		if err != nil {
			return false, err.Error()
		}
		return v.lost == 0, v.String()
	})
	f.waitCommitted(ctx)
	v, reqs, err := check(ctx, store, l)
	if err != nil {
		t.Fatalf("history unreadable: %v", err)
	}
	recs, err := readStream(ctx, f.kafka.Addr(), topic.NewNames(f.prefix).Stream)
	if err != nil {
		t.Fatalf("stream unreadable: %v", err)
	}
	checkStream(v, recs, reqs)
	t.Logf("verdict over %d stream events: %s", len(recs), v)
	if !v.ok() {
		t.Fatalf("invariants violated: %s", v)
	}
	return v
}

func TestWorkersKilledWithSIGKILLUnderLoadLoseAndDuplicateNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("kills worker processes")
	}
	ctx := testenv.Context(t, 4*time.Minute)
	f := newFaultStack(t)
	// Runs last about 5×40ms: long enough to be caught in flight.
	l := load{convs: 24, msgs: 5, user: "kill", extra: "[[delay:40ms]]"}
	const workers, kills = 3, 4
	for i := range workers {
		f.spawn(i)
	}
	f.waitConsuming(ctx, workers)
	produced := make(chan error, 1)
	go func() { produced <- f.produce(ctx, l, 300*time.Millisecond) }()
	for k := range kills {
		victim := f.waitRunning(ctx)
		f.kill(victim)
		t.Logf("kill -9 worker %d with runs in flight (%d/%d)", victim, k+1, kills)
		f.spawn(victim)
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	v := f.waitDone(t, ctx, l)
	// Every kill caught a run in flight: each left a run superseded by a
	// re-run, or a completion re-announced by a redelivery.
	if v.reruns+v.redeliveries < kills {
		t.Fatalf("%d re-runs and %d redeliveries after %d kills of workers with runs in flight: the kills hit no work", v.reruns, v.redeliveries, kills)
	}
}

func TestTheStoreStoppingAndRestartingMidLoadLosesAndDuplicatesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("stops the store mid-load")
	}
	ctx := testenv.Context(t, 3*time.Minute)
	f := newFaultStack(t)
	l := load{convs: 16, msgs: 4, user: "mongo", extra: "[[delay:40ms]]"}
	f.spawn(0)
	f.spawn(1)
	f.waitConsuming(ctx, 2)
	produced := make(chan error, 1)
	go func() { produced <- f.produce(ctx, l, 250*time.Millisecond) }()
	f.waitRunning(ctx)
	f.stopMongo()
	t.Log("store stopped with runs in flight")
	// The runs in flight cannot commit their turns: keep the store down
	// until every one of them has failed and the workers retry.
	poll(t, ctx, "every run in flight failed", func() (bool, string) {
		running, err1 := f.workerSum(ctx, metricRunning)
		retries, err2 := f.workerSum(ctx, metricRetries)
		if err := errors.Join(err1, err2); err != nil {
			return false, err.Error()
		}
		return running == 0 && retries > 0, fmt.Sprintf("%v running, %v retries", running, retries)
	})
	f.startMongo()
	t.Log("store restarted")
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	v := f.waitDone(t, ctx, l)
	if v.reruns == 0 {
		t.Fatalf("no run was re-run after the store failed the runs in flight: the outage hit no work")
	}
}

func TestBrokerFaultsOnProduceFetchAndOffsetCommitLoseAndDuplicateNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("injects broker faults for a while")
	}
	ctx := testenv.Context(t, 3*time.Minute)
	f := newFaultStack(t)
	l := load{convs: 16, msgs: 5, user: "broker"}
	f.spawn(0)
	f.spawn(1)
	f.waitConsuming(ctx, 2)
	names := topic.NewNames(f.prefix)
	// The faults hit the workers' work only: their stream-event writes (a
	// run in flight), their fetches of requests and their offset commits.
	hits := []func(kmsg.Request) bool{
		func(r kmsg.Request) bool {
			p, ok := r.(*kmsg.ProduceRequest)
			return ok && slices.ContainsFunc(p.Topics, func(t kmsg.ProduceRequestTopic) bool { return t.Topic == names.Stream })
		},
		func(r kmsg.Request) bool {
			p, ok := r.(*kmsg.FetchRequest)
			return ok && slices.ContainsFunc(p.Topics, func(t kmsg.FetchRequestTopic) bool { return t.Topic == names.Requests })
		},
		func(r kmsg.Request) bool {
			p, ok := r.(*kmsg.OffsetCommitRequest)
			return ok && p.Group == f.group
		},
	}
	var injected [3]atomic.Int64
	var active atomic.Bool
	active.Store(true)
	for i, key := range []kmsg.Key{kmsg.Produce, kmsg.Fetch, kmsg.OffsetCommit} {
		every := []int64{4, 7, 2}[i]
		var n atomic.Int64
		f.kafka.Cluster().ControlKey(int16(key), func(r kmsg.Request) (kmsg.Response, error, bool) {
			f.kafka.Cluster().KeepControl()
			if !active.Load() || !hits[i](r) || n.Add(1)%every != 0 {
				return nil, nil, false
			}
			injected[i].Add(1)
			// Returning an error closes the client's connection mid-request.
			return nil, errors.New("injected fault"), true
		})
	}
	produced := make(chan error, 1)
	go func() { produced <- f.produce(ctx, l, 200*time.Millisecond) }()
	// Keep the faults on until the load is produced and every kind has hit
	// the workers' work.
	poll(t, ctx, "the load produced and every kind of fault injected", func() (bool, string) {
		state := fmt.Sprintf("stream writes %d, request fetches %d, offset commits %d", injected[0].Load(), injected[1].Load(), injected[2].Load())
		return len(produced) > 0 && injected[0].Load() > 0 && injected[1].Load() > 0 && injected[2].Load() > 0, state
	})
	active.Store(false)
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	t.Logf("faults injected: stream writes %d, request fetches %d, offset commits %d", injected[0].Load(), injected[1].Load(), injected[2].Load())
	v := f.waitDone(t, ctx, l)
	// A broken offset commit ends the member's generation: the records not
	// yet committed are delivered again and re-announce their outcome.
	if v.redeliveries+v.reruns == 0 {
		t.Fatalf("no request was redelivered or re-run: the faults exercised no recovery")
	}
}

// ingest runs the ingest API in this process on the fault stack's broker
// and store, and returns a client for tenant/user.
func (f *faultStack) ingest(t *testing.T, tenant, user string) *client.Client {
	t.Helper()
	const secret = "fault-test-secret-that-is-32-bytes-long"
	ln := loopback(t)
	c := ingest.DefaultConfig()
	c.Brokers, c.MongoURI, c.MongoDB = []string{f.kafka.Addr()}, f.mongoURI(), f.db
	c.AuthSecret, c.TopicPrefix = secret, f.prefix
	c.RatePerSecond, c.LogLevel = -1, "error"
	s, err := ingest.New(c, ingest.WithListener(ln), ingest.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("ingest: %v", err)
		}
	})
	tok, err := auth.Mint(secret, tenant, user, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &client.Client{BaseURL: "http://" + ln.Addr().String(), Token: tok}
}

// streamOf reads the stream topic from the start, keeping the events of
// requestID.
func (f *faultStack) streamOf(t *testing.T, requestID string) <-chan events.Event {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{f.kafka.Addr()}, GroupID: testenv.Name(t, "watch"),
		Topic: topic.NewNames(f.prefix).Stream, StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
	ch := make(chan events.Event, 1024)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				return
			}
			if e, err := events.DecodeEvent(m.Value); err == nil && e.Header().RequestID == requestID {
				select {
				case ch <- e:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	t.Cleanup(func() { stop(); <-done; r.Close() })
	return ch
}

// A cancel recorded while the request's run is in flight wins over the
// re-run that follows the crash of its worker: the request completes
// cancelled, runs no more and persists no answer but a cancelled one. The
// answer is held at a gate in the test (the worker is a process of its
// own: stacktest.RemoteAgent), so the kill and the cancel land while it
// runs, however loaded the machine: it cannot end before them.
func TestACancelWinsOverARequestReRunAfterAWorkerIsKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a worker process")
	}
	for _, order := range []string{"kill, then cancel", "cancel, then kill"} {
		t.Run(order, func(t *testing.T) {
			ctx := testenv.Context(t, 2*time.Minute)
			f := newFaultStack(t)
			c := f.ingest(t, "acme", "ann")
			gate := f.gates().Hold("race", 3)
			f.spawnGated(0)
			f.waitConsuming(ctx, 1)
			a, err := c.Send(ctx, "race", "[[tokens:400]][[delay:1ms]]", client.SendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			stream := f.streamOf(t, a.RequestID)
			// The answer streams three words and waits at the gate, in
			// the worker: it is in flight until the kill or the cancel.
			var firstRun string
			var text strings.Builder
			for firstRun == "" || len(strings.Fields(text.String())) < 3 {
				select {
				case e := <-stream:
					if e.Type() == events.TypeRunStarted {
						firstRun = e.Header().RunID
					}
					if tok, ok := e.(*events.TokenEvent); ok {
						text.WriteString(tok.Delta)
					}
				case <-ctx.Done():
					t.Fatal("the request never started")
				}
			}
			select {
			case <-gate.Held():
			case <-ctx.Done():
				t.Fatal("the answer never waited at its gate")
			}
			if order == "kill, then cancel" {
				f.kill(0)
				cancel(t, ctx, c, "race", "")
			} else {
				cancel(t, ctx, c, "race", "")
				f.kill(0)
			}
			// The gate stays shut: a re-run that ignored the cancel would
			// start (and be seen starting), not finish.
			f.spawnGated(0)
			var final events.Status
			for final == "" {
				select {
				case e := <-stream:
					if e.Type() == events.TypeRunStarted && e.Header().RunID != firstRun {
						t.Fatalf("the cancelled request ran again (run %s)", e.Header().RunID)
					}
					if done, ok := e.(*events.RunCompletedEvent); ok {
						final = done.Status
					}
				case <-ctx.Done():
					t.Fatal("the request never completed")
				}
			}
			if final != events.StatusCancelled {
				t.Fatalf("completed %s, want cancelled", final)
			}
			p, err := c.History(ctx, "race", 10, 0)
			if err == nil {
				for _, m := range p.Messages {
					if m.Role == "assistant" && m.Status != "cancelled" {
						t.Fatalf("persisted %+v after a cancel", m)
					}
				}
			} else if !client.IsCode(err, "not_found") {
				t.Fatal(err)
			}
		})
	}
}
