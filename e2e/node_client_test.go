package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// The Node client test runs e2e/interop/node/stream.js, a client of the
// push gateway written from docs/api.md alone, on the npm ws package (strict
// about RFC 6455 framing, UTF-8 and close codes) and on Node's own fetch for
// the event streams, against the devstack. The script acts and prints one
// JSON line per observation; the assertions are here.

// nodeFrame is a server-to-client frame or event as the script received it.
type nodeFrame struct {
	Type         string `json:"type"`
	Conversation string `json:"conversation"`
	RequestID    string `json:"request_id"`
	RunID        string `json:"run_id"`
	Seq          int    `json:"seq"`
	Cursor       string `json:"cursor"`
	Delta        string `json:"delta"`
	Status       string `json:"status"`
	Code         string `json:"code"`
	Message      string `json:"message"`
	Unparsed     string `json:"unparsed"`
}

// sseFields is one event of a text/event-stream as the script parsed it.
type sseFields struct {
	ID     string   `json:"id"`
	HasID  bool     `json:"has_id"`
	Event  string   `json:"event"`
	Data   string   `json:"data"`
	Retry  *string  `json:"retry"`
	Fields []string `json:"fields"`
}

// nodeObs is one line of the script's output.
type nodeObs struct {
	Obs        string     `json:"obs"`
	Conn       string     `json:"conn"`
	Frame      *nodeFrame `json:"frame"`
	Raw        string     `json:"raw"`
	Step       string     `json:"step"`
	Code       int        `json:"code"`
	Reason     string     `json:"reason"`
	Errors     []string   `json:"errors"`
	HTTPStatus int        `json:"http_status"`
	Body       *struct {
		Error struct{ Code, Message string }
	} `json:"body"`
	ContentType    string     `json:"content_type"`
	CacheControl   string     `json:"cache_control"`
	XAccel         string     `json:"x_accel_buffering"`
	WWWAuth        string     `json:"www_authenticate"`
	RequestID      string     `json:"request_id"`
	Cursor         string     `json:"cursor"`
	Since          string     `json:"since"`
	ObserverTokens int        `json:"observer_tokens"`
	Event          *sseFields `json:"event"`
	JSON           *nodeFrame `json:"json"`
	Sent           string     `json:"sent"`
	Received       string     `json:"received"`
	TextFrame      bool       `json:"text_frame"`
	line           string
}

// nodeRun is what one run of stream.js observed.
type nodeRun []nodeObs

// runNode runs stream.js's scenario with cfg and returns its observations;
// each, if set, sees every one as it is printed. The script failing to run
// its scenario fails t, with everything it printed.
func runNode(t *testing.T, ctx context.Context, scenario string, cfg map[string]any, each func(nodeObs)) nodeRun {
	t.Helper()
	run, err := runNodeErr(t, ctx, scenario, cfg, each)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// runNodeErr is runNode returning the script's failure (with everything it
// printed) instead of failing t.
func runNodeErr(t *testing.T, ctx context.Context, scenario string, cfg map[string]any, each func(nodeObs)) (nodeRun, error) {
	t.Helper()
	arg, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "node", "stream.js", scenario, string(arg))
	cmd.Dir = nodeDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var run nodeRun
	var text strings.Builder
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		text.WriteString(sc.Text() + "\n")
		var o nodeObs
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Errorf("stream.js %s printed a line that is not an observation: %q", scenario, sc.Text())
			continue
		}
		o.line = sc.Text()
		run = append(run, o)
		if each != nil {
			each(o)
		}
	}
	if err := cmd.Wait(); err != nil {
		return run, fmt.Errorf("node stream.js %s: %w\nstdout:\n%sstderr:\n%s", scenario, err, text.String(), stderr.Bytes())
	}
	return run, nil
}

// frames returns the frames conn received, in order.
func (r nodeRun) frames(conn string) []nodeFrame {
	var out []nodeFrame
	for _, o := range r {
		if o.Obs == "frame" && o.Conn == conn && o.Frame != nil {
			out = append(out, *o.Frame)
		}
	}
	return out
}

