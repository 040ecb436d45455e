package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/cli"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// TestWatchSSEPrintsTheEventStream runs watch -sse against a gateway's
// event stream that carries one answer and then ends.
func TestWatchSSEPrintsTheEventStream(t *testing.T) {
	t.Parallel()
	var asked string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = r.URL.Path + "?" + r.URL.RawQuery + " " + r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "retry: 2000\n\nevent: subscribed\ndata: {\"type\":\"subscribed\",\"conversation\":\"c1\"}\n\n")
		meta := func(seq int64, cursor string) events.Meta {
			return events.Meta{Conversation: "c1", RequestID: "r1", RunID: "u1", Seq: seq, TS: 1, Cursor: cursor}
		}
		for _, e := range []events.Event{
			&events.RunStartedEvent{Meta: meta(1, "1-0-0")},
			&events.TokenEvent{Meta: meta(2, "1-0-1"), Delta: "hello ", Agent: "echo", Role: "assistant"},
			&events.TokenEvent{Meta: meta(3, "1-0-2"), Delta: "there", Agent: "echo", Role: "assistant"},
			&events.RunCompletedEvent{Meta: meta(4, "1-0-3"), Status: events.StatusComplete},
		} {
			fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", e.Header().Cursor, e.Type(), events.MarshalEvent(e))
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	stream := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/stream"
	code := cli.Run(ctx, []string{"watch", "-sse", "-since", "earliest", "-stream", stream, "-token", "t", "c1"}, env(), &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "the gateway ended the stream") {
		t.Errorf("exit %d, stderr %q; want 1 and that the stream ended", code, errOut.String())
	}
	want := "subscribed to c1\n[r1 run u1 started]\nhello there\n[r1 complete, cursor 1-0-3]\n"
	if out.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", out.String(), want)
	}
	if asked != "/v1/conversations/c1/events?since=earliest Bearer t" {
		t.Errorf("asked %q", asked)
	}
}
