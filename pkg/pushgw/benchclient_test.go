package pushgw

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// The benchmarks of bench_test.go run the gateway alone in the test
// process. Everything else runs in a second process, the "load" process:
// the test binary run again with benchLoadEnv set (TestMain hands it to
// runBenchLoad). It holds the broker (an embedded one, or
// TURNPIKE_KAFKA_BROKERS), the producer and the WebSocket clients, so that
// none of their memory, CPU or garbage collections count as the gateway's.
//
// The two talk over the load process's stdin and stdout, a line each:
//
//	load → gateway   "broker <addr>"                  at start
//	gateway → load   "connect <url> <n> <sub> [sse]"  n clients; sub: none, own (a conversation each) or shared (all one);
//	                                                  with sse, Server-Sent Events streams of the gateway at url (its HTTP base)
//	load → gateway   "ready"                          every client is up (and subscribed)
//	gateway → load   "produce <topic> <rate> <dur>"   token events at rate per second for dur, to the clients' conversations (or 1,000 without clients)
//	load → gateway   "produced <events> <seconds>"
//	gateway → load   "report"                         the load answers with a JSON benchReport line and starts over
//	gateway → load   "exit"                           the load closes everything and exits
//
// The load dials from the loopback address benchLocalEnv names, so that
// benchmarks run one after another do not run out of ephemeral ports.
const (
	benchLoadEnv  = "TURNPIKE_PUSHGW_BENCH_LOAD"
	benchLocalEnv = "TURNPIKE_PUSHGW_BENCH_LOCAL"
)

// Subscription modes of the load's clients.
const (
	benchSubNone   = "none"
	benchSubOwn    = "own"
	benchSubShared = "shared"
)

// benchSharedUser is the user of every client in mode shared.
const benchSharedUser = "broadcast"

// benchIdentity is the identity client i subscribes to.
func benchIdentity(i int, sub string) events.Identity {
	if sub == benchSubShared {
		return events.Identity{Tenant: auth.DefaultTenant, User: benchSharedUser, Conversation: "bench-0"}
	}
	return events.Identity{Tenant: auth.DefaultTenant, User: "user-" + strconv.Itoa(i), Conversation: "bench-" + strconv.Itoa(i)}
}

// benchReport is what the load measured since the last report: event
// frames received and their latency from the event's ts (stamped just
// before the produce call) to their arrival.
type benchReport struct {
	Received int64   `json:"received"`
	Closed   int64   `json:"closed"` // clients the gateway closed
	P50us    float64 `json:"p50_us"`
	P90us    float64 `json:"p90_us"`
	P99us    float64 `json:"p99_us"`
	P999us   float64 `json:"p999_us"`
	MaxUs    float64 `json:"max_us"`
}

// benchLoad is the state of the load process.
type benchLoad struct {
	brokers []string
	local   *net.TCPAddr
	n       int
	sub     string

	received atomic.Int64
	closed   atomic.Int64
	mu       sync.Mutex
	// Guarded by mu.
	latencies []int64 // nanoseconds

	conns   []io.Closer // WebSockets, or Server-Sent Events bodies
	readers sync.WaitGroup
}

// runBenchLoad is the load process.
func runBenchLoad() int {
	raiseFileLimit()
	l := &benchLoad{local: &net.TCPAddr{IP: net.ParseIP(os.Getenv(benchLocalEnv))}}
	if v := os.Getenv("TURNPIKE_KAFKA_BROKERS"); v != "" {
		l.brokers = strings.Split(v, ",")
	} else {
		k, err := embedded.StartKafka(embedded.KafkaConfig{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench load: broker:", err)
			return 1
		}
		defer k.Close()
		l.brokers = []string{k.Addr()}
	}
	fmt.Printf("broker %s\n", strings.Join(l.brokers, ","))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		var err error
		switch f[0] {
		case "connect":
			err = l.connect(f[1:])
		case "produce":
			err = l.produce(f[1:])
		case "report":
			err = l.report()
		case "exit":
			for _, c := range l.conns {
				_ = c.Close()
			}
			l.readers.Wait()
			return 0
		default:
			err = fmt.Errorf("unknown command %q", f[0])
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench load:", err)
			return 1
		}
	}
	return 0
}