// sse returns the events of event stream conn, in order.
func (r nodeRun) sse(conn string) []nodeObs {
	var out []nodeObs
	for _, o := range r {
		if o.Obs == "sse" && o.Conn == conn {
			out = append(out, o)
		}
	}
	return out
}

// one returns the only observation of kind obs on conn ("" for any).
func (r nodeRun) one(t *testing.T, obs, conn string) nodeObs {
	t.Helper()
	var got []nodeObs
	for _, o := range r {
		if o.Obs == obs && (conn == "" || o.Conn == conn) {
			got = append(got, o)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d %q observations of %q, want 1; the run:\n%s", len(got), obs, conn, r)
	}
	return got[0]
}

func (r nodeRun) String() string {
	var b strings.Builder
	for _, o := range r {
		b.WriteString(o.line + "\n")
	}
	return b.String()
}

// checkClose asserts that ws saw conn closed with code and, if reason is
// not empty, that reason, and found nothing wrong with the close frame.
func (r nodeRun) checkClose(t *testing.T, conn string, code int, reason string) {
	t.Helper()
	c := r.one(t, "close", conn)
	if c.Code != code || (reason != "" && c.Reason != reason) {
		t.Errorf("%s closed with %d %q, want %d %q", conn, c.Code, c.Reason, code, reason)
	}
	if len(c.Errors) > 0 {
		t.Errorf("ws found the gateway's frames of %s wrong: %q", conn, c.Errors)
	}
}

// answerText folds the token deltas of request id in frames.
func answerText(frames []nodeFrame, id string) (text, status string) {
	for _, f := range frames {
		if f.RequestID != id {
			continue
		}
		switch f.Type {
		case string(events.TypeToken):
			text += f.Delta
		case string(events.TypeRunCompleted):
			status = f.Status
		}
	}
	return text, status
}

// words is the echo model's answer to [[tokens:n]].
func words(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if i > 1 {
			b.WriteByte(' ')
		}
		b.WriteString("w" + strconv.Itoa(i))
	}
	return b.String()
}

func cursors(frames []nodeFrame) []string {
	out := make([]string, 0, len(frames))
	for _, f := range frames {
		out = append(out, f.Cursor)
	}
	return out
}

// afterCursor returns the frames of all strictly after cursor c.
func afterCursor(t *testing.T, all []nodeFrame, c string) []nodeFrame {
	t.Helper()
	for i, f := range all {
		if f.Cursor == c {
			return all[i+1:]
		}
	}
	t.Fatalf("cursor %q is not one the observer received", c)
	return nil
}

// sameEvents fails unless got and want are the same events, by cursor, in
// the same order: every event once, no gap, no duplicate.
func sameEvents(t *testing.T, what string, got, want []nodeFrame) {
	t.Helper()
	g, w := cursors(got), cursors(want)
	if strings.Join(g, " ") == strings.Join(w, " ") {
		return
	}
	seen := map[string]int{}
	for _, c := range g {
		seen[c]++
	}
	var absent, repeated []string
	for _, c := range w {
		if seen[c] == 0 {
			absent = append(absent, c)
		}
	}
	for c, n := range seen {
		if n > 1 {
			repeated = append(repeated, c)
		}
	}
	slices.Sort(repeated)
	t.Errorf("%s: %d events, want %d (every event once, in order); missing %v, repeated %v\ngot  %v\nwant %v",
		what, len(g), len(w), absent, repeated, g, w)
}

