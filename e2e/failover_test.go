package e2e

import (
	"context"
	"errors"
	"fmt"
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

	"github.com/turnpike-dev/turnpike/internal/edgering"
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
// consistent`, ketama on CRC32: internal/edgering), and, like nginx's proxy_next_upstream, tries
// the next replica on the ring when one refuses the connection. A request
// without the hint hashes the empty string.
type shardEdge struct {
	t      *testing.T
	srv    *http.Server
	ln     net.Listener
	hinted atomic.Int64

	mu sync.Mutex
	// Guarded by mu.
	members  []edgeBackend
	ring     edgeRing
	upgrades map[string]int // backend -> connections proxied to it
	dials    []edgeDial     // every connection proxied, in order
	gate     chan struct{}  // dials wait until it is closed
}

// edgeDial is one connection the edge proxied: the shard hint it carried
// ("" for none) and the replica it reached.
type edgeDial struct {
	shard, backend string
	conn           net.Conn
}

// edgeRing is the ring of members (internal/edgering, hashing their
// names), answering with their addresses.
type edgeRing struct {
	ring    *edgering.Ring
	members []edgeBackend
}

// edgeBackend is a replica on the ring: its points hash its name (nginx
// hashes the upstream server's address, so by default the name is the
// address; a test that needs to know which shards a replica owns before
// it knows the replicas' ports names them as pods are named), and
// connections go to its address.
type edgeBackend struct {
	name, addr string
}

func newShardEdge(t *testing.T, backends []string) *shardEdge {
	t.Helper()
	var members []edgeBackend
	for _, b := range backends {
		members = append(members, edgeBackend{name: b, addr: b})
	}
	return newShardEdgeOf(t, members)
}

// newShardEdgeOf is newShardEdge over named replicas.
func newShardEdgeOf(t *testing.T, members []edgeBackend) *shardEdge {
	t.Helper()
	e := &shardEdge{t: t, ln: loopback(t), upgrades: map[string]int{}, gate: make(chan struct{})}
	close(e.gate)
	e.members = slices.Clone(members)
	e.ring = ringOf(members)
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

// ringOf is the consistent-hash ring of members.
func ringOf(members []edgeBackend) edgeRing {
	names := make([]string, len(members))
	for i, b := range members {
		names[i] = b.name
	}
	return edgeRing{edgering.New(names), slices.Clone(members)}
}

func (e *shardEdge) addr() string { return e.ln.Addr().String() }

// add puts a replica on the ring, as an edge does when a Service gains a
// ready endpoint: new connections hash over it too; connections already
// proxied stay where they are.
func (e *shardEdge) add(b edgeBackend) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.members = append(e.members, b)
	e.ring = ringOf(e.members)
}

// proxied returns the connections proxied so far.
func (e *shardEdge) proxied() []edgeDial {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.dials)
}

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
	e.mu.Lock()
	defer e.mu.Unlock()
	return ringOrder(e.ring, key)
}

