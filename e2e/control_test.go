package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
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

// waitTokens reads until requestID has streamed at least n token events.
func (w *watcher) waitTokens(ctx context.Context, requestID string, n int) {
	w.t.Helper()
	for got := 0; got < n; {
		e := w.next(ctx)
		if tok, ok := e.(*events.TokenEvent); ok && tok.RequestID == requestID {
			got++
		}
	}
}

func TestControlOfRuns(t *testing.T) {
	s := startStack(t, "")
	ann := s.client(t, "acme", "ann")

	t.Run("cancelling a running request persists its partial answer as cancelled", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		w := watch(t, ctx, ann, "cancel-running", "")
		id := send(t, ctx, ann, "cancel-running", "[[tokens:200]][[delay:20ms]]")
		w.waitTokens(ctx, id, 3)
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
		w := watch(t, ctx, ann, "cancel-queued", "")
		first := send(t, ctx, ann, "cancel-queued", "[[tokens:200]][[delay:20ms]]")
		second := send(t, ctx, ann, "cancel-queued", "second")
		third := send(t, ctx, ann, "cancel-queued", "third")
		w.waitTokens(ctx, first, 2)
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
		w := watch(t, ctx, ann, "cancel-one", "")
		first := send(t, ctx, ann, "cancel-one", "[[tokens:30]][[delay:20ms]]")
		second := send(t, ctx, ann, "cancel-one", "keep me")
		cancel(t, ctx, ann, "cancel-one", second)
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
		w := watch(t, ctx, ann, "reject", "")
		first := send(t, ctx, ann, "reject", "[[tokens:20]][[delay:20ms]]")
		w.waitTokens(ctx, first, 1)
		a, err := ann.Send(ctx, "reject", "not now", client.SendOptions{Strategy: "reject"})
		if err != nil {
			t.Fatal(err)
		}
		if r := w.until(ctx, a.RequestID); r.status != events.StatusRejected || r.started != 0 {
			t.Fatalf("rejected request: %+v", r)
		}
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
		w := watch(t, ctx, ann, "interrupt", "")
		first := send(t, ctx, ann, "interrupt", "[[tokens:200]][[delay:20ms]]")
		queued := send(t, ctx, ann, "interrupt", "queued")
		w.waitTokens(ctx, first, 2)
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
		w := watch(t, ctx, ann, "dup-running", "")
		a1, err := ann.Send(ctx, "dup-running", "[[tokens:20]][[delay:10ms]]", client.SendOptions{IdempotencyKey: "same", Strategy: "reject"})
		if err != nil {
			t.Fatal(err)
		}
		w.waitTokens(ctx, a1.RequestID, 1)
		a2, err := ann.Send(ctx, "dup-running", "[[tokens:20]][[delay:10ms]]", client.SendOptions{IdempotencyKey: "same", Strategy: "reject"})
		if err != nil || a2.RequestID != a1.RequestID {
			t.Fatalf("%+v %v", a2, err)
		}
		var statuses []events.Status
		for len(statuses) < 2 {
			if c, ok := w.next(ctx).(*events.RunCompletedEvent); ok && c.RequestID == a1.RequestID {
				statuses = append(statuses, c.Status)
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
