package pushgw

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/edgering"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// BenchmarkReplicaScaling is the figure of issue 29 (BENCHMARKS.md, "N
// replicas over one topic"): N gateway replicas (1, 2, 4), each its own
// process (the test binary run again with benchReplicaEnv set), over one
// broker in another process (the load process of bench_test.go, used for
// its broker only), with benchReplicaPartitions stream partitions.
//
//	nice -n 5 go test -run '^$' -bench ReplicaScaling -benchtime 1x -timeout 20m ./pkg/pushgw/
//
// Each replica has the same number of clients (benchReplicaClients), each
// watching its own conversation; clients reach replicas as an edge routing
// by shard sends them: the shard (the conversation's home partition) hashed
// onto the replicas, named as pods are, by internal/edgering. The producer
// writes the same rate per conversation, so total traffic grows with N
// (4× from 1 to 4 replicas). The benchmark process holds the clients and
// the producer; a replica's CPU is its process's, from /proc/<pid>/stat.
//
// Two arms run one after the other on the same replicas:
//   - on demand: what the gateway does (a replica reads only the
//     partitions its clients subscribe to);
//   - read everything: the design before issue 29, emulated: the gateway no
//     longer has a mode that opens every partition, so each replica gets
//     one more client subscribed to an idle conversation homed in every
//     partition (what a replica behind a load balancer that spreads at
//     random ends up with), which opens every partition's reader.
//
// Per replica and arm it reports the Kafka bytes the live readers fetched
// (turnpike_pushgw_live_bytes_total), the records, the partitions open
// (turnpike_pushgw_live_readers), CPU, and the delivery p99 of its clients
// (the event's ts, stamped before the produce call, to the client's read).
// It also prints how the ring spreads the partitions over the replicas.
// TURNPIKE_PUSHGW_BENCH_WINDOW changes the measured time (default 10s).
func BenchmarkReplicaScaling(b *testing.B) {
	raiseFileLimit()
	ctx := testenv.Context(b, 15*time.Minute)
	load := startBenchLoad(b, "127.0.0.13")
	window := 10 * time.Second
	if s := os.Getenv("TURNPIKE_PUSHGW_BENCH_WINDOW"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatal(err)
		}
		window = d
	}
	var rows []replicaRow
	for _, n := range []int{1, 2, 4} {
		rows = append(rows, runReplicaScaling(b, ctx, load.brokers, n, window)...)
	}
	printReplicaRows(rows)
	printRingSpread()
}

const (
	benchReplicaEnv        = "TURNPIKE_PUSHGW_BENCH_REPLICA" // "<brokers>;<topic>;<max subscriptions>"
	benchReplicaPartitions = 80                              // 20 × the most replicas
	benchReplicaClients    = 100                             // per replica
	benchReplicaRate       = 1000                            // events/s per replica: 10 per conversation
	benchClockTicks        = 100                             // USER_HZ, the unit of /proc/<pid>/stat's times
)

// Arms of the figure.
const (
	armOnDemand      = "on demand"
	armReadAll       = "read everything"
	benchWatcherUser = "watcher"
)

// replicaRow is one replica's figures in one arm.
type replicaRow struct {
	replicas, replica int
	arm               string
	partitionsOwned   int
	sent              int     // events produced in the window, all conversations
	seconds           float64 // the window: from the first event delivered to the last, all replicas
	bytes, records    float64 // fetched by the live readers in the window
	readers           float64 // open at the window's end
	cpu               float64 // seconds
	received          int
	p50, p99          time.Duration
}

// benchReplica is a replica process seen from the benchmark.
type benchReplica struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	url  string // its WebSocket URL

	waited bool // stop or kill has waited for the process

	mu sync.Mutex
	// Guarded by mu.
	received    int // event frames its clients read, measured or not
	latencies   []int64
	measuring   bool
	first, last time.Time // the first and the last event read while measuring
	closing     bool      // the benchmark closes the clients: a read that ends is no loss
	lost        int       // clients whose connection ended before closing
}

// replicaStats is what a replica process answers "stats" with.
type replicaStats struct {
	Bytes   float64 `json:"bytes"`
	Records float64 `json:"records"`
	Readers float64 `json:"readers"`
}

