package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/testenv/stacktest"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/devstack"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// storedMessage is a message of GET …/messages with the fields of the
// contract's extensions (status, agent, usage).
type storedMessage struct {
	Seq       int64             `json:"seq"`
	Role      string            `json:"role"`
	Content   string            `json:"content"`
	RequestID string            `json:"request_id"`
	Agent     string            `json:"agent"`
	Status    string            `json:"status"`
	Usage     *events.Usage     `json:"usage"`
	Interrupt *events.Interrupt `json:"interrupt"`
}

func storedHistory(t *testing.T, ctx context.Context, c *client.Client, conv string) []storedMessage {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/v1/conversations/"+conv+"/messages?limit=200", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page struct {
		Messages []storedMessage `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("history %s: %d %v", conv, resp.StatusCode, err)
	}
	return page.Messages
}

// resume posts the user's answer to the interrupted request requestID.
func resume(t *testing.T, ctx context.Context, c *client.Client, conv, requestID, answer string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"request_id": requestID, "answer": answer})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/v1/conversations/"+conv+"/resume", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct {
		RequestID string `json:"request_id"`
		Status    string `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusAccepted || a.Status != "queued" {
		t.Fatalf("resume: %d %+v %v", resp.StatusCode, a, err)
	}
	return a.RequestID
}

func lastCompleted(t *testing.T, r run) *events.RunCompletedEvent {
	t.Helper()
	return r.events[len(r.events)-1].(*events.RunCompletedEvent)
}

func TestAgentsOnAnOpenAICompatibleModel(t *testing.T) {
	fake := newFakeOpenAI(t)
	s := startStack(t, "", withOpenAI(fake, "main-model"),
		withAgentConfig(t, `{"agent":{"name":"assistant","instruction":"Be brief.","tools":["ask_user","current_time"]}}`),
		withWorker(func(c *worker.Config) { c.CompactTokens, c.CompactKeep = 300, 2 }))
	ann := s.client(t, "acme", "ann")

	t.Run("the answer streams with its token usage on run.completed and in history", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		w := watch(t, ctx, ann, "oa-plain", "")
		id := send(t, ctx, ann, "oa-plain", "hello there")
		r := w.until(ctx, id)
		// Instruction and user message: 20 prompt tokens; 4 words.
		want := events.Usage{PromptTokens: 20, CompletionTokens: 4, TotalTokens: 24}
		if r.text != "openai says: hello there" || r.status != events.StatusComplete {
			t.Fatalf("streamed %q %s", r.text, r.status)
		}
		if u := lastCompleted(t, r).Usage; u == nil || *u != want {
			t.Fatalf("run.completed usage %+v, want %+v", u, want)
		}
		h := storedHistory(t, ctx, ann, "oa-plain")
		if len(h) != 2 || h[1].Usage == nil || *h[1].Usage != want || h[0].Usage != nil {
			t.Fatalf("history %+v: want the usage on the assistant message", h)
		}
	})

	t.Run("an error mid-stream persists the partial answer as incomplete with a notice", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		w := watch(t, ctx, ann, "oa-break", "")
		id := send(t, ctx, ann, "oa-break", "tell me [[break]]")
		r := w.until(ctx, id)
		if r.text != "half an " || r.status != events.StatusIncomplete || r.notices != 1 {
			t.Fatalf("streamed %q %s with %d notices", r.text, r.status, r.notices)
		}
		if h := storedHistory(t, ctx, ann, "oa-break"); len(h) != 2 || h[1].Content != "half an " || h[1].Status != "incomplete" {
			t.Fatalf("history %+v", h)
		}
	})

	t.Run("a 429 before any content is retried and then answered", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		w := watch(t, ctx, ann, "oa-429", "")
		id := send(t, ctx, ann, "oa-429", "[[429:2]] hi")
		r := w.until(ctx, id)
		if r.text != "openai says: [[429:2]] hi" || r.status != events.StatusComplete {
			t.Fatalf("streamed %q %s", r.text, r.status)
		}
		calls := 0
		for _, req := range fake.requests() {
			if strings.Contains(req.Messages[len(req.Messages)-1].Content, "[[429:2]]") {
				calls++
			}
		}
		if calls != 3 {
			t.Fatalf("the model was called %d times, want 2 rate-limited and 1 answered", calls)
		}
	})

	t.Run("ask_user interrupts the run and POST resume continues it in order", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		w := watch(t, ctx, ann, "oa-ask", "")
		id := send(t, ctx, ann, "oa-ask", "book a table [[ask]]")
		r := w.until(ctx, id)
		if r.status != events.StatusInterrupted || len(r.events) < 3 {
			t.Fatalf("completed %s: %v", r.status, r.events)
		}
		asked, ok := r.events[len(r.events)-2].(*events.RunInterruptedEvent)
		if !ok || asked.Interrupt != (events.Interrupt{Agent: "assistant", Tool: "ask_user", Question: "Which day?"}) {
			t.Fatalf("events %v: want run.interrupted asking which day", r.events)
		}
		h := storedHistory(t, ctx, ann, "oa-ask")
		if len(h) != 2 || h[1].Status != "interrupted" || h[1].Interrupt == nil || h[1].Interrupt.Question != "Which day?" {
			t.Fatalf("history %+v: want the interrupted answer with its question", h)
		}

		second := resume(t, ctx, ann, "oa-ask", id, "Friday")
		r = w.until(ctx, second)
		if r.text != "Booked for Friday." || r.status != events.StatusComplete {
			t.Fatalf("resumed run streamed %q %s", r.text, r.status)
		}
		h = storedHistory(t, ctx, ann, "oa-ask")
		if len(h) != 4 || h[2].Content != "Friday" || h[2].RequestID != second || h[3].Content != "Booked for Friday." || h[3].Status != "complete" {
			t.Fatalf("history after the resume %+v", h)
		}

		again := resume(t, ctx, ann, "oa-ask", id, "Saturday")
		r = w.until(ctx, again)
		if r.status != events.StatusRejected || r.notices != 1 || r.started != 0 {
			t.Fatalf("a second resume: %s, %d notices, %d starts; want rejected with a notice, not run", r.status, r.notices, r.started)
		}
		if h := storedHistory(t, ctx, ann, "oa-ask"); len(h) != 4 {
			t.Fatalf("a rejected resume persisted something: %+v", h)
		}
	})

	t.Run("a long conversation is compacted into a summary and keeps every message", func(t *testing.T) {
		t.Parallel()
		ctx := testenv.Context(t, 60*time.Second)
		w := watch(t, ctx, ann, "oa-long", "")
		pad := strings.Repeat("la ", 130) // about 100 tokens a message
		var last string
		for i := 1; i <= 4; i++ {
			last = send(t, ctx, ann, "oa-long", fmt.Sprintf("part %d %s", i, pad))
			if r := w.until(ctx, last); r.status != events.StatusComplete {
				t.Fatalf("part %d completed %s", i, r.status)
			}
		}
		var summarized bool
		var final fakeRequest
		for _, req := range fake.requests() {
			lastMsg := req.Messages[len(req.Messages)-1].Content
			if !req.Stream && strings.Contains(lastMsg, "Conversation:") && strings.Contains(lastMsg, "part 1 ") {
				summarized = true
			}
			if strings.HasPrefix(lastMsg, "part 4 ") {
				final = req
			}
		}
		if !summarized {
			t.Fatal("the summarizer was never asked to condense the conversation")
		}
		var sawSummary bool
		for _, m := range final.Messages {
			if m.Role == "system" && strings.HasPrefix(m.Content, "Summary of the earlier conversation:\nSUMMARY of ") {
				sawSummary = true
			}
			if strings.HasPrefix(m.Content, "part 1 ") {
				t.Fatalf("the last window still holds the first message")
			}
		}
		if !sawSummary {
			t.Fatalf("the last window %+v has no summary", final.Messages)
		}
		if h := storedHistory(t, ctx, ann, "oa-long"); len(h) != 8 {
			t.Fatalf("history holds %d messages, want all 8", len(h))
		}
	})
}

