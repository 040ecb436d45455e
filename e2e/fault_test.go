package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turnpike-dev/turnpike/internal/auth"
	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/service"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// TestMain lets the test binary stand in for cmd/worker, so fault tests can
// run workers as processes and kill them with SIGKILL.
func TestMain(m *testing.M) {
	if role := os.Getenv("TURNPIKE_TEST_RUN_SERVICE"); role != "" {
		os.Exit(runServiceProcess(role))
	}
	if os.Getenv("TURNPIKE_TEST_RUN_WORKER") == "1" {
		os.Exit(runServiceProcess("worker"))
	}
	os.Exit(m.Run())
}

// runServiceProcess runs one service as cmd/<role> does, configured from
// the environment, until SIGTERM.
func runServiceProcess(role string) int {
	var (
		cfg service.Configurable
		run func(ctx context.Context, env service.Env) error
	)
	switch role {
	case "ingest":
		c := &service.IngestConfig{}
		cfg, run = c, func(ctx context.Context, env service.Env) error { return service.RunIngest(ctx, *c, env, nil) }
	case "worker":
		c := &service.WorkerConfig{}
		cfg, run = c, func(ctx context.Context, env service.Env) error { return service.RunWorker(ctx, *c, env, nil) }
	case "pushgw":
		c := &service.PushgwConfig{}
		cfg, run = c, func(ctx context.Context, env service.Env) error { return service.RunPushgw(ctx, *c, env, nil) }
	default:
		fmt.Fprintln(os.Stderr, "unknown role", role)
		return 2
	}
	return service.Main(role, nil, os.LookupEnv, os.Stderr, cfg, run)
}

// faultStack is a broker and a store in this process, and workers in
// this process or in child processes, all on one set of topics.
type faultStack struct {
	t        *testing.T
	kafka    *embedded.Kafka
	mongo    *embedded.Mongo
	mongoDir string
	mongoAdr string
	prefix   string
	db       string
	env      []string

	mu    sync.Mutex
	procs map[int]*exec.Cmd
}

func newFaultStack(t *testing.T) *faultStack {
	t.Helper()
	f := &faultStack{t: t, procs: map[int]*exec.Cmd{}, mongoDir: t.TempDir(), prefix: testenv.Name(t, "f") + ".", db: "faults"}
	f.kafka = testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.mongoAdr = ln.Addr().String()
	ln.Close()
	f.startMongo()
	t.Cleanup(func() { f.mongo.Close() })
	f.env = []string{
		"TURNPIKE_KAFKA_BROKERS=" + f.kafka.Addr(),
		"TURNPIKE_MONGO_URI=mongodb://" + f.mongoAdr + "/",
		"TURNPIKE_MONGO_DB=" + f.db,
		"TURNPIKE_TOPIC_PREFIX=" + f.prefix,
		"TURNPIKE_MODEL=echo", "TURNPIKE_ECHO_DELAY=0",
		"TURNPIKE_WORKER_ADDR=", "TURNPIKE_LOG_LEVEL=error",
		"TURNPIKE_PARTITIONS=4", "TURNPIKE_WORKER_GROUP=" + testenv.Name(t, "g"),
		"TURNPIKE_SESSION_TIMEOUT=6s", "TURNPIKE_DRAIN_TIMEOUT=2s",
	}
	if err := topic.Ensure(testenv.Context(t, 10*time.Second), []string{f.kafka.Addr()}, 4, topic.NewNames(f.prefix).All()...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.killAll)
	return f
}

func (f *faultStack) startMongo() {
	f.t.Helper()
	m, err := embedded.StartMongo(embedded.MongoConfig{Addr: f.mongoAdr, DataDir: f.mongoDir})
	if err != nil {
		f.t.Fatalf("start mongo: %v", err)
	}
	f.mongo = m
}

func (f *faultStack) store() history.Store {
	f.t.Helper()
	s, err := history.NewMongoStore(testenv.Context(f.t, 10*time.Second), testenv.MongoClient(f.t, "mongodb://"+f.mongoAdr+"/").Database(f.db), history.MongoConfig{})
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// spawn starts worker process i (replacing a dead one).
func (f *faultStack) spawn(i int) {
	f.t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), "TURNPIKE_TEST_RUN_WORKER=1"), f.env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	f.procs[i] = cmd
	f.mu.Unlock()
}

