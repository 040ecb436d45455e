package webui_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/testenv/stacktest"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/pushgw"
)

// sseGateway is a push gateway of the test's own on a fixed loopback
// address, which the test stops and starts again.
type sseGateway struct {
	t      *testing.T
	cfg    pushgw.Config
	addr   string
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

// start runs a gateway on g.addr (a fresh port the first time) and waits
// until it is ready.
func (g *sseGateway) start() {
	t := g.t
	t.Helper()
	addr := g.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	g.addr = ln.Addr().String()
	g.reg = prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel, g.done = cancel, make(chan error, 1)
	ready := make(chan struct{})
	log := stacktest.Logger(t)
	go func() {
		s, err := pushgw.New(g.cfg, pushgw.WithLogger(log), pushgw.WithRegistry(g.reg), pushgw.WithReady(func() { close(ready) }), pushgw.WithListener(ln))
		if err == nil {
			err = s.Run(ctx)
		}
		g.done <- err
	}()
	select {
	case <-ready:
	case err := <-g.done:
		t.Fatalf("push gateway stopped before ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("push gateway not ready within 30s")
	}
}

// stop stops the gateway and waits for it.
func (g *sseGateway) stop() {
	g.t.Helper()
	g.cancel()
	if err := <-g.done; err != nil && !errors.Is(err, context.Canceled) {
		g.t.Errorf("push gateway: %v", err)
	}
}

// TestBrowserEventSourceResumesAcrossAGatewayRestart follows a streaming
// answer with turnpike.js's streamEvents (the browser's own EventSource)
// from the demo page's origin, restarts the push gateway mid-answer, and
// checks that every word arrived exactly once, in order.
func TestBrowserEventSourceResumesAcrossAGatewayRestart(t *testing.T) {
	t.Parallel()
	stk := newStack(t)
	stk.gates = stacktest.NewGates() // the answer waits at a gate while the gateway stops
	st := stk.start(t, t.Context(), "")
	cfg := stk.cfg
	chromium := findChromium(t)
	// While the gateway is down the browser logs its refused reconnections;
	// the document below has no favicon.
	ctx := newBrowser(t, chromium, "net::ERR_CONNECTION_REFUSED", "status of 404 (Not Found)")

	gw := &sseGateway{t: t}
	gw.cfg.TopicPrefix, gw.cfg.Partitions, gw.cfg.LogLevel = cfg.Worker.TopicPrefix, cfg.Worker.Partitions, cfg.Worker.LogLevel
	gw.cfg.Brokers, gw.cfg.AuthSecret = st.Brokers, st.AuthSecret
	gw.cfg.SSERetry = 200 * time.Millisecond
	gw.cfg.AllowedOrigins = []string{"http://" + st.IngestAddr} // the page's origin
	gw.start()
	t.Cleanup(func() { gw.stop() })

	conv := testenv.Name(t, "sse")
	tok, err := auth.Mint(st.AuthSecret, auth.DefaultTenant, "alice", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// A document of the page's origin without the demo page's Content
	// Security Policy, whose connect-src lets only WebSockets leave the
	// origin: as an application of its own would embed turnpike.js.
	run(t, ctx, "open a document of the page's origin", chromedp.Navigate(st.IngestURL+"/ui/turnpike.js"))
	opened := evalJS[bool](t, ctx, fmt.Sprintf(`(async () => {
  const tp = await import('/ui/turnpike.js');
  const s = window.__sse = { events: [], states: [], gaps: 0, errors: [] };
  s.stream = tp.streamEvents(%q, {
    eventsURL: %q, token: %q,
    onEvent: (ev) => s.events.push(ev), onGap: () => s.gaps++,
    onError: (e) => s.errors.push(e.code), onState: (st) => s.states.push(st),
  });
  await s.stream.ready;
  return true;
})()`, conv, "http://"+gw.addr, tok), chromedp.EvalAwaitPromise)
	if !opened {
		t.Fatal("the event stream did not open")
	}

	c := &client.Client{BaseURL: st.IngestURL, Token: tok}
	const words = 60
	gate := stk.gates.Hold(conv, 5)
	sent, err := c.Send(testenv.Context(t, 10*time.Second), conv, fmt.Sprintf("[[tokens:%d]][[delay:40ms]]", words), client.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokens := func() int {
		return evalJS[int](t, ctx, `window.__sse.events.filter((e) => e.type === 'token').length`)
	}
	// The answer waits at the gate after five words (however many token
	// events carried them) until the gateway is down; the rest is streamed
	// while it is.
	run(t, ctx, "wait for a partial answer", waitJS(`window.__sse.events.filter((e) => e.type === 'token').map((e) => e.delta).join('').trim().split(/\s+/).length >= 5`))
	gw.stop()
	// The fault hit the answer in flight: part of it was seen, not its end.
	before := tokens()
	if before >= words || evalJS[bool](t, ctx, `window.__sse.events.some((e) => e.type === 'run.completed')`) {
		t.Fatalf("the gateway stopped after the whole answer (%d of %d words seen): the restart must come mid-answer", before, words)
	}
	// The answer goes on while the gateway is down: the restarted one finds
	// records past the browser's cursor in Kafka, and must replay them (a
	// gateway started before any was written would serve the resume live).
	stream := topic.NewNames(cfg.Worker.TopicPrefix).Stream
	partitions := topic.StreamPartitions(cfg.Worker.Partitions, cfg.Worker.StreamPartitions)
	wctx := testenv.Context(t, 30*time.Second)
	written := func() (n int64) {
		for _, end := range testenv.EndOffsets(t, wctx, st.Brokers, stream, partitions) {
			n += end
		}
		return n
	}
	atStop := written()
	gate.Release()
	testenv.Eventually(t, wctx, "a record of the answer written while the gateway is down", func() bool { return written() > atStop })
	gw.start()
	run(t, ctx, "wait for the end of the answer", waitJS(`window.__sse.events.some((e) => e.type === 'run.completed')`))

	checkWords(t, ctx, "__sse", sent.RequestID, words)
	states := evalJS[[]string](t, ctx, `window.__sse.states`)
	if !contains(states, "reconnecting") {
		t.Errorf("states %q: want reconnecting among them", states)
	}
	if n := evalJS[int](t, ctx, `window.__sse.gaps`); n != 0 {
		t.Errorf("onGap called %d times; the stream resumed by cursor and missed nothing", n)
	}
	if errs := evalJS[[]string](t, ctx, `window.__sse.errors`); len(errs) != 0 {
		t.Errorf("onError: %q", errs)
	}
	// The restarted gateway served the resume from a cursor: its replay
	// (its ring is younger than the cursor, so from Kafka).
	if n := testenv.MetricValue(t, gw.reg, "turnpike_pushgw_replays_total"); n < 1 {
		t.Errorf("replays_total of the restarted gateway = %v, want the resume from Last-Event-ID", n)
	}
	run(t, ctx, "close the stream", chromedp.Evaluate[chromedp.Void](`window.__sse.stream.close()`))

	// A token that expires mid-answer: the gateway ends the stream with an
	// unauthenticated error event, and streamEvents reopens it with the
	// provider's token from its cursor.
	short, err := auth.Mint(st.AuthSecret, auth.DefaultTenant, "alice", 2*time.Second, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	conv2 := testenv.Name(t, "expiry")
	evalJS[bool](t, ctx, fmt.Sprintf(`(async () => {
  const tp = await import('/ui/turnpike.js');
  const s = window.__exp = { events: [], asked: [], gaps: 0, errors: [] };
  s.stream = tp.streamEvents(%q, {
    eventsURL: %q, token: %q,
    getToken: async (info) => {
      s.asked.push({ ...info, seen: s.events.length, done: s.events.some((e) => e.type === 'run.completed') });
      return %q;
    },
    onEvent: (ev) => s.events.push(ev), onGap: () => s.gaps++, onError: (e) => s.errors.push(e.code),
  });
  await s.stream.ready;
  return true;
})()`, conv2, "http://"+gw.addr, short, tok), chromedp.EvalAwaitPromise)
	const longWords = 100 // 4 s: past the token's 2 s
	sent2, err := c.Send(testenv.Context(t, 10*time.Second), conv2, fmt.Sprintf("[[tokens:%d]][[delay:40ms]]", longWords), client.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "wait for the end of the answer", waitJS(`window.__exp.events.some((e) => e.type === 'run.completed')`))
	checkWords(t, ctx, "__exp", sent2.RequestID, longWords)
	type asked struct {
		Reason string `json:"reason"`
		Seen   int    `json:"seen"`
		Done   bool   `json:"done"`
	}
	if a := evalJS[[]asked](t, ctx, `window.__exp.asked`); len(a) != 1 || a[0].Reason != "expired" || a[0].Done {
		t.Errorf("getToken calls %+v: want one, for the expiry, before the answer's end", a)
	} else {
		t.Logf("the token expired after %d of the answer's events", a[0].Seen)
	}
	if n, errs := evalJS[int](t, ctx, `window.__exp.gaps`), evalJS[[]string](t, ctx, `window.__exp.errors`); n != 0 || len(errs) != 0 {
		t.Errorf("onGap %d times, onError %q: the stream resumed by cursor", n, errs)
	}
	run(t, ctx, "close the stream", chromedp.Evaluate[chromedp.Void](`window.__exp.stream.close()`))

	// streamEvents on its own, against a fake EventSource.
	script, err := os.ReadFile(filepath.Join("testdata", "turnpike_sse_test.js"))
	if err != nil {
		t.Fatal(err)
	}
	if failures := evalJS[[]string](t, ctx, string(script), chromedp.EvalAwaitPromise); len(failures) > 0 {
		t.Errorf("streamEvents checks failed:\n  %s", strings.Join(failures, "\n  "))
	}
}

// checkWords checks that the stream of window[state] delivered the words
// w1..wN of request requestID's answer, each once, in order.
func checkWords(t *testing.T, ctx context.Context, state, requestID string, n int) {
	t.Helper()
	var got []string
	for _, w := range evalJS[[]string](t, ctx, fmt.Sprintf(`window.%s.events.filter((e) => e.request_id === %q && e.type === 'token').map((e) => e.delta)`, state, requestID)) {
		got = append(got, strings.TrimSpace(w))
	}
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("w%d", i+1)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("the page got the words\n%q\nwant each of w1..w%d once, in order", got, n)
	}
}
