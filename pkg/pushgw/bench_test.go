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
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// The connection benchmarks are not tests: they run only with -bench, for
// minutes, and measure the machine. BENCHMARKS.md has their figures:
//
//	go test -run '^$' -bench 'IdleConnections|FanoutLatency|StreamReadCost' -benchtime 1x -timeout 30m ./pkg/pushgw/
//
// The gateway runs alone in the test process (so -cpuprofile and
// -memprofile profile the gateway only); the broker, the producer and the
// clients run in the load process (benchclient_test.go).
// TURNPIKE_PUSHGW_BENCH_CONNS overrides the number of connections;
// TURNPIKE_PUSHGW_BENCH_HEAP=<path> writes heap profiles with the idle
// connections up.

// benchLoadProcess is the load process of a benchmark.
type benchLoadProcess struct {
	stdin   io.WriteCloser
	out     *bufio.Scanner
	brokers []string
}

// startBenchLoad starts the load process, dialling from the loopback
// address local, and waits for its broker.
func startBenchLoad(b *testing.B, local string) *benchLoadProcess {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchLoadEnv+"=1", benchLocalEnv+"="+local)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &benchLoadProcess{stdin: stdin, out: bufio.NewScanner(stdout)}
	b.Cleanup(func() {
		_, _ = io.WriteString(p.stdin, "exit\n")
		_ = p.stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("load process: %v", err)
		}
	})
	l, err := p.line()
	if err != nil {
		b.Fatal(err)
	}
	addrs, ok := strings.CutPrefix(l, "broker ")
	if !ok {
		b.Fatalf("load process said %q, want its broker", l)
	}
	p.brokers = strings.Split(addrs, ",")
	return p
}

// line returns the load's next stdout line.
func (p *benchLoadProcess) line() (string, error) {
	if !p.out.Scan() {
		return "", errors.Join(errors.New("load process ended"), p.out.Err())
	}
	return p.out.Text(), nil
}

// do sends a command and returns the answer.
func (p *benchLoadProcess) do(format string, args ...any) (string, error) {
	if _, err := fmt.Fprintf(p.stdin, format+"\n", args...); err != nil {
		return "", err
	}
	return p.line()
}

// connect opens n clients of the gateway at url: WebSockets, or with sse
// Server-Sent Events streams of the gateway's HTTP base (url without its
// ws:// and /v1/stream).
func (p *benchLoadProcess) connect(url string, n int, sub string, sse bool) error {
	cmd := fmt.Sprintf("connect %s %d %s", url, n, sub)
	if sse {
		cmd = fmt.Sprintf("connect %s %d %s sse", "http://"+strings.TrimSuffix(strings.TrimPrefix(url, "ws://"), "/v1/stream"), n, sub)
	}
	l, err := p.do("%s", cmd)
	if err == nil && l != "ready" {
		err = fmt.Errorf("load process said %q, want ready", l)
	}
	return err
}

func (p *benchLoadProcess) produce(topic string, rate int, d time.Duration) (int, time.Duration, error) {
	l, err := p.do("produce %s %d %s", topic, rate, d)
	if err != nil {
		return 0, 0, err
	}
	var n int
	var secs float64
	if _, err := fmt.Sscanf(l, "produced %d %f", &n, &secs); err != nil {
		return 0, 0, fmt.Errorf("load process said %q: %w", l, err)
	}
	return n, time.Duration(secs * float64(time.Second)), nil
}

func (p *benchLoadProcess) report() (benchReport, error) {
	var r benchReport
	l, err := p.do("report")
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal([]byte(l), &r)
}