func TestNodeClientFollowsTheDocumentedProtocol(t *testing.T) {
	needNode(t, "ws")
	s := startStack(t, "")
	token := func(user string, ttl time.Duration) string {
		tok, err := auth.Mint(s.AuthSecret, "acme", user, ttl, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	base := map[string]any{"ws": "ws://" + s.PushgwAddr, "http": "http://" + s.PushgwAddr, "ingest": "http://" + s.IngestAddr}
	cfg := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	ann := token("ann", time.Hour)

	t.Run("a subscription receives the answer it was subscribed before, to its run.completed", func(t *testing.T) {
		ctx := testenv.Context(t, 30*time.Second)
		run := runNode(t, ctx, "answer", cfg("token", ann, "conversation", "node-answer", "content", "hello from node"), nil)
		id := run.one(t, "posted", "").RequestID
		fr := run.frames("ws")
		if len(fr) == 0 || fr[0].Type != "subscribed" || fr[0].Conversation != "node-answer" {
			t.Fatalf("first frame %+v, want subscribed to node-answer; the run:\n%s", fr, run)
		}
		if text, status := answerText(fr, id); text != "echo #1: hello from node" || status != string(events.StatusComplete) {
			t.Errorf("answer %q (%s), want %q complete", text, status, "echo #1: hello from node")
		}
		for i, f := range fr[1:] {
			if f.Cursor == "" || f.RequestID != id || f.Seq != i+1 {
				t.Errorf("event %d %+v: want a cursor, request %s and seq %d", i, f, id, i+1)
			}
		}
		run.checkClose(t, "ws", 1000, "")
	})

	t.Run("a cut WebSocket and a cut event stream resume from their last cursor with every event once", func(t *testing.T) {
		ctx := testenv.Context(t, 30*time.Second)
		const n, cut, gap = 60, 8, 4
		run := runNode(t, ctx, "resume", cfg("token", ann, "conversation", "node-resume",
			"content", "[[tokens:"+strconv.Itoa(n)+"]][[delay:20ms]]", "cut", cut, "gap", gap), nil)
		id := run.one(t, "posted", "").RequestID
		all := run.frames("observer")
		if len(all) == 0 || all[0].Type != "subscribed" {
			t.Fatalf("observer's first frame is not subscribed; the run:\n%s", run)
		}
		all = all[1:]
		if text, status := answerText(all, id); text != words(n) || status != string(events.StatusComplete) {
			t.Fatalf("observer folded %q (%s), want the whole answer", text, status)
		}

		// resumed checks that cut received the observer's events up to its
		// cut, that events were emitted while it was away, and that resumed
		// received every one after the cut's cursor, once.
		resumed := func(cut, resumed string, before, after []nodeFrame, how string) {
			t.Helper()
			c := run.one(t, "cut", cut)
			if len(before) == 0 || before[len(before)-1].Cursor != c.Cursor {
				t.Fatalf("%s cut at %q, after %d events", cut, c.Cursor, len(before))
			}
			sameEvents(t, cut+" before the cut", before, all[:len(before)])
			if r := run.one(t, "resuming", resumed); r.ObserverTokens <= c.ObserverTokens {
				t.Fatalf("%s resumed when the observer had %d tokens, %d at the cut: no gap to fill", resumed, r.ObserverTokens, c.ObserverTokens)
			}
			sameEvents(t, resumed+", resumed with "+how, after, afterCursor(t, all, c.Cursor))
		}

		// The WebSocket: ws1 up to the cut, ws2 strictly after its cursor.
		ws2 := run.frames("ws2")
		if len(ws2) == 0 || ws2[0].Type != "subscribed" {
			t.Fatalf("ws2's first frame is not subscribed: %+v", ws2)
		}
		resumed("ws1", "ws2", run.frames("ws1")[1:], ws2[1:], "since")

		// The event stream: sse1 up to the cut, sse2 with Last-Event-ID.
		checkStream := func(conn string) []nodeFrame {
			t.Helper()
			open := run.one(t, "sse-open", conn)
			if open.HTTPStatus != 200 || open.ContentType != "text/event-stream; charset=utf-8" || open.CacheControl != "no-store" || open.XAccel != "no" {
				t.Errorf("%s: %s, want 200 with the documented headers", conn, open.line)
			}
			evs := run.sse(conn)
			if len(evs) < 2 || evs[0].Event.Retry == nil || *evs[0].Event.Retry != "2000" {
				t.Fatalf("%s does not begin with retry: 2000; the run:\n%s", conn, run)
			}
			sub := evs[1]
			if sub.Event.Event != "subscribed" || sub.Event.HasID || sub.JSON.Type != "subscribed" || sub.JSON.Conversation != "node-resume" {
				t.Fatalf("%s's first event is %+v %+v, want event: subscribed without an id", conn, sub.Event, sub.JSON)
			}
			var out []nodeFrame
			for _, e := range evs[2:] {
				var wrong []string
				if !e.Event.HasID || e.Event.ID != e.JSON.Cursor || e.JSON.Cursor == "" {
					wrong = append(wrong, fmt.Sprintf("id %q (an id: field: %v), data's cursor %q: want the cursor as id", e.Event.ID, e.Event.HasID, e.JSON.Cursor))
				}
				if e.Event.Event != e.JSON.Type {
					wrong = append(wrong, fmt.Sprintf("event: %q, data's type %q: want the type as event", e.Event.Event, e.JSON.Type))
				}
				if n := slices.Index(e.Event.Fields, "data"); n < 0 || slices.Index(e.Event.Fields[n+1:], "data") >= 0 {
					wrong = append(wrong, fmt.Sprintf("fields %q: want one data: line", e.Event.Fields))
				}
				if len(wrong) > 0 {
					t.Fatalf("%s: event %s:\n%s", conn, e.line, strings.Join(wrong, "\n"))
				}
				out = append(out, *e.JSON)
			}
			return out
		}
		resumed("sse1", "sse2", checkStream("sse1"), checkStream("sse2"), "Last-Event-ID")
		// A cursor from either transport resumes on the other.
		sameEvents(t, "sse3, resumed with the WebSocket's cursor as Last-Event-ID", checkStream("sse3"),
			afterCursor(t, all, run.one(t, "cut", "ws1").Cursor))

		// An event stream's data is the very text a WebSocket receives. (Not
		// what JSON.parse makes of it: ts, in nanoseconds, is above 2^53.)
		text := map[string]string{}
		for _, o := range run {
			if o.Obs == "frame" && o.Conn == "observer" && o.Frame.Cursor != "" {
				text[o.Frame.Cursor] = o.Raw
			}
		}
		for _, conn := range []string{"sse1", "sse2", "sse3"} {
			for _, e := range run.sse(conn)[2:] {
				if text[e.Event.ID] != e.Event.Data {
					t.Fatalf("%s's data for %s is\n%s\nthe WebSocket's frame\n%s", conn, e.Event.ID, e.Event.Data, text[e.Event.ID])
				}
			}
		}
		for _, c := range []string{"observer", "ws2"} {
			run.checkClose(t, c, 1000, "")
		}
		run.checkClose(t, "ws1", 1006, "") // terminated: no close frame, as when the network drops
	})

	t.Run("an event stream following a request posted before it gets the whole answer and ends", func(t *testing.T) {
		ctx := testenv.Context(t, 30*time.Second)
		run := runNode(t, ctx, "follow", cfg("token", ann, "conversation", "node-follow", "content", "[[tokens:12]]"), nil)
		r := run.one(t, "sse-refused", "")
		if r.HTTPStatus != 401 || r.Body == nil || r.Body.Error.Code != "unauthenticated" ||
			!strings.HasPrefix(r.ContentType, "application/json") || !strings.HasPrefix(r.WWWAuth, "Bearer") {
			t.Errorf("an event stream without a token: %s, want 401 in the JSON error shape, code unauthenticated, with a Bearer challenge", r.line)
		}
		id := run.one(t, "posted", "").RequestID
		var got []nodeFrame
		for _, e := range run.sse("follow") {
			if e.Event.HasID {
				got = append(got, *e.JSON)
			}
		}
		if len(got) == 0 || got[0].Type != string(events.TypeRunStarted) || got[len(got)-1].Type != string(events.TypeRunCompleted) {
			t.Fatalf("followed %+v, want run.started through run.completed; the run:\n%s", got, run)
		}
		if text, status := answerText(got, id); text != words(12) || status != string(events.StatusComplete) {
			t.Errorf("followed %q (%s), want the whole answer", text, status)
		}
		run.one(t, "sse-end", "follow")
	})

	t.Run("bad frames get error frames, and an oversized or non-UTF-8 frame the documented close code", func(t *testing.T) {
		ctx := testenv.Context(t, 30*time.Second)
		run := runNode(t, ctx, "errors", cfg("token", ann), nil)
		for _, conn := range []string{"no-token", "bad-token"} {
			f, r := run.one(t, "upgrade-failed", conn), run.one(t, "refused", conn)
			if f.HTTPStatus != 401 || r.Body == nil || r.Body.Error.Code != "unauthenticated" ||
				!strings.HasPrefix(r.ContentType, "application/json") || !strings.HasPrefix(r.WWWAuth, "Bearer") {
				t.Errorf("upgrade %s: %s, want 401 in the JSON error shape, code unauthenticated, with a Bearer challenge", conn, r.line)
			}
		}
		if fr := run.frames("query-token"); len(fr) == 0 || fr[0].Type != "subscribed" {
			t.Errorf("with ?access_token=: %+v, want subscribed", fr)
		}
		steps := map[string]nodeFrame{}
		var both []nodeFrame
		for _, o := range run {
			if o.Obs == "step" && o.Frame != nil {
				steps[o.Step] = *o.Frame
				if o.Step == "two subscribes" {
					both = append(both, *o.Frame)
				}
			}
		}
		// An error answering a subscribe or unsubscribe names its
		// conversation; one answering a frame that is not one does not.
		for step, conv := range map[string]string{"unknown op": "", "bad json": "", "not an object": "", "unknown member": "",
			"missing member": "", "bad conversation": "", "bad cursor": "c1", "subscribe again": "c1", "unsubscribe again": "c1"} {
			f, ok := steps[step]
			if !ok || f.Type != "error" || f.Code != "invalid_argument" || f.Message == "" || f.Conversation != conv {
				t.Errorf("%s: answered %+v, want an error frame of code invalid_argument with a message, conversation %q", step, f, conv)
			}
		}
		slices.SortFunc(both, func(a, b nodeFrame) int { return strings.Compare(a.Type, b.Type) })
		if len(both) != 2 || both[0].Type != "error" || both[0].Conversation != "c1" || both[1].Type != "subscribed" || both[1].Conversation != "c2" {
			t.Errorf("two subscribes at once, c2 replaying and c1 already subscribed: answered %+v, want subscribed c2 and an error naming c1", both)
		}
		if f := steps["ping"]; f.Type != "pong" {
			t.Errorf("a ping after the bad frames got %+v, want pong on the same connection", f)
		}
		for _, step := range []string{"subscribe", "subscribe after unsubscribe"} {
			if f := steps[step]; f.Type != "subscribed" || f.Conversation != "c1" {
				t.Errorf("%s: answered %+v, want subscribed", step, f)
			}
		}
		if f := steps["unsubscribe, ping"]; f.Type != "pong" {
			t.Errorf("unsubscribe then ping: the next frame is %+v, want the pong (nothing answers an unsubscribe)", f)
		}
		run.checkClose(t, "frames", 1000, "")
		run.checkClose(t, "big", 1009, "")
		sc := run.one(t, "self-check", "")
		if !sc.TextFrame || sc.Sent != sc.Received {
			t.Fatalf("ws sent %s as a text frame %v, a server received %s: the bytes are not what the test means to send", sc.Sent, sc.TextFrame, sc.Received)
		}
		run.checkClose(t, "utf8", 1007, "")
	})

	t.Run("another user's conversation of the same name is another conversation", func(t *testing.T) {
		bob := token("bob", time.Hour)
		// One name whose two conversations share a partition, one whose do
		// not: the owner's cursor is refused from another partition and
		// positions the other user's own conversation in the same one.
		names := map[bool]string{}
		for i := 0; len(names) < 2; i++ {
			conv := "node-shared-" + strconv.Itoa(i)
			same := topic.Home([]byte("acme/ann/"+conv), stackPartitions) == topic.Home([]byte("acme/bob/"+conv), stackPartitions)
			if _, ok := names[same]; !ok {
				names[same] = conv
			}
		}
		for _, samePartition := range []bool{false, true} {
			conv := names[samePartition]
			ctx := testenv.Context(t, 30*time.Second)
			run := runNode(t, ctx, "isolation", cfg("token", ann, "other", bob, "conversation", conv, "content", "only mine"), nil)
			var ids []string
			for _, o := range run {
				if o.Obs == "posted" {
					ids = append(ids, o.RequestID)
				}
			}
			if len(ids) != 2 {
				t.Fatalf("%s: posted %v, want two requests; the run:\n%s", conv, ids, run)
			}
			if text, _ := answerText(run.frames("owner"), ids[0]); text != "echo #1: only mine" {
				t.Errorf("%s: the owner's answer %q", conv, text)
			}
			other := run.frames("other")
			if len(other) == 0 || other[0].Type != "subscribed" {
				t.Fatalf("%s: the other user's subscription from earliest: %+v", conv, other)
			}
			for _, f := range other[1:] {
				if f.RequestID != ids[1] {
					t.Errorf("%s: the other user received %+v, of a request not theirs", conv, f)
				}
			}
			// One turn of the owner's in "the same" conversation, yet the
			// other user's history has only its own message.
			if text, status := answerText(other, ids[1]); text != "echo #1: only mine" || status != string(events.StatusComplete) {
				t.Errorf("%s: the other user's answer %q (%s), want echo #1: its own history only", conv, text, status)
			}
			byCursor := run.frames("other-cursor")
			switch {
			case len(byCursor) == 0:
				t.Fatalf("%s: no answer to a subscribe with the owner's cursor", conv)
			case !samePartition:
				if f := byCursor[0]; f.Type != "error" || f.Code != "invalid_argument" {
					t.Errorf("%s: a cursor of another conversation's partition was answered %+v, want invalid_argument", conv, f)
				}
			default:
				if byCursor[0].Type != "subscribed" {
					t.Fatalf("%s: a cursor of the same partition was answered %+v, want subscribed", conv, byCursor[0])
				}
				if text, _ := answerText(byCursor, ids[1]); text != "echo #1: only mine" {
					t.Errorf("%s: resumed from the owner's cursor, the other user folded %q", conv, text)
				}
				for _, f := range byCursor[1:] {
					if f.RequestID != ids[1] {
						t.Errorf("%s: resumed from the owner's cursor, the other user received %+v", conv, f)
					}
				}
			}
		}
	})

	t.Run("an expired token closes with 4401, its reconnection is refused 401, a fresh one subscribes", func(t *testing.T) {
		ctx := testenv.Context(t, 60*time.Second)
		// The token must still be valid when node, once started, opens the
		// connection: on a loaded machine that can take longer than the
		// token's life. A refused upgrade of the expiring connection is
		// then no finding: the run is repeated with a longer life.
		var run nodeRun
		for _, life := range []time.Duration{1500 * time.Millisecond, 5 * time.Second, 15 * time.Second} {
			var err error
			run, err = runNodeErr(t, ctx, "expiry", cfg("token", token("eve", life), "fresh", token("eve", time.Hour), "conversation", "node-expiry"), nil)
			if err == nil {
				break
			}
			if !slices.ContainsFunc(run, func(o nodeObs) bool { return o.Obs == "refused" && o.Conn == "expiring" && o.HTTPStatus == 401 }) {
				t.Fatal(err)
			}
			t.Logf("a token of %v expired before node opened its connection; again with a longer one", life)
		}
		run.checkClose(t, "expiring", 4401, "token expired")
		if f := run.one(t, "upgrade-failed", "same-token"); f.HTTPStatus != 401 {
			t.Errorf("reconnecting with the expired token: status %d, want 401", f.HTTPStatus)
		}
		if fr := run.frames("fresh-token"); len(fr) == 0 || fr[0].Type != "subscribed" {
			t.Errorf("with a fresh token: %+v, want subscribed", fr)
		}
	})

	// Last: it stops the stack.
	t.Run("the gateway shutting down closes with 1001", func(t *testing.T) {
		ctx := testenv.Context(t, 30*time.Second)
		run := runNode(t, ctx, "shutdown", cfg("token", ann, "conversation", "node-shutdown"), func(o nodeObs) {
			if o.Obs == "ready" {
				s.stop()
			}
		})
		run.checkClose(t, "stopping", 1001, "")
	})
}
