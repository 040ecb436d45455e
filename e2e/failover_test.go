package e2e

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/pushgw"
)

// shardEdge is the edge of deploy/k8s/base/edge.yaml in a few lines: a
// reverse proxy that routes each request by its ?shard= hint with
// consistent hashing over the push gateway replicas (nginx's `hash $arg_shard
// consistent`, ketama on CRC32), and, like nginx's proxy_next_upstream, tries
// the next replica on the ring when one refuses the connection. A request
// without the hint hashes the empty string.
type shardEdge struct {
	t        *testing.T
	srv      *http.Server
	ln       net.Listener
	ring     []edgePoint // sorted by hash
	hinted   atomic.Int64
	mu       sync.Mutex
	upgrades map[string]int // backend -> connections proxied to it
	gate     chan struct{}  // dials wait until it is closed
}

type edgePoint struct {
	hash    uint32
	backend string
}

// edgeVirtualNodes is the points each backend has on the ring (nginx: 160).
const edgeVirtualNodes = 160

func newShardEdge(t *testing.T, backends []string) *shardEdge {
	t.Helper()
	e := &shardEdge{t: t, ln: loopback(t), upgrades: map[string]int{}, gate: make(chan struct{})}
	close(e.gate)
	for _, b := range backends {
		for i := range edgeVirtualNodes {
			e.ring = append(e.ring, edgePoint{crc32.ChecksumIEEE([]byte(b + "-" + strconv.Itoa(i))), b})
		}
	}
	slices.SortFunc(e.ring, func(a, b edgePoint) int { return int(int64(a.hash) - int64(b.hash)) })
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			shard := pr.In.URL.Query().Get("shard")
			if shard != "" {
				e.hinted.Add(1)
			}
			// The dialer below picks the replica from this host name.
			pr.SetURL(&url.URL{Scheme: "http", Host: "shard-" + url.PathEscape(shard) + ".edge"})
			pr.Out.Host = pr.In.Host
		},
		Transport: &http.Transport{DialContext: e.dial, DisableKeepAlives: true},
	}
	e.srv = &http.Server{Handler: proxy}
	go func() { _ = e.srv.Serve(e.ln) }()
	t.Cleanup(func() { _ = e.srv.Close() })
	return e
}

func (e *shardEdge) addr() string { return e.ln.Addr().String() }

// hold makes new connections wait until release.
func (e *shardEdge) hold() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gate = make(chan struct{})
}

func (e *shardEdge) release() {
	e.mu.Lock()
	defer e.mu.Unlock()
	close(e.gate)
}