// benchGateway runs a gateway on the load's broker, served on loopback,
// and returns its registry and WebSocket URL.
func benchGateway(b *testing.B, ctx context.Context, brokers []string, topicName string) (*prometheus.Registry, string) {
	b.Helper()
	if err := topic.Ensure(ctx, brokers, topic.DefaultPartitions, topicName); err != nil {
		b.Fatal(err)
	}
	v, err := auth.NewVerifier(testSecret, nil)
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	// Every client is another user; per-user limits are not measured.
	gw, err := newGateway(Config{Brokers: brokers, Topic: topicName, ConnectPerMinute: -1, SubscribePerMinute: -1}, v, reg, nil)
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	runErr := make(chan error, 1)
	go func() { runErr <- gw.Run(runCtx) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/stream", gw)
	mux.HandleFunc(EventsPath, gw.ServeEvents)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() {
		stop()
		if err := <-runErr; err != nil {
			b.Errorf("Run: %v", err)
		}
		_ = srv.Close()
	})
	for gw.Ready(ctx) != nil {
		if ctx.Err() != nil {
			b.Fatal("gateway not ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return reg, "ws://" + ln.Addr().String() + "/v1/stream"
}

// memSample is the process's memory at one moment.
type memSample struct {
	rss        int64 // VmRSS
	heapInuse  int64
	stackInuse int64
	goroutines int
}

// sampleMemory reads the process's memory; with gc it first collects and
// returns freed memory to the OS, as the scavenger eventually would.
func sampleMemory(gc bool) memSample {
	if gc {
		runtime.GC()
		debug.FreeOSMemory()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := memSample{heapInuse: int64(ms.HeapInuse), stackInuse: int64(ms.StackInuse), goroutines: runtime.NumGoroutine()}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return s
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			s.rss = kb << 10
		}
	}
	return s
}

func openFiles() int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(fds)
}

// benchConns is how many connections fit this process's open file limit
// (at most want), leaving room for its other files.
func benchConns(b *testing.B, want int) int {
	if s := os.Getenv("TURNPIKE_PUSHGW_BENCH_CONNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatalf("TURNPIKE_PUSHGW_BENCH_CONNS: %v", err)
		}
		return n
	}
	soft, _ := raiseFileLimit()
	return min(want, int(soft)-openFiles()-64)
}

// BenchmarkIdleConnections holds idle WebSocket connections (20,000, or as
// many as the open file limit allows) in the gateway and reports the
// gateway process's memory per connection: connected only, and connected
// with one live subscription each; and as many Server-Sent Events streams
// (always subscribed).
func BenchmarkIdleConnections(b *testing.B) {
	for _, mode := range []struct {
		name, sub, local string
		sse              bool
	}{
		{"connected", benchSubNone, "127.0.0.2", false},
		{"subscribed", benchSubOwn, "127.0.0.3", false},
		{"sse-subscribed", benchSubOwn, "127.0.0.9", true},
	} {
		b.Run(mode.name, func(b *testing.B) {
			ctx := testenv.Context(b, 10*time.Minute)
			soft, hard := raiseFileLimit()
			load := startBenchLoad(b, mode.local)
			reg, url := benchGateway(b, ctx, load.brokers, "bench.idle."+mode.name)
			n := benchConns(b, 20_000)
			b.Logf("open file limit %d (hard %d), %d open: %d connections", soft, hard, openFiles(), n)
			before := sampleMemory(true)
			b.ResetTimer()
			began := time.Now()
			if err := load.connect(url, n, mode.sub, mode.sse); err != nil {
				b.Fatal(err)
			}
			connected := time.Since(began)
			b.StopTimer()
			time.Sleep(5 * time.Second) // let the handshakes' garbage age
			raw := sampleMemory(false)
			after := sampleMemory(true)
			if path := os.Getenv("TURNPIKE_PUSHGW_BENCH_HEAP"); path != "" { // a heap profile with the connections up
				writeHeapProfile(b, path+"."+mode.name)
			}
			conns := metricValueB(b, reg, "turnpike_pushgw_connections")
			per := func(a, z int64) float64 { return float64(z-a) / float64(n) }
			b.ReportMetric(float64(n), "conns")
			b.ReportMetric(per(before.rss, raw.rss), "rss-B/conn")
			b.ReportMetric(per(before.rss, after.rss), "rss-after-gc-B/conn")
			b.ReportMetric(per(before.heapInuse+before.stackInuse, after.heapInuse+after.stackInuse), "heap+stack-B/conn")
			b.Logf("%s: %d connections (the gateway counts %v) in %v", mode.name, n, conns, connected.Round(time.Millisecond))
			b.Logf("RSS %.1f MiB before, %.1f MiB after (%.1f MiB after GC): %.0f B per connection (%.0f after GC)",
				mib(before.rss), mib(raw.rss), mib(after.rss), per(before.rss, raw.rss), per(before.rss, after.rss))
			b.Logf("heap in use %.1f → %.1f MiB, stacks %.1f → %.1f MiB, goroutines %d → %d",
				mib(before.heapInuse), mib(after.heapInuse), mib(before.stackInuse), mib(after.stackInuse), before.goroutines, after.goroutines)
		})
	}
}

