package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/testenv/stacktest"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

func TestASubscriptionResumesAcrossDroppedConnectionsWithoutGapOrDuplicate(t *testing.T) {
	gates := stacktest.NewGates()
	s := gatedStack(t, gates)
	for _, sse := range []bool{false, true} {
		name := "WebSocket"
		if sse {
			name = "Server-Sent Events"
		}
		t.Run(name, func(t *testing.T) { resumeThroughCuts(t, s, gates, sse) })
	}
}

// resumeThroughCuts follows an answer through a proxy that drops every
// connection after each 15 words, over a WebSocket or (sse) event streams.
// The answer is held at a gate after each 15 words until the connection
// is dropped; the next 15 are streamed (a watcher beside the proxy sees
// them) before the client can reconnect, so its resume must bring them.
func resumeThroughCuts(t *testing.T, s *stack, gates *stacktest.Gates, sse bool) {
	ctx := testenv.Context(t, 60*time.Second)
	c := s.client(t, "acme", "ann")
	direct := s.client(t, "acme", "ann")
	proxy := newTCPProxy(t, s.PushgwAddr, 100*time.Millisecond)
	c.StreamURL = "ws://" + proxy.addr() + "/v1/stream"
	conv := "drops"
	if sse {
		c.EventsURL, conv = "http://"+proxy.addr(), "drops-sse"
	}
	const every, total = 15, 60
	gate := gates.Hold(conv, every)
	reconnects := 0
	sub, err := c.Subscribe(ctx, conv, client.SubscribeOptions{SSE: sse, OnReconnect: func(string) { reconnects++ }})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	beside := watch(t, ctx, direct, conv, "")
	var besideText strings.Builder
	sent := send(t, ctx, c, conv, fmt.Sprintf("[[tokens:%d]][[delay:1ms]]", total))
	var text strings.Builder
	cuts := 0
	followAnswer(t, ctx, sub, sent, total, func(e events.Event) {
		if tok, ok := e.(*events.TokenEvent); ok {
			text.WriteString(tok.Delta)
			// However the bridge grouped the words, the answer waits at the
			// gate once it has streamed (cuts+1)*every of them: its last
			// word is then w<(cuts+1)*every> (a resume that lost words
			// still gets there, and followAnswer says what is missing).
			held := (cuts + 1) * every
			if f := strings.Fields(text.String()); held < total && len(f) > 0 && f[len(f)-1] == fmt.Sprintf("w%d", held) {
				cuts++
				proxy.drop() // the network drops mid-answer
				gate.Allow(every)
				for len(strings.Fields(besideText.String())) < held+every {
					if tok, ok := beside.next(ctx).(*events.TokenEvent); ok && tok.RequestID == sent {
						besideText.WriteString(tok.Delta)
					}
				}
			}
		}
	})
	if cuts != total/every-1 || reconnects < cuts {
		t.Fatalf("%d cuts, %d reconnections: want %d, each followed by a reconnection", cuts, reconnects, total/every-1)
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
