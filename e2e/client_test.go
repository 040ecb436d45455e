package e2e

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// cutProxy forwards TCP connections to target until cut closes them all.
type cutProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() { ln.Close(); p.cut(); p.wg.Wait() })
	return p
}

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(out, in); out.Close() }()
		go func() { defer p.wg.Done(); _, _ = io.Copy(in, out); in.Close() }()
	}
}

// cut drops every connection, as a network failure would.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func TestASubscriptionResumesAcrossDroppedConnectionsWithoutGapOrDuplicate(t *testing.T) {
	s := startStack(t, "")
	ctx := testenv.Context(t, 60*time.Second)
	c := s.client(t, "acme", "ann")
	proxy := newCutProxy(t, s.PushgwAddr)
	c.StreamURL = "ws://" + proxy.ln.Addr().String() + "/v1/stream"
	reconnects := 0
	sub, err := c.Subscribe(ctx, "drops", client.SubscribeOptions{OnReconnect: func(string) { reconnects++ }})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	sent := send(t, ctx, c, "drops", "[[tokens:60]][[delay:10ms]]")
	tokens := 0
	followAnswer(t, ctx, sub, sent, 60, func(e events.Event) {
		if e.Type() == events.TypeToken {
			if tokens++; tokens%15 == 0 {
				proxy.cut() // the network drops mid-answer
			}
		}
	})
	if reconnects < 2 {
		t.Fatalf("%d reconnections: the connection was not actually cut", reconnects)
	}
}

// followAnswer reads sub until the answer to request sent completes. It
// fails on a duplicate event, and unless the answer is the echo model's
// "w1 w2 … w<words>", complete. each, if set, sees every event first.
func followAnswer(t *testing.T, ctx context.Context, sub *client.Subscription, sent string, words int, each func(events.Event)) {
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
			want := "w1"
			for i := 2; i <= words; i++ {
				want += " w" + strconv.Itoa(i)
			}
			if r.Text != want || r.Status != events.StatusComplete {
				t.Fatalf("folded %q (%s), want the whole answer once", r.Text, r.Status)
			}
			return
		}
	}
}
