package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The fault tests' processes are the test binary itself (see TestMain),
// each serving on a loopback listener its parent opened on a random port
// and passed down as a descriptor: no process picks a port of its own, so
// nothing is fixed, nothing is shared with other runs on the machine, and
// a listener the parent keeps (ingest's, the gateway's) survives restarts
// of the processes serving on it.

const (
	// envListener tells a service process that its listener is descriptor
	// listenerFD (the first of exec.Cmd.ExtraFiles).
	envListener = "TURNPIKE_TEST_LISTENER_FD"
	listenerFD  = 3
)

// inheritedListener returns the listener the parent process passed, or nil.
func inheritedListener() (net.Listener, error) {
	if os.Getenv(envListener) != strconv.Itoa(listenerFD) {
		return nil, nil
	}
	f := os.NewFile(listenerFD, "listener")
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("inherited listener: %w", err)
	}
	return ln, nil
}

// loopback opens a listener on a random loopback port.
func loopback(t *testing.T) *net.TCPListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln.(*net.TCPListener)
}

// hermeticEnviron is this process's environment without any TURNPIKE_
// setting, so that a child runs on exactly the settings the test gives it.
func hermeticEnviron() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TURNPIKE_") {
			out = append(out, kv)
		}
	}
	return out
}

// startProcess runs role as a child process on env, serving on ln.
func startProcess(role string, env []string, ln *net.TCPListener) (*exec.Cmd, error) {
	f, err := ln.File()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(hermeticEnviron(), "TURNPIKE_TEST_RUN_SERVICE="+role, envListener+"="+strconv.Itoa(listenerFD)), env...)
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", role, err)
	}
	return cmd, nil
}

// metricSet is a scrape of /metrics: the values of each metric's series.
type metricSet map[string][]float64

// sum adds up the series of name.
func (m metricSet) sum(name string) float64 {
	var s float64
	for _, v := range m[name] {
		s += v
	}
	return s
}

// scrape reads the Prometheus text exposition at http://addr/metrics.
func scrape(ctx context.Context, addr string) (metricSet, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

func parseMetrics(r io.Reader) (metricSet, error) {
	m := metricSet{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		m[name] = append(m[name], v)
	}
	return m, sc.Err()
}

// Worker metrics the fault tests read.
const (
	metricLag      = "turnpike_worker_consumer_lag" // one series per partition consumed
	metricRunning  = "turnpike_worker_running_runs"
	metricInflight = "turnpike_worker_inflight_records"
	metricRetries  = "turnpike_worker_retries_total"
	metricDups     = "turnpike_worker_duplicates_total"
	metricRecords  = "turnpike_worker_records_total"
)

// tcpProxy forwards connections from a listener the test holds for its
// whole length to a target that may move (a store restarted on a new
// random port), so clients keep one address across restarts. Each new
// connection is held delay before it is forwarded (so that events pile up
// while a client reconnects).
type tcpProxy struct {
	ln    net.Listener
	delay time.Duration
	wg    sync.WaitGroup

	mu     sync.Mutex // guards target, down and conns
	target string
	down   bool // refuse connections: the target is unreachable
	conns  map[net.Conn]struct{}
}

func newTCPProxy(t *testing.T, target string, delay time.Duration) *tcpProxy {
	t.Helper()
	p := &tcpProxy{ln: loopback(t), delay: delay, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		p.ln.Close()
		p.cut() // and a connection still on its way in is not forwarded
		p.wg.Wait()
	})
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

// retarget sends new connections to target, and accepts them again
// after cut.
func (p *tcpProxy) retarget(target string) {
	p.mu.Lock()
	p.target, p.down = target, false
	p.mu.Unlock()
}

// cut breaks every forwarded connection at once and refuses new ones until
// retarget.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
	p.drop()
}

// drop breaks every forwarded connection, as a network failure would; new
// connections are forwarded again.
func (p *tcpProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// track adds c and b to the connections drop breaks, unless the proxy
// was cut since forward looked: then there is nothing to forward.
func (p *tcpProxy) track(c, b net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	p.conns[c], p.conns[b] = struct{}{}, struct{}{}
	return true
}

func (p *tcpProxy) untrack(c, b net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	delete(p.conns, b)
}

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.forward(c)
		}()
	}
}

func (p *tcpProxy) forward(c net.Conn) {
	defer c.Close()
	time.Sleep(p.delay)
	p.mu.Lock()
	target, down := p.target, p.down
	p.mu.Unlock()
	if down {
		return
	}
	b, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		return // the target is down: the client sees its connection close
	}
	defer b.Close()
	if !p.track(c, b) {
		return
	}
	defer p.untrack(c, b)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, c); b.Close(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, b); c.Close(); done <- struct{}{} }()
	<-done
	<-done
}