func TestASupervisorTransfersToASubAgentAndBack(t *testing.T) {
	fake := newFakeOpenAI(t)
	s := startStack(t, "", withOpenAI(fake, "boss"), withAgentConfig(t, `{
		"models": {"researcher": {"provider": "openai", "model": "researcher"}},
		"agent": {"name": "supervisor", "instruction": "Delegate research.",
			"sub_agents": [{"name": "researcher", "description": "Finds facts.", "model": "researcher"}]}
	}`))
	ctx := testenv.Context(t, 60*time.Second)
	ann := s.client(t, "acme", "ann")
	w := watch(t, ctx, ann, "team", "")
	id := send(t, ctx, ann, "team", "research this")
	r := w.until(ctx, id)
	// By default every agent's text is streamed, each token with its agent.
	var trail []string
	for _, e := range r.events {
		switch e := e.(type) {
		case *events.AgentTransferEvent:
			trail = append(trail, e.From+"->"+e.To)
		case *events.TokenEvent:
			if len(trail) == 0 || trail[len(trail)-1] != e.Agent+":" {
				trail = append(trail, e.Agent+":")
			}
		}
	}
	if got := strings.Join(trail, " "); got != "supervisor->researcher researcher: researcher->supervisor supervisor:" {
		t.Fatalf("transfers and token agents %q", got)
	}
	if r.text != "Facts found.The team says: facts found." || r.status != events.StatusComplete {
		t.Fatalf("streamed %q %s", r.text, r.status)
	}
	// Three model calls: the supervisor twice, the researcher once.
	if u := lastCompleted(t, r).Usage; u == nil || u.CompletionTokens != 1+2+5 {
		t.Fatalf("usage %+v, want the three calls' completion tokens (1+2+5)", u)
	}
	// And persisted: one assistant message per agent, in order, the run's
	// usage on the last.
	h := storedHistory(t, ctx, ann, "team")
	if len(h) != 3 || h[1].Content != "Facts found." || h[1].Agent != "researcher" || h[1].Usage != nil || h[1].Status != "complete" ||
		h[2].Content != "The team says: facts found." || h[2].Agent != "supervisor" || h[2].Usage == nil || h[2].Seq != 3 {
		t.Fatalf("history %+v: want the user message, the researcher's answer, then the supervisor's", h)
	}
}

func TestAnInvalidAgentConfigurationFailsAtStart(t *testing.T) {
	ctx := testenv.Context(t, 60*time.Second)
	path := filepath.Join(t.TempDir(), "agents.json")
	if err := os.WriteFile(path, []byte(`{"agent":{"name":"a","tools":["rm_rf"],"model":"gpt"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := stacktest.Config(t, "e2e")
	cfg.Worker.AgentFile = path
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Ready = func(devstack.Stack) { t.Error("the stack got ready") }
	err := devstack.Run(ctx, cfg)
	if err == nil {
		t.Fatal("the devstack started with an invalid agent configuration")
	}
	for _, want := range []string{path, `agent.tools[0]: unknown tool "rm_rf"`, `agent.model: "gpt" is not defined`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
}