// ringOrder is the backends of ring in ring order from key's hash.
func ringOrder(ring edgeRing, key string) []string {
	var out []string
	for _, m := range ring.ring.Order(key) {
		out = append(out, ring.members[m].addr)
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
			e.dials = append(e.dials, edgeDial{shard: shard, backend: b, conn: c})
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

// scalePartitions is the stream topic's partition count of the scale
// test: enough shards that the replica added owns some of them.
const scalePartitions = 24

// sseFollower is one Server-Sent Events subscription behind the edge and
// what it received.
type sseFollower struct {
	conv       string
	sub        *client.Subscription
	cursors    []string
	reconnects atomic.Int64
}

func followSSE(t *testing.T, ctx context.Context, c *client.Client, conv string) *sseFollower {
	t.Helper()
	f := &sseFollower{conv: conv}
	sub, err := c.Subscribe(ctx, conv, client.SubscribeOptions{SSE: true, MaxBackoff: 200 * time.Millisecond,
		OnReconnect: func(string) { f.reconnects.Add(1) }})
	if err != nil {
		t.Fatalf("subscribe %s: %v", conv, err)
	}
	t.Cleanup(func() { sub.Close() })
	f.sub = sub
	return f
}

// until reads events until the run of requestID completed.
func (f *sseFollower) until(ctx context.Context, requestID string) error {
	for {
		e, err := f.sub.Next(ctx)
		if err != nil {
			return fmt.Errorf("%s after %d events: %w", f.conv, len(f.cursors), err)
		}
		f.cursors = append(f.cursors, e.Header().Cursor)
		if done, ok := e.(*events.RunCompletedEvent); ok && done.RequestID == requestID {
			return nil
		}
	}
}

// TestAPushGatewayReplicaAddedKeepsOpenConnectionsAndTakesNewOnes:
// docs/pushgw.md "Routing by shard" (when replicas come and go: consistent
// hashing moves only the shards that hash to the replica added;
// connections already open stay where they are; a moved shard's new
// connections go to its new replica). Two push gateway processes sit
// behind the edge's consistent hash on the shard hint; clients follow
// conversations over Server-Sent Events (whose 307 to ?shard= routes even
// a first connection by shard). A third replica is then put on the ring.
// The conversations are picked by the ring: some on shards the new
// replica takes over, some on shards that stay. Every connection opened
// before the add stays open (no reconnection) and receives exactly its
// conversation's stream records, each once, in offset order, across the
// add; every new connection reaches the replica the new ring names, so the
// moved shards' new connections (one of them a second connection of a
// conversation still followed on the old replica) land on the new
// replica, and the others on the two old ones.
func TestAPushGatewayReplicaAddedKeepsOpenConnectionsAndTakesNewOnes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs push gateway processes")
	}
	ctx := testenv.Context(t, 3*time.Minute)
	f := newFaultStackStream(t, scalePartitions)
	const secret = "scale-test-secret-of-32-bytes-or-more!!"
	sp := &serviceProcs{t: t, f: f, procs: map[string]*exec.Cmd{}, ops: map[string]string{},
		lns: map[string]*net.TCPListener{"ingest": loopback(t)}}
	sp.env = []string{"TURNPIKE_AUTH_SECRET=" + secret, "TURNPIKE_RATE_PER_SECOND=-1"}
	t.Cleanup(sp.stopAll)
	sp.start("worker")
	sp.start("ingest")
	env := append(slices.Clip(f.env), sp.env...)
	// The replicas are named as a StatefulSet's pods are, so that the
	// ring, and which shards the added replica takes, is the same in
	// every run (with 24 shards: 5 move to pushgw-2, 10 stay on pushgw-0,
	// 9 on pushgw-1). The replica to add runs (and is ready) before the
	// edge knows it, as a pod is ready before its Service lists it.
	old := []edgeBackend{{"pushgw-0", startGateway(t, ctx, env).addr}, {"pushgw-1", startGateway(t, ctx, env).addr}}
	newcomer := edgeBackend{"pushgw-2", startGateway(t, ctx, env).addr}
	added := newcomer.addr
	edge := newShardEdgeOf(t, old)
	before, after := ringOf(old), ringOf(append(slices.Clone(old), newcomer))

	// A conversation of each shard, and the shards' owners before and
	// after the add.
	const user = "scaler"
	convOf := map[int]string{}
	for i := 0; len(convOf) < scalePartitions; i++ {
		conv := fmt.Sprintf("c%d", i)
		id := events.Identity{Tenant: "acme", User: user, Conversation: conv}
		if p := topic.Home([]byte(id.Key()), scalePartitions); convOf[p] == "" {
			convOf[p] = conv
		}
	}
	var moved, stayed []int // shards the new replica takes; shards that stay on each old replica
	stayedOn := map[string]bool{}
	for p := range scalePartitions {
		shard := strconv.Itoa(p)
		was, now := ringOrder(before, shard)[0], ringOrder(after, shard)[0]
		switch {
		case now == added:
			moved = append(moved, p)
		case now != was:
			t.Fatalf("shard %d moved from %s to %s, an old replica: the ring is not consistent", p, was, now)
		case !stayedOn[now]:
			stayedOn[now] = true
			stayed = append(stayed, p)
		}
	}
	if len(moved) < 2 || len(stayed) != 2 {
		t.Fatalf("of %d shards the added replica takes %v, and the old ones keep %v: want two moved and one kept on each", scalePartitions, moved, stayed)
	}
	moved = moved[:2]
	t.Logf("replicas %v, then %s added: it takes shards %v of those followed; %v stay", old, added, moved, stayed)

	tok, err := auth.Mint(secret, "acme", user, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := &client.Client{BaseURL: "http://" + sp.addr("ingest"), EventsURL: "http://" + edge.addr(), Token: tok}
	send := func(conv string, j int) string {
		t.Helper()
		a, err := c.Send(ctx, conv, fmt.Sprintf("m%d [[tokens:5]]", j), client.SendOptions{IdempotencyKey: fmt.Sprintf("%s-m%d", conv, j)})
		if err != nil {
			t.Fatalf("send %s m%d: %v", conv, j, err)
		}
		return a.RequestID
	}
	// round sends message j on each follower's conversation (once per
	// conversation) and waits until every follower received its answer.
	round := func(fs []*sseFollower, j int) {
		t.Helper()
		reqs := map[string]string{}
		for _, fl := range fs {
			if reqs[fl.conv] == "" {
				reqs[fl.conv] = send(fl.conv, j)
			}
		}
		for _, fl := range fs {
			if err := fl.until(ctx, reqs[fl.conv]); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Before the add: a connection on each shard followed, each routed by
	// the two-replica ring.
	var existing []*sseFollower
	for _, p := range append(slices.Clone(moved), stayed...) {
		existing = append(existing, followSSE(t, ctx, c, convOf[p]))
	}
	round(existing, 1)
	mark := len(edge.proxied())
	streamTopic := topic.NewNames(f.prefix).Stream
	recordsOf := func(conv string) []string {
		id := events.Identity{Tenant: "acme", User: user, Conversation: conv}
		p := topic.Home([]byte(id.Key()), scalePartitions)
		var out []string
		for _, m := range streamRecordsOf(t, ctx, f, streamTopic, p) {
			if string(m.Key) == id.Key() {
				out = append(out, pushgw.FormatCursor(p, m.Offset))
			}
		}
		return out
	}
	// What each conversation's stream holds before the add: a new
	// connection (live, opened before message 2) receives what follows.
	heldBefore := map[string]int{}
	for p := range scalePartitions {
		heldBefore[convOf[p]] = len(recordsOf(convOf[p]))
	}

	edge.add(newcomer)
	// After the add: new connections, a second one of each moved shard's
	// conversation and one of a conversation of each kept shard that no
	// one follows yet, routed by the three-replica ring.
	var fresh []*sseFollower
	var freshShards []int
	for _, p := range moved {
		fresh = append(fresh, followSSE(t, ctx, c, convOf[p]))
		freshShards = append(freshShards, p)
	}
	for p := range scalePartitions {
		if owner := ringOrder(after, strconv.Itoa(p))[0]; owner != added && !slices.Contains(stayed, p) && stayedOn[owner] {
			delete(stayedOn, owner)
			fresh = append(fresh, followSSE(t, ctx, c, convOf[p]))
			freshShards = append(freshShards, p)
		}
	}
	round(append(slices.Clone(existing), fresh...), 2)
	round(existing, 3)

	// Where the edge sent each connection: every hinted connection to the
	// owner of its shard on the ring of its time.
	landed := map[string]int{}
	for i, d := range edge.proxied() {
		if d.shard == "" {
			continue // the first request of an event stream, redirected to its shard
		}
		ring := before
		if i >= mark {
			ring = after
		}
		if want := ringOrder(ring, d.shard)[0]; d.backend != want {
			t.Errorf("a connection of shard %s reached %s, want %s", d.shard, d.backend, want)
		}
		if i >= mark {
			landed[d.backend]++
		}
	}
	if len(landed) != 3 || landed[added] != len(moved) {
		t.Errorf("new connections landed %v: want all three replicas, %d on the added %s", landed, len(moved), added)
	}
	// ... each carrying its conversation's shard, which the gateway named.
	var hinted []int
	for _, d := range edge.proxied()[mark:] {
		if p, err := strconv.Atoi(d.shard); err == nil {
			hinted = append(hinted, p)
		}
	}
	if slices.Sort(hinted); !slices.Equal(hinted, slices.Sorted(slices.Values(freshShards))) {
		t.Errorf("the new connections carried the shards %v, want their conversations' %v", hinted, slices.Sorted(slices.Values(freshShards)))
	}
	for i, fl := range fresh {
		if fl.sub.Shard() != freshShards[i] {
			t.Errorf("%s: the gateway named shard %d, want %d", fl.conv, fl.sub.Shard(), freshShards[i])
		}
	}
	// Every connection, old or new, stayed open and received exactly the
	// records of its conversation since it opened: an existing one all of
	// them, a new one those from its first on (message 2's), with no gap
	// and no duplicate.
	for i, fl := range append(slices.Clone(existing), fresh...) {
		if n := fl.reconnects.Load(); n != 0 {
			t.Errorf("%s: reconnected %d times: an open connection must stay where it is", fl.conv, n)
		}
		want := recordsOf(fl.conv)
		from := 0
		if i >= len(existing) {
			from = heldBefore[fl.conv]
		}
		if to := from + len(fl.cursors); i < len(existing) && to != len(want) || to > len(want) || !slices.Equal(fl.cursors, want[from:to]) {
			t.Errorf("%s (%s connection) received the records\n  %v\nthe stream holds\n  %v", fl.conv, map[bool]string{true: "an existing", false: "a new"}[i < len(existing)], fl.cursors, want)
		}
	}
}
