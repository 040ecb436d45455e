package pushgw

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// scriptEvent is one event of a conversation's script: what the worker
// emits, and what every subscriber must see in this order.
type scriptEvent struct {
	typ   string
	req   string
	run   string
	seq   int
	value []byte
}

func (e scriptEvent) String() string { return fmt.Sprintf("%s %s/%s#%d", e.typ, e.req, e.run, e.seq) }

func (e scriptEvent) matches(fr frame) bool {
	return fr.Type == e.typ && fr.RequestID == e.req && fr.RunID == e.run && fr.Seq == e.seq
}

// makeScript writes a conversation's stream: a few requests, some of them
// re-run after a worker failure (a new run.started with a new run_id and seq
// starting over, the failed run never completed), each ending with one
// run.completed.
func makeScript(rng *rand.Rand, conv string) []scriptEvent {
	var out []scriptEvent
	add := func(e events.Event) {
		h := e.Header()
		out = append(out, scriptEvent{typ: string(e.Type()), req: h.RequestID, run: h.RunID, seq: int(h.Seq), value: events.MarshalEvent(e)})
	}
	for r := range 2 + rng.IntN(2) {
		req := fmt.Sprintf("r%d", r)
		runs := 1 + rng.IntN(2)
		for u := range runs {
			meta := func(seq int) events.Meta {
				return events.Meta{Conversation: conv, RequestID: req, RunID: fmt.Sprintf("%s-u%d", req, u), Seq: int64(seq), TS: time.Now().UnixNano()}
			}
			seq := 1
			add(&events.RunStartedEvent{Meta: meta(seq)})
			for range 2 + rng.IntN(10) {
				seq++
				add(&events.TokenEvent{Meta: meta(seq), Delta: fmt.Sprintf("w%d ", seq), Agent: "echo", Role: "assistant"})
			}
			if u < runs-1 {
				seq++
				add(&events.NoticeEvent{Meta: meta(seq), Message: "worker lost; retrying"})
				continue // this run dies here: the request is re-run
			}
			seq++
			add(&events.RunCompletedEvent{Meta: meta(seq), Status: events.StatusComplete})
		}
	}
	return out
}

// cutPoints returns where a session disconnects: after k events, for
// ascending k in [0, n). Session 0 of a conversation cuts around every
// run_id change; the others at random points.
func cutPoints(rng *rand.Rand, script []scriptEvent, session int) []int {
	var cuts []int
	if session == 0 {
		for i, e := range script {
			if i > 0 && e.typ == string(events.TypeRunStarted) {
				cuts = append(cuts, i-1, i, i+1)
			}
		}
	} else {
		for range 2 + rng.IntN(5) {
			cuts = append(cuts, rng.IntN(len(script)))
		}
	}
	slices.Sort(cuts)
	return slices.Compact(cuts)
}