// kill sends SIGKILL to worker i and reaps it.
func (f *faultStack) kill(i int) {
	f.mu.Lock()
	cmd := f.procs[i]
	delete(f.procs, i)
	f.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

func (f *faultStack) killAll() {
	f.mu.Lock()
	ids := make([]int, 0, len(f.procs))
	for i := range f.procs {
		ids = append(ids, i)
	}
	f.mu.Unlock()
	for _, i := range ids {
		f.kill(i)
	}
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
	w := &kafka.Writer{Addr: kafka.TCP(f.kafka.Addr()), Topic: topic.NewNames(f.prefix).Requests, Balancer: &kafka.Murmur2Balancer{},
		BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll, MaxAttempts: 20, WriteBackoffMax: 100 * time.Millisecond}
	defer w.Close()
	for j := 1; j <= l.msgs; j++ {
		var batch []kafka.Message
		for i := 1; i <= l.convs; i++ {
			id := l.id(i)
			b, _ := events.EncodeRequest(events.Request{V: 1, RequestID: fmt.Sprintf("c%d-m%d", i, j), Tenant: id.Tenant, User: id.User,
				Conversation: id.Conversation, Content: l.content(j), CreatedAt: time.Now().UTC()})
			batch = append(batch, kafka.Message{Key: []byte(id.Key()), Value: b})
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

// verdict counts invariant violations over the whole load.
type verdict struct {
	lost, duplicate, dangling, outOfOrder, wrong int
	detail                                       []string
}

func (v *verdict) String() string {
	return fmt.Sprintf("lost %d, duplicate %d, dangling %d, out of order %d, wrong text %d; %s",
		v.lost, v.duplicate, v.dangling, v.outOfOrder, v.wrong, strings.Join(v.detail, "; "))
}

func (v *verdict) ok() bool {
	return v.lost+v.duplicate+v.dangling+v.outOfOrder+v.wrong == 0
}

// check reads every conversation's history and counts violations.
func check(ctx context.Context, store history.Store, l load) (*verdict, error) {
	v := &verdict{}
	note := func(s string, args ...any) {
		if len(v.detail) < 5 {
			v.detail = append(v.detail, fmt.Sprintf(s, args...))
		}
	}
	for i := 1; i <= l.convs; i++ {
		id := l.id(i)
		page, err := store.List(ctx, id, 0, 200)
		if errors.Is(err, history.ErrNotFound) {
			v.lost += l.msgs
			note("%s: nothing persisted", id)
			continue
		}
		if err != nil {
			return nil, err
		}
		seen := map[int]int{}
		last := 0
		for k := 0; k < len(page.Messages); k++ {
			u := page.Messages[k]
			if u.Role != history.RoleUser {
				v.dangling++
				note("%s: message %d is an answer without its question", id, u.Seq)
				continue
			}
			if k+1 >= len(page.Messages) || page.Messages[k+1].Role != history.RoleAssistant || page.Messages[k+1].RequestID != u.RequestID {
				v.dangling++
				note("%s: question %d has no answer", id, u.Seq)
				continue
			}
			a := page.Messages[k+1]
			k++
			var j int
			if _, err := fmt.Sscanf(u.Content, "m%d", &j); err != nil {
				v.wrong++
				continue
			}
			// Messages are told apart by their marker: a request may come
			// with its own id, an idempotency key's or a derived one.
			seen[j]++
			if seen[j] > 1 {
				v.duplicate++
				note("%s: m%d persisted twice", id, j)
			}
			if j <= last {
				v.outOfOrder++
				note("%s: m%d after m%d", id, j, last)
			}
			last = j
			if a.Content != "w1 w2 w3 w4 w5" || a.Status != events.StatusComplete {
				v.wrong++
				note("%s: m%d answered %q (%s)", id, j, a.Content, a.Status)
			}
		}
		for j := 1; j <= l.msgs; j++ {
			if seen[j] == 0 {
				v.lost++
				note("%s: m%d lost", id, j)
			}
		}
	}
	return v, nil
}

// waitDone polls the store until the load is fully persisted or ctx ends,
// then returns the verdict.
func waitDone(t *testing.T, ctx context.Context, store history.Store, l load) *verdict {
	t.Helper()
	for i := 0; ; i++ {
		v, err := check(ctx, store, l)
		if err == nil && v.lost == 0 {
			return v
		}
		if i%25 == 24 {
			t.Logf("waiting for the load to be persisted: %v %v", v, err)
		}
		if ctx.Err() != nil {
			if v == nil {
				t.Fatalf("history unreadable: %v", err)
			}
			return v
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestWorkersKilledWithSIGKILLUnderLoadLoseAndDuplicateNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("kills worker processes for about 20 seconds")
	}
	ctx := testenv.Context(t, 4*time.Minute)
	f := newFaultStack(t)
	l := load{convs: 24, msgs: 6, user: "kill"}
	for i := range 3 {
		f.spawn(i)
	}
	produced := make(chan error, 1)
	go func() { produced <- f.produce(ctx, l, 300*time.Millisecond) }()
	r := rand.New(rand.NewPCG(7, 11))
	for k := range 6 {
		time.Sleep(time.Duration(500+r.IntN(700)) * time.Millisecond)
		victim := r.IntN(3)
		f.kill(victim)
		t.Logf("kill -9 worker %d (%d/6)", victim, k+1)
		f.spawn(victim)
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	v := waitDone(t, ctx, f.store(), l)
	t.Logf("verdict: %s", v)
	if !v.ok() {
		t.Fatalf("invariants violated: %s", v)
	}
}

func TestTheStoreStoppingAndRestartingMidLoadLosesAndDuplicatesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("stops the store mid-load")
	}
	ctx := testenv.Context(t, 3*time.Minute)
	f := newFaultStack(t)
	l := load{convs: 16, msgs: 5, user: "mongo"}
	f.spawn(0)
	f.spawn(1)
	produced := make(chan error, 1)
	go func() { produced <- f.produce(ctx, l, 250*time.Millisecond) }()
	time.Sleep(600 * time.Millisecond)
	f.mongo.Close()
	t.Log("store stopped")
	time.Sleep(2 * time.Second)
	f.startMongo()
	t.Log("store restarted")
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	v := waitDone(t, ctx, f.store(), l)
	t.Logf("verdict: %s", v)
	if !v.ok() {
		t.Fatalf("invariants violated: %s", v)
	}
}

func TestBrokerFaultsOnProduceFetchAndOffsetCommitLoseAndDuplicateNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("injects broker faults for a while")
	}
	ctx := testenv.Context(t, 3*time.Minute)
	f := newFaultStack(t)
	l := load{convs: 16, msgs: 5, user: "broker"}
	var injected [3]atomic.Int64
	var active atomic.Bool
	active.Store(true)
	for i, key := range []kmsg.Key{kmsg.Produce, kmsg.Fetch, kmsg.OffsetCommit} {
		every := []int64{4, 7, 2}[i]
		var n atomic.Int64
		f.kafka.Cluster().ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
			f.kafka.Cluster().KeepControl()
			if !active.Load() || n.Add(1)%every != 0 {
				return nil, nil, false
			}
			injected[i].Add(1)
			// Returning an error closes the client's connection mid-request.
			return nil, errors.New("injected fault"), true
		})
	}
	f.spawn(0)
	f.spawn(1)
	if err := f.produce(ctx, l, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	active.Store(false)
	t.Logf("faults injected: produce %d, fetch %d, offset commit %d", injected[0].Load(), injected[1].Load(), injected[2].Load())
	for i, name := range []string{"produce", "fetch", "offset commit"} {
		if injected[i].Load() == 0 {
			t.Errorf("no %s fault was injected: the test did not test it", name)
		}
	}
	v := waitDone(t, ctx, f.store(), l)
	t.Logf("verdict: %s", v)
	if !v.ok() {
		t.Fatalf("invariants violated: %s", v)
	}
}

// The checker itself must be able to fail.
func TestTheInvariantCheckerCountsViolations(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 10*time.Second)
	store := history.NewMemoryStore()
	l := load{convs: 2, msgs: 3, user: "check"}
	turn := func(j int, answer string) history.Turn {
		return history.Turn{RequestID: fmt.Sprintf("c1-m%d", j), User: l.content(j), Answer: answer, Status: events.StatusComplete}
	}
	for _, tr := range []history.Turn{turn(2, "w1 w2 w3 w4 w5"), turn(1, "w1 w2 w3 w4 w5"), turn(3, "not it")} {
		if _, err := store.Commit(ctx, l.id(1), tr); err != nil {
			t.Fatal(err)
		}
	}
	v, err := check(ctx, store, l)
	if err != nil {
		t.Fatal(err)
	}
	// c1: m1 after m2 is out of order, m3's text is wrong; c2: all 3 lost.
	if v.outOfOrder != 1 || v.wrong != 1 || v.lost != 3 || v.duplicate != 0 || v.ok() {
		t.Fatalf("verdict %s", v)
	}
}

