package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

func TestASubscriptionResumesAcrossDroppedConnectionsWithoutGapOrDuplicate(t *testing.T) {
	s := startStack(t, "")
	for _, sse := range []bool{false, true} {
		name := "WebSocket"
		if sse {
			name = "Server-Sent Events"
		}
		t.Run(name, func(t *testing.T) { resumeThroughCuts(t, s, sse) })
	}
}

// resumeThroughCuts follows an answer through a proxy that drops every
// connection each 15 tokens, over a WebSocket or (sse) event streams.
func resumeThroughCuts(t *testing.T, s *stack, sse bool) {
	ctx := testenv.Context(t, 60*time.Second)
	c := s.client(t, "acme", "ann")
	proxy := newTCPProxy(t, s.PushgwAddr, 100*time.Millisecond) // ten tokens' time: a resume that missed them shows
	c.StreamURL = "ws://" + proxy.addr() + "/v1/stream"
	conv := "drops"
	if sse {
		c.EventsURL, conv = "http://"+proxy.addr(), "drops-sse"
	}
	reconnects := 0
	sub, err := c.Subscribe(ctx, conv, client.SubscribeOptions{SSE: sse, OnReconnect: func(string) { reconnects++ }})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	sent := send(t, ctx, c, conv, "[[tokens:60]][[delay:10ms]]")
	tokens := 0
	followAnswer(t, ctx, sub, sent, 60, func(e events.Event) {
		if e.Type() == events.TypeToken {
			if tokens++; tokens%15 == 0 {
				proxy.drop() // the network drops mid-answer
			}
		}
	})
	if reconnects < 2 {
		t.Fatalf("%d reconnections: the connection was not actually cut", reconnects)
	}
}

// followAnswer reads sub until the answer to request sent completes. It
// fails on a duplicate event, and unless the answer is the echo model's
// words(n), complete. each, if set, sees every event first.
func followAnswer(t *testing.T, ctx context.Context, sub *client.Subscription, sent string, n int, each func(events.Event)) {
	t.Helper()
	var tr client.Transcript
	seen := map[string]bool{}
	for {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen[e.Header().Cursor] {
			t.Fatalf("duplicate event %+v", e.Header())
		}
		seen[e.Header().Cursor] = true
		if each != nil {
			each(e)
		}
		if r := tr.Apply(e); r.RequestID == sent && r.Status != "" {
			if r.Text != words(n) || r.Status != events.StatusComplete {
				t.Fatalf("folded %q (%s), want the whole answer once", r.Text, r.Status)
			}
			return
		}
	}
}