// startReplica starts a replica process and waits, bounded by ctx, until
// it listens.
func startReplica(b *testing.B, ctx context.Context, brokers []string, topicName, name string, maxSubs int) *benchReplica {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s;%s;%d", benchReplicaEnv, strings.Join(brokers, ","), topicName, maxSubs))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	r := &benchReplica{name: name, cmd: cmd, in: in, out: bufio.NewScanner(out)}
	// Registered before anything can fail: a replica never outlives the
	// benchmark, whatever stops it (stop, when it ran, has waited).
	b.Cleanup(r.kill)
	said := make(chan bool, 1)
	go func() { said <- r.out.Scan() }() // ends at the latest when kill ends the process
	select {
	case ok := <-said:
		if !ok {
			b.Fatalf("replica %s ended: %v", name, r.out.Err())
		}
	case <-ctx.Done():
		b.Fatalf("replica %s not listening: %v", name, ctx.Err())
	}
	addr, ok := strings.CutPrefix(r.out.Text(), "listening ")
	if !ok {
		b.Fatalf("replica %s said %q", name, r.out.Text())
	}
	r.url = "ws://" + addr + "/v1/stream"
	return r
}

func (r *benchReplica) stats() (replicaStats, error) {
	var s replicaStats
	if _, err := io.WriteString(r.in, "stats\n"); err != nil {
		return s, err
	}
	if !r.out.Scan() {
		return s, errors.Join(errors.New("replica ended"), r.out.Err())
	}
	return s, json.Unmarshal(r.out.Bytes(), &s)
}

// stop asks the replica to exit and waits for it.
func (r *benchReplica) stop() error {
	_, _ = io.WriteString(r.in, "exit\n")
	_ = r.in.Close()
	r.waited = true
	return r.cmd.Wait()
}