// connect opens the clients: connect <url> <n> <sub> [sse].
func (l *benchLoad) connect(args []string) error {
	if len(args) != 3 && (len(args) != 4 || args[3] != "sse") {
		return fmt.Errorf("connect: %q", args)
	}
	url, sub := args[0], args[2]
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	l.n, l.sub = n, sub
	if len(args) == 4 {
		return l.connectSSE(url, n, sub)
	}
	dialer := websocket.Dialer{
		NetDialContext:   (&net.Dialer{LocalAddr: l.local}).DialContext,
		ReadBufferSize:   1 << 10,
		WriteBufferSize:  1 << 10,
		WriteBufferPool:  &sync.Pool{},
		HandshakeTimeout: 30 * time.Second,
	}
	var ready sync.WaitGroup
	ready.Add(n)
	sem := make(chan struct{}, 64)
	for i := range n {
		id := benchIdentity(i, sub)
		tok, err := auth.Mint(testSecret, id.Tenant, id.User, 24*time.Hour, time.Now())
		if err != nil {
			return err
		}
		sem <- struct{}{}
		var conn *websocket.Conn
		for attempt := 0; ; attempt++ {
			conn, _, err = dialer.DialContext(context.Background(), url, http.Header{"Authorization": {"Bearer " + tok}})
			if err == nil || attempt == 5 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		<-sem
		if err != nil {
			return fmt.Errorf("dial %d: %w", i, err)
		}
		l.conns = append(l.conns, conn)
		subscribed := sub == benchSubNone
		if subscribed {
			ready.Done()
		} else if err := conn.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, `{"op":"subscribe","conversation":%q}`, id.Conversation)); err != nil {
			return fmt.Errorf("subscribe %d: %w", i, err)
		}
		l.readers.Go(func() { l.read(conn, subscribed, &ready) })
	}
	ready.Wait()
	fmt.Println("ready")
	return nil
}

// connectSSE opens n Server-Sent Events streams of the gateway at base,
// each of its own conversation (or all of one).
func (l *benchLoad) connectSSE(base string, n int, sub string) error {
	if sub == benchSubNone {
		return fmt.Errorf("connect: an event stream is always subscribed")
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext:     (&net.Dialer{LocalAddr: l.local}).DialContext,
		ReadBufferSize:  1 << 10,
		WriteBufferSize: 1 << 10,
	}}
	var ready sync.WaitGroup
	ready.Add(n)
	for i := range n {
		id := benchIdentity(i, sub)
		tok, err := auth.Mint(testSecret, id.Tenant, id.User, 24*time.Hour, time.Now())
		if err != nil {
			return err
		}
		var resp *http.Response
		for attempt := 0; ; attempt++ {
			req, _ := http.NewRequest(http.MethodGet, base+"/v1/conversations/"+id.Conversation+"/events", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			if resp, err = hc.Do(req); err == nil && resp.StatusCode != http.StatusOK {
				resp.Body.Close()
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
			if err == nil || attempt == 5 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("events %d: %w", i, err)
		}
		l.conns = append(l.conns, resp.Body)
		l.readers.Go(func() { l.readSSE(resp.Body, &ready) })
	}
	ready.Wait()
	fmt.Println("ready")
	return nil
}

// readSSE reads one event stream's data lines and records each event's
// latency.
func (l *benchLoad) readSSE(body io.Reader, ready *sync.WaitGroup) {
	br := bufio.NewReaderSize(body, 1<<10)
	subscribed := false
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			continue // not a token event's
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				l.closed.Add(1) // the gateway ended the stream
			}
			if !subscribed {
				ready.Done()
			}
			return
		}
		now := time.Now().UnixNano()
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		if !subscribed {
			if subscribed = bytes.Contains(data, []byte(`"subscribed"`)); subscribed {
				ready.Done()
			}
			continue
		}
		l.record(data, now)
	}
}