// TestResumeIsExactFromAnyDisconnectPoint is the resume property: a client
// that disconnects anywhere (mid-run, around a run_id change, before it got
// anything) and resumes with its last cursor on any replica gets exactly
// the rest of its conversation's stream, while a producer keeps writing.
// The replicas' rings are sized at random (one holds nothing, one holds
// everything since it started, one something in between), so resumes are
// served from the ring, from Kafka, or both within one session. Part of
// each script is written before the replicas start, so it is only in Kafka.
func TestResumeIsExactFromAnyDisconnectPoint(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TURNPIKE_PUSHGW_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TURNPIKE_PUSHGW_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("seed %d: TURNPIKE_PUSHGW_SEED=%d repeats the scripts, ring sizes and cut points", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	ctx := testenv.Context(t, 50*time.Second)
	f := newFixture(t, ctx)

	const conversations, sessions = 4, 4
	base := testenv.Name(t, "c")
	type conversation struct {
		id     events.Identity
		script []scriptEvent
		early  int // events written before the replicas start
	}
	convs := make([]conversation, conversations)
	for i := range convs {
		id := events.Identity{Tenant: auth.DefaultTenant, User: "alice", Conversation: fmt.Sprintf("%s-%d", base, i)}
		script := makeScript(rng, id.Conversation)
		convs[i] = conversation{id: id, script: script, early: rng.IntN(len(script) / 3)}
	}
	write := func(c conversation, from, to int) error {
		msgs := make([]kafka.Message, 0, to-from)
		for _, e := range c.script[from:to] {
			msgs = append(msgs, kafka.Message{Key: []byte(c.id.Key()), Value: e.value})
		}
		if len(msgs) == 0 {
			return nil
		}
		return f.writer.WriteMessages(ctx, msgs...)
	}
	for _, c := range convs {
		if err := write(c, 0, c.early); err != nil {
			t.Fatal(err)
		}
	}

	ringSizes := []int{1 + rng.IntN(256), (1 + rng.IntN(64)) << 20, (2 + rng.IntN(64)) << 10}
	t.Logf("ring bytes of the replicas: %v", ringSizes)
	var replicas []*instance
	for _, size := range ringSizes {
		replicas = append(replicas, f.launch(ctx, func(c *Config) {
			c.RingBytes = size
			c.ConnectPerMinute, c.SubscribePerMinute = -1, -1
		}, nil, nil))
	}
	tok := token(t, auth.DefaultTenant, "alice")

	var wg sync.WaitGroup
	for i, c := range convs {
		prng := rand.New(rand.NewPCG(seed, uint64(100+i)))
		wg.Go(func() { // the producer of conversation i, one event at a time
			for n := c.early; n < len(c.script); n++ {
				if err := write(c, n, n+1); err != nil {
					t.Errorf("produce: %v", err)
					return
				}
				time.Sleep(time.Duration(prng.IntN(15)) * time.Millisecond)
			}
		})
	}
	var mu sync.Mutex
	hops, midRun, sseHops := 0, 0, 0
	for i, c := range convs {
		for s := range sessions {
			srng := rand.New(rand.NewPCG(seed, uint64(1000+i*sessions+s)))
			cuts := append(cutPoints(srng, c.script, s), len(c.script))
			picks, pauses := make([]int, len(cuts)), make([]time.Duration, len(cuts))
			for k := range picks {
				picks[k] = srng.IntN(len(replicas))
				pauses[k] = time.Duration(srng.IntN(120)) * time.Millisecond
			}
			wg.Go(func() {
				name := fmt.Sprintf("conversation %d session %d", i, s)
				pos, cursor := 0, ""
				for k, cut := range cuts {
					in := replicas[picks[k]]
					// Every other hop resumes over Server-Sent Events, by
					// Last-Event-ID or since: a cursor carries over between
					// the transports.
					hop, sse := resumeHop, false
					if (k+s)%2 == 1 {
						hop, sse = resumeHopSSE, true
					}
					if err := hop(ctx, t, in, tok, c.id.Conversation, c.script, &pos, &cursor, cut, k%4 < 2); err != nil {
						t.Errorf("%s, hop %d (replica %d, cut after %d of %d events): %v", name, k, picks[k], cut, len(c.script), err)
						return
					}
					time.Sleep(pauses[k]) // offline for a while: the stream moves on
					mu.Lock()
					hops++
					if sse {
						sseHops++
					}
					if cut > 0 && cut < len(c.script) && c.script[cut-1].typ != string(events.TypeRunCompleted) {
						midRun++
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var ring, fromKafka float64
	for i, in := range replicas {
		r, k := testenv.MetricValue(t, in.reg, "turnpike_pushgw_ring_replays_total"), testenv.MetricValue(t, in.reg, "turnpike_pushgw_replays_total")
		t.Logf("replica %d (ring %d bytes): %v resumes from the ring, %v from Kafka", i, ringSizes[i], r, k)
		ring += r
		fromKafka += k
	}
	t.Logf("%d hops (%d over Server-Sent Events), %d of them cut mid-run", hops, sseHops, midRun)
	if ring == 0 || fromKafka == 0 {
		t.Errorf("resumes from the ring %v, from Kafka %v: the property needs both", ring, fromKafka)
	}
	if midRun == 0 {
		t.Error("no session was cut mid-run")
	}
}

// resumeHop connects to in, subscribes (earliest with no cursor yet, else
// since cursor), checks that the events that come are exactly script[*pos:]
// up to cut, and disconnects (abruptly or with a close frame).
func resumeHop(ctx context.Context, t *testing.T, in *instance, tok, conv string, script []scriptEvent, pos *int, cursor *string, cut int, abrupt bool) error {
	hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	conn, _, err := websocket.DefaultDialer.DialContext(hctx, in.url, map[string][]string{"Authorization": {"Bearer " + tok}})
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	c := &wsClient{t: t, conn: conn}
	since := *cursor
	if since == "" {
		since = "earliest"
	}
	c.subscribe(conv, since)
	fr, err := c.read(hctx)
	if err != nil || fr.Type != "subscribed" {
		return fmt.Errorf("subscribe since %s: %+v, %v", since, fr, err)
	}
	for *pos < cut {
		fr, err := c.read(hctx)
		if err != nil {
			return fmt.Errorf("after %d events (since %s): %w", *pos, since, err)
		}
		if want := script[*pos]; !want.matches(fr) {
			return fmt.Errorf("event %d (since %s) is %s %s/%s#%d, want %v", *pos, since, fr.Type, fr.RequestID, fr.RunID, fr.Seq, want)
		}
		*pos++
		*cursor = fr.Cursor
	}
	if !abrupt {
		_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	}
	return nil
}

// resumeHopSSE is resumeHop over Server-Sent Events: it opens the events
// stream (since=earliest with no cursor yet, else the cursor as
// Last-Event-ID when header is set, as ?since= otherwise), checks the
// events up to cut and drops the connection.
func resumeHopSSE(ctx context.Context, t *testing.T, in *instance, tok, conv string, script []scriptEvent, pos *int, cursor *string, cut int, header bool) error {
	hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel() // drops the connection
	q, h := url.Values{"since": {"earliest"}}, http.Header(nil)
	switch {
	case *cursor != "" && header:
		q, h = nil, http.Header{"Last-Event-Id": {*cursor}}
	case *cursor != "":
		q = url.Values{"since": {*cursor}}
	}
	s, err := openSSE(hctx, t, in.eventsURL(conv, q), tok, h)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer s.resp.Body.Close()
	if s.resp.StatusCode != http.StatusOK {
		return fmt.Errorf("open since %q %v: HTTP %d", *cursor, h, s.resp.StatusCode)
	}
	if m, err := s.read(); err != nil || m.event != "subscribed" {
		return fmt.Errorf("open since %q: %+v, %v", *cursor, m, err)
	}
	for *pos < cut {
		m, err := s.read()
		if err != nil {
			return fmt.Errorf("after %d events (since %s): %w", *pos, *cursor, err)
		}
		if m.comment {
			continue
		}
		if want := script[*pos]; !want.matches(m.fr) {
			return fmt.Errorf("event %d (since %s) is %s %s/%s#%d, want %v", *pos, *cursor, m.fr.Type, m.fr.RequestID, m.fr.RunID, m.fr.Seq, want)
		}
		*pos++
		*cursor = m.id
	}
	return nil
}