// ingest runs the ingest API in this process on the fault stack's broker
// and store, and returns a client for tenant/user.
func (f *faultStack) ingest(t *testing.T, tenant, user string) *client.Client {
	t.Helper()
	const secret = "fault-test-secret-that-is-32-bytes-long"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var c service.IngestConfig
	c.Brokers, c.MongoURI, c.MongoDB = []string{f.kafka.Addr()}, "mongodb://"+f.mongoAdr+"/", f.db
	c.AuthSecret, c.TopicPrefix, c.Model = secret, f.prefix, "echo"
	c.Ingest.RatePerSecond = -1
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- service.RunIngest(ctx, c, service.Env{}, ln) }()
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

func TestACancelWinsOverARequestReRunAfterAWorkerIsKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a worker process")
	}
	for _, order := range []string{"kill, then cancel", "cancel, then kill"} {
		t.Run(order, func(t *testing.T) {
			ctx := testenv.Context(t, 2*time.Minute)
			f := newFaultStack(t)
			c := f.ingest(t, "acme", "ann")
			f.spawn(0)
			a, err := c.Send(ctx, "race", "[[tokens:400]][[delay:20ms]]", client.SendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			stream := f.streamOf(t, a.RequestID)
			var firstRun string
			for tokens := 0; tokens < 3; {
				select {
				case e := <-stream:
					if e.Type() == events.TypeRunStarted {
						firstRun = e.Header().RunID
					}
					if e.Type() == events.TypeToken {
						tokens++
					}
				case <-ctx.Done():
					t.Fatal("the request never started")
				}
			}
			if order == "kill, then cancel" {
				f.kill(0)
				cancel(t, ctx, c, "race", "")
			} else {
				cancel(t, ctx, c, "race", "")
				f.kill(0)
			}
			f.spawn(0)
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