// order is the replicas in ring order from key's hash: its owner first.
func (e *shardEdge) order(key string) []string {
	h := crc32.ChecksumIEEE([]byte(key))
	i, _ := slices.BinarySearchFunc(e.ring, h, func(p edgePoint, h uint32) int { return int(int64(p.hash) - int64(h)) })
	var out []string
	for n := range e.ring {
		b := e.ring[(i+n)%len(e.ring)].backend
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out
}

// dial connects to the first replica of the shard's ring order that
// accepts.
func (e *shardEdge) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, _ := net.SplitHostPort(addr)
	shard, _ := url.PathUnescape(strings.TrimSuffix(strings.TrimPrefix(host, "shard-"), ".edge"))
	e.mu.Lock()
	gate := e.gate
	e.mu.Unlock()
	select {
	case <-gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var errs []error
	for _, b := range e.order(shard) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, b)
		if err == nil {
			e.mu.Lock()
			e.upgrades[b]++
			e.mu.Unlock()
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// gatewayProc is a push gateway replica running as a process.
type gatewayProc struct {
	cmd  *exec.Cmd
	addr string
}

// startGateway runs a push gateway process on a listener of its own (this
// process keeps no copy, so once the replica is killed its address
// refuses connections) and waits until it is ready.
func startGateway(t *testing.T, ctx context.Context, env []string) *gatewayProc {
	t.Helper()
	ln := loopback(t)
	cmd, err := startProcess("pushgw", env, ln)
	addr := ln.Addr().String()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	g := &gatewayProc{cmd: cmd, addr: addr}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	poll(t, ctx, "push gateway "+addr+" ready", func() (bool, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		if err != nil {
			return false, err.Error()
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return g
}

// followed is what one client received of its conversation.
type followed struct {
	cursors []string
	answers map[string]string // request id -> text, from client.Transcript
}

// followAnswers is one chat user behind the edge: it subscribes live, then
// sends each message after the previous answer completed, keeping every
// event's cursor; midAnswer is called at each token of message 2.
func followAnswers(ctx context.Context, c *client.Client, l load, i int, midAnswer func()) (followed, error) {
	out := followed{answers: map[string]string{}}
	conv := l.id(i).Conversation
	sub, err := c.Subscribe(ctx, conv, client.SubscribeOptions{MaxBackoff: 500 * time.Millisecond})
	if err != nil {
		return out, err
	}
	defer sub.Close()
	var tr client.Transcript
	for j := 1; j <= l.msgs; j++ {
		var requestID string
		for {
			a, err := c.Send(ctx, conv, l.content(j), client.SendOptions{IdempotencyKey: fmt.Sprintf("c%d-m%d", i, j)})
			if err == nil {
				requestID = a.RequestID
				break
			}
			if ctx.Err() != nil {
				return out, fmt.Errorf("%s m%d never accepted: %w", conv, j, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		for {
			e, err := sub.Next(ctx)
			if err != nil {
				return out, fmt.Errorf("%s m%d after %d events: %w", conv, j, len(out.cursors), err)
			}
			out.cursors = append(out.cursors, e.Header().Cursor)
			r := tr.Apply(e)
			if _, ok := e.(*events.TokenEvent); ok && j == 2 && r.RequestID == requestID {
				midAnswer()
			}
			if done, ok := e.(*events.RunCompletedEvent); ok && done.RequestID == requestID {
				if done.Status != events.StatusComplete {
					return out, fmt.Errorf("%s m%d completed %s", conv, j, done.Status)
				}
				break
			}
		}
	}
	for _, r := range tr.Runs() {
		out.answers[r.RequestID] = r.Text
	}
	return out, nil
}

// TestAPushGatewayReplicaKilledWithSIGKILLMidAnswerLosesAndRepeatsNothing:
// docs/pushgw.md "Routing by shard" (a replica removed: its clients
// reconnect through the edge to the shard's next replica and resume from
// their cursors) and docs/api.md "Cursors". Two push gateway processes sit
// behind an edge routing by the shard hint with consistent hashing. The
// clients' first connections carry no hint yet and all reach one replica;
// it is killed with SIGKILL while they receive an answer. Each client
// reconnects through the edge, now with its shard hint, reaches the other
// replica (which opens the partitions at their end and replays from Kafka)
// and resumes from its cursor. Every client received exactly the stream
// records of its conversation, each once, in offset order (no gap, no
// duplicate), and every answer whole: the text history persisted.
func TestAPushGatewayReplicaKilledWithSIGKILLMidAnswerLosesAndRepeatsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a push gateway process")
	}
	ctx := testenv.Context(t, 3*time.Minute)
	f := newFaultStack(t)
	const secret = "failover-test-secret-of-32-bytes-or-more"
	sp := &serviceProcs{t: t, f: f, procs: map[string]*exec.Cmd{}, ops: map[string]string{},
		lns: map[string]*net.TCPListener{"ingest": loopback(t)}}
	sp.env = []string{"TURNPIKE_AUTH_SECRET=" + secret, "TURNPIKE_RATE_PER_SECOND=-1"}
	t.Cleanup(sp.stopAll)
	sp.start("worker")
	sp.start("ingest")
	env := append(slices.Clip(f.env), sp.env...)
	gws := []*gatewayProc{startGateway(t, ctx, env), startGateway(t, ctx, env)}
	edge := newShardEdge(t, []string{gws[0].addr, gws[1].addr})
	victim := edge.order("")[0] // where connections without a hint go
	var survivor *gatewayProc
	var killed *gatewayProc
	for _, g := range gws {
		if g.addr == victim {
			killed = g
		} else {
			survivor = g
		}
	}

	// Five tokens 300 ms apart: an answer streams for more than a second.
	// Each conversation has a partition of its own, so the record after a
	// cursor is always the conversation's own.
	l := load{convs: faultPartitions, msgs: 3, extra: "[[delay:300ms]]"}
	for n := 0; ; n++ {
		l.user = fmt.Sprintf("failover%d", n)
		homes := map[int]bool{}
		for i := 1; i <= l.convs; i++ {
			homes[topic.Home([]byte(l.id(i).Key()), faultPartitions)] = true
		}
		if len(homes) == l.convs {
			break
		}
	}
	tok, err := auth.Mint(secret, "acme", l.user, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := &client.Client{BaseURL: "http://" + sp.addr("ingest"), StreamURL: "ws://" + edge.addr() + "/v1/stream", Token: tok}

	mid := make(chan int, l.convs)
	var wg sync.WaitGroup
	got := make([]followed, l.convs+1)
	errs := make(chan error, l.convs)
	for i := 1; i <= l.convs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			got[i], err = followAnswers(ctx, c, l, i, func() {
				select {
				case mid <- i:
				default:
				}
			})
			if err != nil {
				errs <- err
			}
		}()
	}
	var midConv int
	select {
	case midConv = <-mid:
	case <-ctx.Done():
		t.Fatal("no client received a token of its second answer")
	}
	// The clients' reconnections wait at the edge until the answers in
	// flight are over, so that each resumes with the rest of its answer
	// behind its cursor (a resume at the end of its partition would read
	// nothing back and prove nothing).
	edge.hold()
	if err := killed.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = killed.cmd.Wait() // "signal: killed"
	t.Logf("push gateway %s killed with SIGKILL while c%d received its second answer; %s survives", killed.addr, midConv, survivor.addr)
	streamTopic := topic.NewNames(f.prefix).Stream
	midPartition := topic.Home([]byte(l.id(midConv).Key()), faultPartitions)
	atKill := len(streamRecordsOf(t, ctx, f, streamTopic, midPartition))
	poll(t, ctx, "the answers in flight at the kill finished", func() (bool, string) {
		m, err := sp.metrics(ctx, "worker")
		if err != nil {
			return false, err.Error()
		}
		return m.sum(metricRunning) == 0, "runs in flight"
	})
	if n := len(streamRecordsOf(t, ctx, f, streamTopic, midPartition)); n <= atKill {
		t.Fatalf("c%d's answer ended before the kill (%d records then, %d now): no resume would read anything back", midConv, atKill, n)
	}
	edge.release()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	if n := edge.hinted.Load(); n == 0 {
		t.Errorf("no reconnection carried a shard hint")
	}

	f.waitDone(t, ctx, l)
	store := f.store()
	for i := 1; i <= l.convs; i++ {
		id := l.id(i)
		p := topic.Home([]byte(id.Key()), faultPartitions)
		recs := streamRecordsOf(t, ctx, f, streamTopic, p)
		var want []string
		for _, m := range recs {
			if string(m.Key) == id.Key() {
				want = append(want, pushgw.FormatCursor(p, m.Offset))
			}
		}
		if !slices.Equal(got[i].cursors, want) {
			t.Errorf("%s received the records\n  %v\nthe stream holds\n  %v", id.Conversation, got[i].cursors, want)
		}
		page, err := store.List(ctx, id, 0, 200)
		if err != nil {
			t.Fatal(err)
		}
		persistedAnswers := map[string]string{}
		for _, m := range page.Messages {
			if m.Role == history.RoleAssistant {
				persistedAnswers[m.RequestID] += m.Content
			}
		}
		if len(persistedAnswers) != l.msgs {
			t.Errorf("%s: %d answers in history, want %d", id.Conversation, len(persistedAnswers), l.msgs)
		}
		for req, text := range persistedAnswers {
			if got[i].answers[req] != text {
				t.Errorf("%s %s: the client's answer %q, history's %q", id.Conversation, req, got[i].answers[req], text)
			}
		}
	}
}

// streamRecordsOf returns the records of one partition of the stream topic.
func streamRecordsOf(t *testing.T, ctx context.Context, f *faultStack, streamTopic string, partition int) []kafka.Message {
	t.Helper()
	recs, err := readPartition(ctx, f.kafka.Addr(), streamTopic, partition)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}
