package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/testenv/stacktest"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// cancel posts a cancel, of one request when requestID is set.
func cancel(t *testing.T, ctx context.Context, c *client.Client, conv, requestID string) {
	t.Helper()
	body := "{}"
	if requestID != "" {
		body = fmt.Sprintf(`{"request_id":%q}`, requestID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/v1/conversations/"+conv+"/cancel", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: %d", resp.StatusCode)
	}
}

// waitWords reads until requestID has streamed at least n words, however
// the bridge grouped them into token events.
func (w *watcher) waitWords(ctx context.Context, requestID string, n int) {
	w.t.Helper()
	var text strings.Builder
	for len(strings.Fields(text.String())) < n {
		e := w.next(ctx)
		if tok, ok := e.(*events.TokenEvent); ok && tok.RequestID == requestID {
			text.WriteString(tok.Delta)
		}
	}
}

func TestControlOfRuns(t *testing.T) {
	// Each answer that must still run when the test acts on it is held at a
	// gate after its first words: it ends only when cancelled or released.
	gates := stacktest.NewGates()
	s := gatedStack(t, gates)
	ann := s.client(t, "acme", "ann")

	t.Run("cancelling a running request persists its partial answer as cancelled", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		gates.Hold("cancel-running", 3)
		w := watch(t, ctx, ann, "cancel-running", "")
		id := send(t, ctx, ann, "cancel-running", "[[tokens:200]][[delay:1ms]]")
		w.waitWords(ctx, id, 3)
		cancel(t, ctx, ann, "cancel-running", "")
		r := w.until(ctx, id)
		if r.status != events.StatusCancelled {
			t.Fatalf("completed %s, want cancelled", r.status)
		}
		h := historyOf(t, ctx, ann, "cancel-running")
		if len(h) != 2 || h[1].Status != "cancelled" || !h[1].Incomplete || !strings.HasPrefix(h[1].Content, "w1 w2 w3") || strings.Contains(h[1].Content, "w200") {
			t.Fatalf("history %+v: want the partial answer, cancelled", h)
		}
	})

	t.Run("cancelling queued requests completes them cancelled without running", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		gates.Hold("cancel-queued", 2)
		w := watch(t, ctx, ann, "cancel-queued", "")
		first := send(t, ctx, ann, "cancel-queued", "[[tokens:200]][[delay:1ms]]")
		second := send(t, ctx, ann, "cancel-queued", "second")
		third := send(t, ctx, ann, "cancel-queued", "third")
		w.waitWords(ctx, first, 2)
		cancel(t, ctx, ann, "cancel-queued", "")
		after := send(t, ctx, ann, "cancel-queued", "after the cancel")
		for _, id := range []string{first, second, third} {
			r := w.until(ctx, id)
			if r.status != events.StatusCancelled {
				t.Fatalf("%s completed %s, want cancelled", id, r.status)
			}
			if id != first && r.started != 0 {
				t.Fatalf("queued request %s ran", id)
			}
		}
		if r := w.until(ctx, after); r.status != events.StatusComplete || r.text != "echo #2: after the cancel" {
			t.Fatalf("a request posted after the cancel: %+v", r)
		}
		if h := historyOf(t, ctx, ann, "cancel-queued"); len(h) != 4 {
			t.Fatalf("history %+v: want the cancelled partial turn and the later one", h)
		}
	})

	t.Run("cancelling one request by id leaves the others", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		gate := gates.Hold("cancel-one", 1)
		w := watch(t, ctx, ann, "cancel-one", "")
		first := send(t, ctx, ann, "cancel-one", "[[tokens:30]][[delay:1ms]]")
		second := send(t, ctx, ann, "cancel-one", "keep me")
		cancel(t, ctx, ann, "cancel-one", second) // recorded when it returns: before second can start
		gate.Release()
		if r := w.until(ctx, first); r.status != events.StatusComplete {
			t.Fatalf("first: %s", r.status)
		}
		if r := w.until(ctx, second); r.status != events.StatusCancelled || r.started != 0 {
			t.Fatalf("second: %+v", r)
		}
	})

	t.Run("reject completes a request rejected while another is running", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		gate := gates.Hold("reject", 1)
		w := watch(t, ctx, ann, "reject", "")
		first := send(t, ctx, ann, "reject", "[[tokens:20]][[delay:1ms]]")
		w.waitWords(ctx, first, 1)
		a, err := ann.Send(ctx, "reject", "not now", client.SendOptions{Strategy: "reject"})
		if err != nil {
			t.Fatal(err)
		}
		if r := w.until(ctx, a.RequestID); r.status != events.StatusRejected || r.started != 0 {
			t.Fatalf("rejected request: %+v", r)
		}
		gate.Release()
		if r := w.until(ctx, first); r.status != events.StatusComplete {
			t.Fatalf("the running request: %s", r.status)
		}
		a, err = ann.Send(ctx, "reject", "now", client.SendOptions{Strategy: "reject"})
		if err != nil {
			t.Fatal(err)
		}
		if r := w.until(ctx, a.RequestID); r.status != events.StatusComplete || r.text != "echo #2: now" {
			t.Fatalf("reject with nothing running: %+v", r)
		}
	})

	t.Run("interrupt cancels the running request, then runs", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		gates.Hold("interrupt", 2)
		w := watch(t, ctx, ann, "interrupt", "")
		first := send(t, ctx, ann, "interrupt", "[[tokens:200]][[delay:1ms]]")
		queued := send(t, ctx, ann, "interrupt", "queued")
		w.waitWords(ctx, first, 2)
		a, err := ann.Send(ctx, "interrupt", "instead", client.SendOptions{Strategy: "interrupt"})
		if err != nil {
			t.Fatal(err)
		}
		if r := w.until(ctx, first); r.status != events.StatusCancelled {
			t.Fatalf("interrupted request: %s", r.status)
		}
		if r := w.until(ctx, queued); r.status != events.StatusCancelled || r.started != 0 {
			t.Fatalf("queued request: %+v", r)
		}
		if r := w.until(ctx, a.RequestID); r.status != events.StatusComplete || r.text != "echo #2: instead" {
			t.Fatalf("interrupting request: %+v", r)
		}
	})

	t.Run("a duplicate POST while the original runs ends in one turn and completes as the original", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		gate := gates.Hold("dup-running", 1)
		w := watch(t, ctx, ann, "dup-running", "")
		a1, err := ann.Send(ctx, "dup-running", "[[tokens:20]][[delay:1ms]]", client.SendOptions{IdempotencyKey: "same", Strategy: "reject"})
		if err != nil {
			t.Fatal(err)
		}
		w.waitWords(ctx, a1.RequestID, 1)
		a2, err := ann.Send(ctx, "dup-running", "[[tokens:20]][[delay:1ms]]", client.SendOptions{IdempotencyKey: "same", Strategy: "reject"})
		if err != nil || a2.RequestID != a1.RequestID {
			t.Fatalf("%+v %v", a2, err)
		}
		// A request rejected behind the duplicate shows that the worker read
		// the duplicate (the partition's order) while the original was held.
		probe, err := ann.Send(ctx, "dup-running", "probe", client.SendOptions{Strategy: "reject"})
		if err != nil {
			t.Fatal(err)
		}
		var statuses []events.Status
		for probed := false; len(statuses) < 2; {
			c, ok := w.next(ctx).(*events.RunCompletedEvent)
			switch {
			case !ok:
			case c.RequestID == a1.RequestID:
				statuses = append(statuses, c.Status)
			case c.RequestID == probe.RequestID && !probed:
				if c.Status != events.StatusRejected {
					t.Fatalf("probe completed %s, want rejected", c.Status)
				}
				probed = true
				gate.Release()
			}
		}
		if statuses[0] != events.StatusComplete || statuses[1] != events.StatusComplete {
			t.Fatalf("completions %v: a duplicate must complete as the original, never rejected", statuses)
		}
		if h := historyOf(t, ctx, ann, "dup-running"); len(h) != 2 {
			t.Fatalf("history %+v: want one turn", h)
		}
	})
}