// read reads one client's frames (gorilla answers pings meanwhile) and
// records each event's latency.
func (l *benchLoad) read(conn *websocket.Conn, subscribed bool, ready *sync.WaitGroup) {
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			if _, ok := err.(*websocket.CloseError); ok {
				l.closed.Add(1)
			}
			if !subscribed {
				ready.Done()
			}
			return
		}
		now := time.Now().UnixNano()
		if !subscribed {
			if subscribed = bytes.Contains(data, []byte(`"subscribed"`)); subscribed {
				ready.Done()
			}
			continue
		}
		l.record(data, now)
	}
}

// record records the latency of an event frame that arrived at now.
func (l *benchLoad) record(frame []byte, now int64) {
	if ts, ok := frameTS(frame); ok {
		l.received.Add(1)
		l.mu.Lock()
		l.latencies = append(l.latencies, now-ts)
		l.mu.Unlock()
	}
}

// produce writes token events: produce <topic> <rate> <duration>, round
// robin over the clients' conversations, with the worker's stream writer.
func (l *benchLoad) produce(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("produce: %q", args)
	}
	rate, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	d, err := time.ParseDuration(args[2])
	if err != nil {
		return err
	}
	w := topic.StreamWriter(l.brokers, args[0], 2*time.Millisecond)
	defer w.Close()
	tick, perTick := 10*time.Millisecond, max(1, rate/100)
	if rate < 100 {
		tick, perTick = time.Second/time.Duration(rate), 1
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	spread := l.n // conversations written to
	if spread == 0 {
		spread = 1000
	}
	sent, next, began := 0, 0, time.Now()
	for time.Since(began) < d {
		<-t.C
		msgs := make([]kafka.Message, perTick)
		for i := range msgs {
			id := benchIdentity(next%spread, l.sub)
			next++
			msgs[i] = kafka.Message{Key: []byte(id.Key()), Value: events.MarshalEvent(&events.TokenEvent{
				Meta:  events.Meta{Conversation: id.Conversation, RequestID: "r-bench", RunID: "u-bench", Seq: int64(next), TS: time.Now().UnixNano()},
				Delta: "token" + strconv.Itoa(next) + " ", Agent: "echo", Role: "assistant"})}
		}
		if err := w.WriteMessages(context.Background(), msgs...); err != nil {
			return err
		}
		sent += len(msgs)
	}
	fmt.Printf("produced %d %f\n", sent, time.Since(began).Seconds())
	return nil
}

// report prints what was measured since the last report and starts over.
func (l *benchLoad) report() error {
	l.mu.Lock()
	r := summarize(l.latencies)
	l.latencies = l.latencies[:0]
	l.mu.Unlock()
	r.Received, r.Closed = l.received.Swap(0), l.closed.Load()
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	fmt.Printf("%s\n", b)
	return nil
}

// frameTS returns the ts member of an event frame.
func frameTS(frame []byte) (int64, bool) {
	i := bytes.Index(frame, []byte(`"ts":`))
	if i < 0 {
		return 0, false
	}
	var ts int64
	digits := 0
	for _, c := range frame[i+5:] {
		if c < '0' || c > '9' {
			break
		}
		ts = ts*10 + int64(c-'0')
		digits++
	}
	return ts, digits > 0
}

// summarize returns the percentiles of latencies (nanoseconds).
func summarize(latencies []int64) benchReport {
	if len(latencies) == 0 {
		return benchReport{}
	}
	slices.Sort(latencies)
	at := func(q float64) float64 {
		return float64(latencies[min(len(latencies)-1, int(q*float64(len(latencies))))]) / 1e3
	}
	return benchReport{P50us: at(0.50), P90us: at(0.90), P99us: at(0.99), P999us: at(0.999), MaxUs: at(1)}
}

// raiseFileLimit raises this process's open file limit to its hard limit.
func raiseFileLimit() (soft, hard uint64) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, 0
	}
	l.Cur = l.Max
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
	return l.Cur, l.Max
}