// kill ends the replica's process, unless stop or kill has waited for it.
func (r *benchReplica) kill() {
	if r.waited {
		return
	}
	r.waited = true
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

// cpuSeconds is the process's user and system CPU so far, from
// /proc/<pid>/stat (fields 14 and 15, in clock ticks).
func (r *benchReplica) cpuSeconds() (float64, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(r.cmd.Process.Pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := strings.LastIndexByte(string(stat), ')')
	f := strings.Fields(string(stat[i+1:])) // from field 3, the state
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", r.cmd.Process.Pid, stat)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return float64(utime+stime) / benchClockTicks, nil
}

// record counts an event read at now, ns after its ts, and keeps the
// latency and the time while the replica's window is open.
func (r *benchReplica) record(now time.Time, ns int64) {
	r.mu.Lock()
	r.received++
	if r.measuring {
		r.latencies = append(r.latencies, ns)
		if r.first.IsZero() {
			r.first = now
		}
		r.last = now
	}
	r.mu.Unlock()
}

// measure opens (on) or closes the replica's window, and returns the
// latencies and the first and last read times of the window that ends.
func (r *benchReplica) measure(on bool) (latencies []int64, first, last time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.measuring = on
	latencies, first, last = r.latencies, r.first, r.last
	r.latencies, r.first, r.last = nil, time.Time{}, time.Time{}
	return latencies, first, last
}

// delivered is how many event frames the replica's clients read, and how
// many of its clients lost their connection.
func (r *benchReplica) delivered() (received, lost int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.received, r.lost
}

// waitDelivered waits until the replicas' clients have read want events
// in all (every event produced goes to one client: each conversation has
// one), bounded by ctx; a client that lost its connection fails it at once.
func waitDelivered(b *testing.B, ctx context.Context, replicas []*benchReplica, want int) {
	b.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		got := 0
		for _, r := range replicas {
			n, lost := r.delivered()
			if lost > 0 {
				b.Fatalf("%d clients of replica %s lost their connection", lost, r.name)
			}
			got += n
		}
		if got >= want {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatalf("%d of %d events delivered: %v", got, want, ctx.Err())
		case <-tick.C:
		}
	}
}

// runReplicaScaling runs both arms with n replicas.
func runReplicaScaling(b *testing.B, ctx context.Context, brokers []string, n int, window time.Duration) []replicaRow {
	topicName := "bench.replicas." + strconv.Itoa(n)
	if err := topic.Ensure(ctx, brokers, benchReplicaPartitions, topicName); err != nil {
		b.Fatal(err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = "pushgw-" + strconv.Itoa(i)
	}
	ring := edgering.New(names)
	owned := make([]int, n)
	for p := range benchReplicaPartitions {
		owned[ring.Owner(strconv.Itoa(p))]++
	}
	replicas := make([]*benchReplica, n)
	for i := range replicas {
		replicas[i] = startReplica(b, ctx, brokers, topicName, names[i], benchReplicaPartitions+1)
	}
	defer func() {
		for _, r := range replicas {
			if err := r.stop(); err != nil {
				b.Errorf("replica %s: %v", r.name, err)
			}
		}
	}()

	// The clients: conversations picked in order, each going where the
	// ring sends its shard, until every replica has its share.
	var ids []events.Identity
	count := make([]int, n)
	var conns []*websocket.Conn
	var readers sync.WaitGroup
	defer func() { // before the replicas stop
		for _, r := range replicas {
			r.mu.Lock()
			r.closing = true
			r.mu.Unlock()
		}
		for _, c := range conns {
			_ = c.Close()
		}
		readers.Wait()
	}()
	for i := 0; len(ids) < n*benchReplicaClients; i++ {
		id := events.Identity{Tenant: auth.DefaultTenant, User: "user-" + strconv.Itoa(i), Conversation: "conv-" + strconv.Itoa(i)}
		shard := topic.Home([]byte(id.Key()), benchReplicaPartitions)
		o := ring.Owner(strconv.Itoa(shard))
		if count[o] == benchReplicaClients {
			continue
		}
		count[o]++
		ids = append(ids, id)
		c := dialReplica(b, ctx, replicas[o], id.User, shard, []string{id.Conversation})
		conns = append(conns, c)
		readers.Go(func() { readReplicaFrames(c, replicas[o]) })
	}

	// Every event produced goes to one client: the benchmark waits for
	// deliveries, not for a guessed time.
	produced := 0
	arm := func(name string) []replicaRow {
		produced += produceReplicaLoad(b, ctx, brokers, topicName, ids, n*benchReplicaRate, 2*time.Second) // warm-up
		waitDelivered(b, ctx, replicas, produced)
		before := make([]replicaStats, n)
		cpu0 := make([]float64, n)
		for i, r := range replicas {
			var err error
			if before[i], err = r.stats(); err != nil {
				b.Fatal(err)
			}
			if cpu0[i], err = r.cpuSeconds(); err != nil {
				b.Fatal(err)
			}
			r.measure(true)
		}
		sent := produceReplicaLoad(b, ctx, brokers, topicName, ids, n*benchReplicaRate, window)
		produced += sent
		waitDelivered(b, ctx, replicas, produced) // the last events arrive
		var rows []replicaRow
		var first, last time.Time
		for i, r := range replicas {
			cpu, err := r.cpuSeconds()
			if err != nil {
				b.Fatal(err)
			}
			after, err := r.stats()
			if err != nil {
				b.Fatal(err)
			}
			lat, f, l := r.measure(false)
			if !f.IsZero() && (first.IsZero() || f.Before(first)) {
				first = f
			}
			if l.After(last) {
				last = l
			}
			p := summarize(lat)
			rows = append(rows, replicaRow{replicas: n, replica: i, arm: name, partitionsOwned: owned[i], sent: sent,
				bytes: after.Bytes - before[i].Bytes, records: after.Records - before[i].Records, readers: after.Readers,
				cpu: cpu - cpu0[i], received: len(lat), p50: time.Duration(p.P50us * 1e3), p99: time.Duration(p.P99us * 1e3)})
		}
		// Rates are per second of delivery, from the first event delivered
		// to the last: the waits around the window (for the first event,
		// for the last) are not traffic.
		took := last.Sub(first).Seconds()
		if took <= 0 {
			b.Fatalf("%s, %d replicas: no delivery window (first %v, last %v)", name, n, first, last)
		}
		for i := range rows {
			rows[i].seconds = took
		}
		return rows
	}
	rows := arm(armOnDemand)

	// Read everything: one more client on each replica, subscribed to an
	// idle conversation in every partition.
	var watched []string
	seen := make([]bool, benchReplicaPartitions)
	for i := 0; len(watched) < benchReplicaPartitions; i++ {
		id := events.Identity{Tenant: auth.DefaultTenant, User: benchWatcherUser, Conversation: "idle-" + strconv.Itoa(i)}
		if p := topic.Home([]byte(id.Key()), benchReplicaPartitions); !seen[p] {
			seen[p] = true
			watched = append(watched, id.Conversation)
		}
	}
	for _, r := range replicas {
		c := dialReplica(b, ctx, r, benchWatcherUser, -1, watched)
		conns = append(conns, c)
		readers.Go(func() { readReplicaFrames(c, r) })
	}
	return append(rows, arm(armReadAll)...)
}

// dialReplica connects user to replica r (with the shard hint the edge
// routed by, unless shard < 0) and subscribes to convs.
func dialReplica(b *testing.B, ctx context.Context, r *benchReplica, user string, shard int, convs []string) *websocket.Conn {
	b.Helper()
	tok, err := auth.Mint(testSecret, auth.DefaultTenant, user, 24*time.Hour, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	url := r.url
	if shard >= 0 {
		url += "?shard=" + strconv.Itoa(shard)
	}
	c, _, err := websocket.DefaultDialer.DialContext(ctx, url, http.Header{"Authorization": {"Bearer " + tok}})
	if err != nil {
		b.Fatalf("dial %s: %v", r.name, err)
	}
	for _, conv := range convs {
		if err := c.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, `{"op":"subscribe","conversation":%q}`, conv)); err != nil {
			b.Fatal(err)
		}
	}
	for got := 0; got < len(convs); {
		_, data, err := c.ReadMessage()
		if err != nil {
			b.Fatalf("subscribe on %s: %v", r.name, err)
		}
		if strings.Contains(string(data), `"subscribed"`) {
			got++
		} else if strings.Contains(string(data), `"error"`) {
			b.Fatalf("subscribe on %s: %s", r.name, data)
		}
	}
	return c
}

// readReplicaFrames records the latency of every event frame c reads, and
// counts c lost if its connection ends before the benchmark closes it.
func readReplicaFrames(c *websocket.Conn, r *benchReplica) {
	for {
		_, data, err := c.ReadMessage()
		if err != nil {
			r.mu.Lock()
			if !r.closing {
				r.lost++
			}
			r.mu.Unlock()
			return
		}
		now := time.Now()
		if ts, ok := frameTS(data); ok {
			r.record(now, now.UnixNano()-ts)
		}
	}
}

// produceReplicaLoad writes token events at rate per second for d, round
// robin over ids, with the worker's stream writer, and returns how many.
// Each 10 ms it writes what the rate owes since the start: a write that
// took longer than a tick (a synchronous write waits for every
// partition's batch) is caught up by the next one, instead of losing the
// ticks it missed, and the last tick tops up to rate × d, so the traffic
// reaches its rate whatever the write's latency, as long as the broker
// keeps up.
func produceReplicaLoad(b *testing.B, ctx context.Context, brokers []string, topicName string, ids []events.Identity, rate int, d time.Duration) int {
	w := topic.StreamWriter(brokers, topicName, 2*time.Millisecond)
	defer w.Close()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	sent, began, total := 0, time.Now(), int(float64(rate)*d.Seconds())
	for sent < total {
		<-t.C
		owed := int(float64(rate)*min(time.Since(began), d).Seconds()) - sent
		if owed <= 0 {
			continue
		}
		msgs := make([]kafka.Message, owed)
		for i := range msgs {
			id := ids[sent%len(ids)]
			sent++
			msgs[i] = kafka.Message{Key: []byte(id.Key()), Value: events.MarshalEvent(&events.TokenEvent{
				Meta:  events.Meta{Conversation: id.Conversation, RequestID: "r-bench", RunID: "u-bench", Seq: int64(sent), TS: time.Now().UnixNano()},
				Delta: "token" + strconv.Itoa(sent) + " ", Agent: "echo", Role: "assistant"})}
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			b.Fatal(err)
		}
	}
	return sent
}

// printReplicaRows prints the figure: per replica, then per replica count.
func printReplicaRows(rows []replicaRow) {
	fmt.Printf("\n| replicas | arm | replica | partitions owned | partitions open | events produced/s (all) | records fetched/s | KiB fetched/s | CPU, %% of a core | delivered | p50 | p99 |\n")
	fmt.Printf("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Printf("| %d | %s | %d | %d | %.0f | %.0f | %.0f | %.1f | %.1f | %d | %.2f ms | %.2f ms |\n",
			r.replicas, r.arm, r.replica, r.partitionsOwned, r.readers, float64(r.sent)/r.seconds, r.records/r.seconds, r.bytes/r.seconds/1024,
			100*r.cpu/r.seconds, r.received, ms(r.p50), ms(r.p99))
	}
	fmt.Printf("\n| replicas | arm | events produced/s | per replica: KiB fetched/s (mean, max) | per replica: CPU %% (mean, max) | all replicas: KiB fetched/s | all replicas: CPU %% | worst p99 | bytes/record | CPU µs per fetched record |\n")
	fmt.Printf("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range []int{1, 2, 4} {
		for _, arm := range []string{armOnDemand, armReadAll} {
			var bytes, cpu, records, maxBytes, maxCPU, secs float64
			var p99 time.Duration
			sent := 0
			for _, r := range rows {
				if r.replicas != n || r.arm != arm {
					continue
				}
				bytes += r.bytes / r.seconds
				cpu += r.cpu / r.seconds
				records += r.records
				maxBytes = math.Max(maxBytes, r.bytes/r.seconds)
				maxCPU = math.Max(maxCPU, r.cpu/r.seconds)
				p99 = max(p99, r.p99)
				sent, secs = r.sent, r.seconds
			}
			cpuTotal := 0.0
			for _, r := range rows {
				if r.replicas == n && r.arm == arm {
					cpuTotal += r.cpu
				}
			}
			fmt.Printf("| %d | %s | %.0f | %.0f, %.0f | %.1f, %.1f | %.0f | %.1f | %.2f ms | %.0f | %.1f |\n",
				n, arm, float64(sent)/secs, bytes/float64(n)/1024, maxBytes/1024, 100*cpu/float64(n), 100*maxCPU, bytes/1024, 100*cpu, ms(p99),
				bytes*secs/math.Max(records, 1), 1e6*cpuTotal/math.Max(records, 1))
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// printRingSpread prints how edgering spreads partitions over replicas:
// for the pod names the benchmark uses, and over 1,000 random sets of pod
// addresses (what ingress-nginx hashes), the partitions of the replica with
// the fewest and the most, against the mean.
func printRingSpread() {
	fmt.Printf("\n| partitions | replicas | mean per replica | pods pushgw-0..: min, max | 1,000 random address sets: median of (max/mean) | p99 of (max/mean) | median of (min/mean) |\n")
	fmt.Printf("|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range []struct{ p, n int }{{80, 2}, {80, 4}, {120, 6}, {160, 8}, {16, 4}} {
		spread := func(names []string) (lo, hi int) {
			ring := edgering.New(names)
			count := make([]int, len(names))
			for p := range c.p {
				count[ring.Owner(strconv.Itoa(p))]++
			}
			return slices.Min(count), slices.Max(count)
		}
		names := make([]string, c.n)
		for i := range names {
			names[i] = "pushgw-" + strconv.Itoa(i)
		}
		lo, hi := spread(names)
		mean := float64(c.p) / float64(c.n)
		var maxes, mins []float64
		rng := uint64(1)
		for range 1000 {
			for i := range names {
				rng = rng*6364136223846793005 + 1442695040888963407
				names[i] = fmt.Sprintf("10.%d.%d.%d:8081", byte(rng>>40), byte(rng>>48), byte(rng>>56))
			}
			lo, hi := spread(names)
			maxes = append(maxes, float64(hi)/mean)
			mins = append(mins, float64(lo)/mean)
		}
		slices.Sort(maxes)
		slices.Sort(mins)
		fmt.Printf("| %d | %d | %.1f | %d, %d | %.2f | %.2f | %.2f |\n", c.p, c.n, mean, lo, hi, maxes[500], maxes[990], mins[500])
	}
}

// runBenchReplica is a replica process of BenchmarkReplicaScaling: a
// gateway on loopback that answers "stats" on stdin with its live readers'
// counters and ends at "exit".
func runBenchReplica() int {
	raiseFileLimit()
	f := strings.Split(os.Getenv(benchReplicaEnv), ";")
	if len(f) != 3 {
		fmt.Fprintln(os.Stderr, "bench replica:", benchReplicaEnv, f)
		return 1
	}
	maxSubs, err := strconv.Atoi(f[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench replica:", err)
		return 1
	}
	v, err := auth.NewVerifier(testSecret, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench replica:", err)
		return 1
	}
	reg := prometheus.NewRegistry()
	gw, err := newGateway(Config{Brokers: strings.Split(f[0], ","), Topic: f[1], ConnectPerMinute: -1, SubscribePerMinute: -1, MaxSubscriptions: maxSubs}, v, reg, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench replica:", err)
		return 1
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- gw.Run(ctx) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench replica:", err)
		return 1
	}
	srv := &http.Server{Handler: gw}
	go func() { _ = srv.Serve(ln) }()
	for gw.Ready(ctx) != nil {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("listening %s\n", ln.Addr())
	value := func(name string) float64 {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == name && len(mf.GetMetric()) > 0 {
				m := mf.GetMetric()[0]
				if g := m.GetGauge(); g != nil {
					return g.GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
		return math.NaN()
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "stats":
			out, _ := json.Marshal(replicaStats{Bytes: value("turnpike_pushgw_live_bytes_total"),
				Records: value("turnpike_pushgw_live_records_total"), Readers: value("turnpike_pushgw_live_readers")})
			fmt.Printf("%s\n", out)
		case "exit":
			stop()
			_ = srv.Close()
			if err := <-runErr; err != nil {
				fmt.Fprintln(os.Stderr, "bench replica: Run:", err)
				return 1
			}
			return 0
		}
	}
	stop()
	<-runErr
	return 0
}