func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func metricValueB(b *testing.B, reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return math.NaN()
}

// histogramQuantile estimates quantile q of a registered histogram: the
// upper bound of the bucket holding it.
func histogramQuantile(b *testing.B, reg *prometheus.Registry, name string, q float64) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		rank := q * float64(h.GetSampleCount())
		for _, bk := range h.GetBucket() {
			if float64(bk.GetCumulativeCount()) >= rank {
				return bk.GetUpperBound()
			}
		}
		return math.Inf(1)
	}
	return math.NaN()
}

// cpuTime returns the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// openEveryPartition opens every partition's live reader of the gateway at
// url with one idle subscription each (a conversation nobody writes to),
// and checks that all are open. The connections last as long as b.
func openEveryPartition(b *testing.B, ctx context.Context, reg *prometheus.Registry, url string) {
	b.Helper()
	ids := make([]int, topic.DefaultPartitions)
	for i := range ids {
		ids[i] = i
	}
	tok := token(b, auth.DefaultTenant, "bench-reader")
	for p := range ids {
		conv := ""
		for i := 0; conv == ""; i++ {
			c := fmt.Sprintf("idle-%d-%d", p, i)
			key := events.Identity{Tenant: auth.DefaultTenant, User: "bench-reader", Conversation: c}.Key()
			if (kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: []byte(key)}, ids...) == p {
				conv = c
			}
		}
		conn, _, err := websocket.DefaultDialer.DialContext(ctx, url, http.Header{"Authorization": {"Bearer " + tok}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		c := &wsClient{t: b, conn: conn}
		c.subscribed(ctx, conv, "")
	}
	if n := testenv.MetricValue(b, reg, "turnpike_pushgw_live_readers"); n != float64(len(ids)) {
		b.Fatalf("%v live readers open, want all %d partitions", n, len(ids))
	}
}

// BenchmarkStreamReadCost measures what one replica spends reading the
// whole stream topic while none of the events is for its clients: every
// partition is open (one idle subscription each), as on a replica behind a
// load balancer that spreads connections at random. A replica with no
// subscriber at all reads nothing (readers on demand).
func BenchmarkStreamReadCost(b *testing.B) {
	for _, rate := range []int{1000, 5000, 20000} {
		b.Run(strconv.Itoa(rate)+"ev/s", func(b *testing.B) {
			ctx := testenv.Context(b, 10*time.Minute)
			load := startBenchLoad(b, "127.0.0.7")
			topicName := "bench.read." + strconv.Itoa(rate)
			reg, url := benchGateway(b, ctx, load.brokers, topicName)
			openEveryPartition(b, ctx, reg, url)
			if err := load.connect("ws://127.0.0.1:1/unused", 0, benchSubNone, false); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			cpu0 := cpuTime()
			sent, took, err := load.produce(topicName, rate, 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			time.Sleep(time.Second)
			cpu := cpuTime() - cpu0
			b.StopTimer()
			cores := cpu.Seconds() / (took + time.Second).Seconds()
			b.ReportMetric(float64(sent)/took.Seconds(), "events/s")
			b.ReportMetric(cores, "gateway-cores")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(sent), "cpu-ns/event")
			b.Logf("%d events at %.0f/s, every partition open, no recipient: gateway CPU %.2f s, %.1f%% of a core, %.1f µs per event",
				sent, float64(sent)/took.Seconds(), cpu.Seconds(), 100*cores, float64(cpu.Microseconds())/float64(sent))
		})
	}
}

// BenchmarkFanoutLatency connects 5,000 subscribed clients (WebSockets, or
// Server-Sent Events streams for the sse- cases) and streams
// token events to them through Kafka at a fixed rate, measuring each
// event's latency from its ts (stamped just before the produce call) to its
// arrival at the client: the producer's batching, the broker, the
// gateway's fetch and fan-out, and the client's read.
func BenchmarkFanoutLatency(b *testing.B) {
	for _, tc := range []struct {
		name  string
		sub   string
		rate  int // events per second produced
		local string
		sse   bool
	}{
		{"own-conversation-1000ev/s", benchSubOwn, 1000, "127.0.0.4", false},
		{"own-conversation-5000ev/s", benchSubOwn, 5000, "127.0.0.5", false},
		{"one-conversation-10ev/s", benchSubShared, 10, "127.0.0.6", false},
		{"sse-own-conversation-1000ev/s", benchSubOwn, 1000, "127.0.0.10", true},
		{"sse-own-conversation-5000ev/s", benchSubOwn, 5000, "127.0.0.11", true},
		{"sse-one-conversation-10ev/s", benchSubShared, 10, "127.0.0.12", true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := testenv.Context(b, 10*time.Minute)
			raiseFileLimit()
			load := startBenchLoad(b, tc.local)
			topicName := "bench.fanout." + tc.sub + strconv.Itoa(tc.rate)
			reg, url := benchGateway(b, ctx, load.brokers, topicName)
			n := benchConns(b, 5_000)
			if err := load.connect(url, n, tc.sub, tc.sse); err != nil {
				b.Fatal(err)
			}
			if _, _, err := load.produce(topicName, tc.rate, 2*time.Second); err != nil { // warm-up
				b.Fatal(err)
			}
			time.Sleep(500 * time.Millisecond)
			if _, err := load.report(); err != nil { // drops the warm-up
				b.Fatal(err)
			}
			b.ResetTimer()
			cpu0 := cpuTime()
			sent, took, err := load.produce(topicName, tc.rate, 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			time.Sleep(time.Second) // the last events arrive
			cpu := cpuTime() - cpu0
			b.StopTimer()
			r, err := load.report()
			if err != nil {
				b.Fatal(err)
			}
			expected := sent
			if tc.sub == benchSubShared {
				expected = sent * n
			}
			b.ReportMetric(float64(sent)/took.Seconds(), "events/s")
			b.ReportMetric(float64(expected)/took.Seconds(), "frames/s")
			b.ReportMetric(r.P50us, "p50-µs")
			b.ReportMetric(r.P99us, "p99-µs")
			b.ReportMetric(r.MaxUs, "max-µs")
			b.ReportMetric(cpu.Seconds()/(took+time.Second).Seconds(), "gateway-cores")
			b.Logf("gateway CPU %.2f s over %.1f s: %.1f%% of a core", cpu.Seconds(), (took + time.Second).Seconds(), 100*cpu.Seconds()/(took+time.Second).Seconds())
			b.Logf("%d clients (%s): %d events in %v (%.0f/s), %d frames expected, %d received, %d clients closed",
				n, tc.sub, sent, took.Round(time.Millisecond), float64(sent)/took.Seconds(), expected, r.Received, r.Closed)
			b.Logf("latency ts→client: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, p99.9 %.2f ms, max %.2f ms",
				r.P50us/1e3, r.P90us/1e3, r.P99us/1e3, r.P999us/1e3, r.MaxUs/1e3)
			b.Logf("gateway fan-out (record → queued to all its recipients) p50 ≤ %.0f µs, p99 ≤ %.0f µs; Kafka timestamp → queued p50 ≤ %.1f ms, p99 ≤ %.1f ms; slow disconnects %v",
				histogramQuantile(b, reg, "turnpike_pushgw_fanout_seconds", 0.5)*1e6,
				histogramQuantile(b, reg, "turnpike_pushgw_fanout_seconds", 0.99)*1e6,
				histogramQuantile(b, reg, "turnpike_pushgw_delivery_lag_seconds", 0.5)*1e3,
				histogramQuantile(b, reg, "turnpike_pushgw_delivery_lag_seconds", 0.99)*1e3,
				metricValueB(b, reg, "turnpike_pushgw_slow_disconnects_total"))
		})
	}
}

// BenchmarkResume measures one resume of 1,000 events: a client that missed
// 1,000 events of its conversation, written among 10,000 events of 97 other
// conversations, connects, subscribes since its cursor and reads the 1,000
// events. From the ring, and from Kafka (ring disabled). The broker runs in
// the load process.
func BenchmarkResume(b *testing.B) {
	for _, tc := range []struct {
		name string
		ring int
	}{{"ring", DefaultRingBytes}, {"kafka", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := testenv.Context(b, 10*time.Minute)
			load := startBenchLoad(b, "127.0.0.8")
			topicName := "bench.resume." + tc.name
			if err := topic.Ensure(ctx, load.brokers, topic.DefaultPartitions, topicName); err != nil {
				b.Fatal(err)
			}
			v, err := auth.NewVerifier(testSecret, nil)
			if err != nil {
				b.Fatal(err)
			}
			gw, err := newGateway(Config{Brokers: load.brokers, Topic: topicName, RingBytes: tc.ring, ConnectPerMinute: -1, SubscribePerMinute: -1}, v, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			defer stop()
			go func() { _ = gw.Run(runCtx) }()
			srv := httptest.NewServer(gw)
			defer srv.Close()
			for gw.Ready(ctx) != nil {
				time.Sleep(10 * time.Millisecond)
			}
			// 1,000 events of alice's conversation among 10,000 of others.
			w := topic.StreamWriter(load.brokers, topicName, time.Millisecond)
			defer w.Close()
			alice := events.Identity{Tenant: auth.DefaultTenant, User: "alice", Conversation: "c"}
			var msgs []kafka.Message
			for i := range 11_000 {
				id := alice
				if i%11 != 0 {
					id = events.Identity{Tenant: auth.DefaultTenant, User: "u" + strconv.Itoa(i%97), Conversation: "c"}
				}
				msgs = append(msgs, kafka.Message{Key: []byte(id.Key()), Value: event(id.Conversation, "r", i+1)})
			}
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				b.Fatal(err)
			}
			url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/stream"
			tok, _ := auth.Mint(testSecret, alice.Tenant, alice.User, time.Hour, time.Now())
			dial := func() *websocket.Conn {
				conn, _, err := websocket.DefaultDialer.DialContext(ctx, url, http.Header{"Authorization": {"Bearer " + tok}})
				if err != nil {
					b.Fatal(err)
				}
				return conn
			}
			// The cursor before alice's first event: a live subscriber's view.
			first := dial()
			if err := first.WriteMessage(websocket.TextMessage, []byte(`{"op":"subscribe","conversation":"c","since":"earliest"}`)); err != nil {
				b.Fatal(err)
			}
			var cursor string
			for n := 0; n < 2; {
				_, data, err := first.ReadMessage()
				if err != nil {
					b.Fatal(err)
				}
				var fr frame
				_ = json.Unmarshal(data, &fr)
				if fr.Cursor != "" {
					cursor = fr.Cursor
					n++
				} else if fr.Type == "subscribed" {
					n++
				}
			}
			first.Close()
			p, o, _ := ParseCursor(cursor)
			since := "earliest"
			if o > 0 {
				since = FormatCursor(p, o-1)
			}
			end, err := gw.endOffset(ctx, p)
			if err != nil {
				b.Fatal(err)
			}
			for !gw.hub.dispatched(p, end-1) { // the ring has it all
				time.Sleep(10 * time.Millisecond)
			}
			b.ResetTimer()
			for range b.N {
				conn := dial()
				if err := conn.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, `{"op":"subscribe","conversation":"c","since":%q}`, since)); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < 1001; got++ { // subscribed + 1,000 events
					if _, _, err := conn.ReadMessage(); err != nil {
						b.Fatal(err)
					}
				}
				conn.Close()
			}
		})
	}
}
