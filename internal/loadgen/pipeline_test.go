package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

func TestReaderSortsFramesIntoViolationsAndErrors(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 10*time.Second)
	frames := []string{
		`{"type":"subscribed","conversation":"c1"}`,
		`{"type":"subscribed","conversation":"c-other"}`,
		string(events.AppendEvent(nil, &events.TokenEvent{Meta: events.Meta{Conversation: "c-other", RequestID: "r", RunID: "u", Seq: 1, TS: 1}, Delta: "x", Agent: "a", Role: "assistant"})),
		`not json`,
		`{"type":"token","conversation":"c1","seq":1,"ts":1,"delta":"x"}`,
		`{"type":"mystery","conversation":"c1","request_id":"r","run_id":"u","seq":1,"ts":1}`,
		`{"type":"error","code":"invalid_argument","message":"bad frame"}`,
		`{"type":"pong"}`,
	}
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		for _, f := range frames {
			_ = ws.WriteMessage(websocket.TextMessage, []byte(f))
		}
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(4008, "too slow"), time.Now().Add(time.Second))
	}))
	defer srv.Close()

	var vs, es tally
	p := &pipeline{violations: &vs, errs: &es}
	cl := &client.Client{StreamURL: "ws" + strings.TrimPrefix(srv.URL, "http"), Token: "t"}
	cv := &conversation{name: "c1", check: newConvCheck("c1", "x", &vs), subscribed: make(chan struct{})}
	c := &connection{cl: cl, convs: map[string]*conversation{"c1": cv}, dead: make(chan struct{})}
	ws, err := cl.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	c.ws = ws
	p.read(c)

	select {
	case <-cv.subscribed:
	default:
		t.Error("the subscribed frame did not mark c1 subscribed")
	}
	select {
	case <-c.dead:
	default:
		t.Error("dead not closed when the reader returned")
	}
	if want := map[string]int64{KindForeignEvent: 2, KindBadFrame: 3}; !maps.Equal(vs.snapshot().ByKind, want) {
		t.Errorf("violations %v, want %v", vs.snapshot(), want)
	}
	if want := map[string]int64{"ws_error_frame": 1, "ws_close_4008": 1}; !maps.Equal(es.snapshot().ByKind, want) {
		t.Errorf("errors %v, want %v", es.snapshot(), want)
	}
}

// fakeHistory serves GET …/messages over msgs with the ingest API's paging.
func fakeHistory(t *testing.T, msgs []client.Message) *client.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		before, _ := strconv.ParseInt(r.URL.Query().Get("before"), 10, 64)
		var older []client.Message
		for _, m := range msgs {
			if before == 0 || m.Seq < before {
				older = append(older, m)
			}
		}
		page := client.HistoryPage{Messages: older[max(0, len(older)-limit):]}
		if len(older) > limit {
			nb := page.Messages[0].Seq
			page.NextBefore = &nb
		}
		_ = json.NewEncoder(w).Encode(page)
	}))
	t.Cleanup(srv.Close)
	return &client.Client{BaseURL: srv.URL, Token: "t"}
}

func TestCheckHistoryPagesThroughAndComparesEveryMessage(t *testing.T) {
	t.Parallel()
	const turns = 225 // 450 messages: three pages of at most 200
	cfg := Config{Tokens: 3, Delay: 0}
	build := func() []client.Message {
		var msgs []client.Message
		for i := 1; i <= turns; i++ {
			rid := fmt.Sprintf("r%d", i)
			msgs = append(msgs,
				client.Message{Seq: int64(2*i - 1), Role: "user", Content: cfg.content(i), RequestID: rid},
				client.Message{Seq: int64(2 * i), Role: "assistant", Content: "w1 w2 w3", RequestID: rid, Status: "complete"})
		}
		return msgs
	}
	tests := []struct {
		name   string
		change func([]client.Message) []client.Message
		want   map[string]int64
	}{
		{"The history of a clean conversation has no violation.", func(m []client.Message) []client.Message { return m }, map[string]int64{}},
		{"A wrong assistant text is a history_message violation.", func(m []client.Message) []client.Message {
			m[301].Content = "w1 w2"
			return m
		}, map[string]int64{KindHistoryMessage: 1}},
		{"An incomplete assistant message is a history_message violation.", func(m []client.Message) []client.Message {
			m[3].Status, m[3].Incomplete = "incomplete", true
			return m
		}, map[string]int64{KindHistoryMessage: 1}},
		{"A user message of another request is a history_message violation.", func(m []client.Message) []client.Message {
			m[0].RequestID = "r9"
			return m
		}, map[string]int64{KindHistoryMessage: 1}},
		{"A lost message is a history_count violation and shifts the seqs.", func(m []client.Message) []client.Message {
			return append(m[:100:100], m[101:]...)
		}, map[string]int64{KindHistoryCount: 1, KindHistorySeq: 1, KindHistoryMessage: 349}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testenv.Context(t, 10*time.Second)
			var vs, es tally
			p := &pipeline{cfg: cfg, violations: &vs, errs: &es}
			cv := &conversation{name: "c1", cl: fakeHistory(t, tc.change(build())), check: newConvCheck("c1", "w1 w2 w3", &vs)}
			for i := 1; i <= turns; i++ {
				cv.check.accepted(cv.check.begin(cfg.content(i)), fmt.Sprintf("r%d", i))
			}
			if !p.checkHistory(ctx, cv) {
				t.Fatalf("checkHistory gave up: errors %+v", es.snapshot())
			}
			if got := vs.snapshot().ByKind; !maps.Equal(got, tc.want) {
				t.Errorf("violations %v, want %v (first %+v)", got, tc.want, vs.snapshot().First)
			}
		})
	}
}

func TestClassifyRetriesOnlyWhatMaySucceedLater(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		err       error
		kind      string
		retry     bool
		wantAfter time.Duration
	}{
		{"A 429 is retried after its Retry-After.", &client.APIError{Status: 429, Code: "rate_limited", RetryAfter: 2 * time.Second}, "http_429_rate_limited", true, 2 * time.Second},
		{"A 503 without Retry-After is retried soon.", &client.APIError{Status: 503, Code: "unavailable"}, "http_503_unavailable", true, 100 * time.Millisecond},
		{"A 400 is not retried.", &client.APIError{Status: 400, Code: "invalid_argument"}, "http_400_invalid_argument", false, 100 * time.Millisecond},
		{"A transport error is retried.", fmt.Errorf("turnpike: %w", context.DeadlineExceeded), "http_timeout", true, 100 * time.Millisecond},
	}
	for _, tc := range tests {
		kind, retry, after := classify(tc.err)
		if kind != tc.kind || retry != tc.retry || after != tc.wantAfter {
			t.Errorf("%s: got %s %v %v", tc.name, kind, retry, after)
		}
	}
}
