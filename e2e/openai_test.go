package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/devstack"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// fakeOpenAI is a local OpenAI-compatible server speaking the streaming
// chat-completions protocol the way vLLM, the llama.cpp server and Ollama
// do: SSE "data:" chunks, usage in a last chunk with no choices (the
// client asks for it with stream_options.include_usage), "data: [DONE]".
// Its replies are scripted by directives in the conversation, like the
// echo model's:
//
//   - [[ask]]: call the ask_user tool ("Which day?"); with the tool's
//     result, answer "Booked for <answer>."
//   - [[break]]: stream two words, then an error event mid-stream.
//   - [[429:N]]: answer the first N calls of the conversation 429.
//   - model "boss": transfer to the researcher until it has said something,
//     then conclude; model "researcher": answer "Facts found.".
//   - a call without streaming (the summarizer's): a JSON completion
//     naming the lines it condensed.
//   - otherwise: "openai says: <the last user message>".
//
// Usage: prompt_tokens counts the request's messages, completion_tokens
// the words of the reply.
type fakeOpenAI struct {
	srv *httptest.Server

	mu       sync.Mutex // guards calls and rejected
	calls    []fakeRequest
	rejected map[string]int // 429s answered per first user message
}

type fakeMessage struct {
	Role       string `json:"role"`
	Content    string `json:"content"`
	ToolCallID string `json:"tool_call_id"`
}

type fakeRequest struct {
	Model         string        `json:"model"`
	Messages      []fakeMessage `json:"messages"`
	Stream        bool          `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

func newFakeOpenAI(t *testing.T) *fakeOpenAI {
	t.Helper()
	f := &fakeOpenAI{rejected: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the base URL clients are configured with.
func (f *fakeOpenAI) URL() string { return f.srv.URL + "/v1" }

func (f *fakeOpenAI) requests() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRequest(nil), f.calls...)
}

func (f *fakeOpenAI) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	var req fakeRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.calls = append(f.calls, req)
	first := ""
	for _, m := range req.Messages {
		if m.Role == "user" {
			first = m.Content
			break
		}
	}
	var n int
	if _, err := fmt.Sscanf(after(first, "[[429:"), "%d", &n); err == nil && f.rejected[first] < n {
		f.rejected[first]++
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":{"message":"rate limit reached, retry later","type":"rate_limit_error","code":"rate_limit"}}`))
		return
	}
	f.mu.Unlock()

	last := req.Messages[len(req.Messages)-1]
	lastUser := ""
	for _, m := range req.Messages {
		if m.Role == "user" {
			lastUser = m.Content
		}
	}
	if !req.Stream {
		// Only the summarizer calls Generate: one JSON completion.
		reply := fmt.Sprintf("SUMMARY of %d lines.", strings.Count(last.Content, "\n")-1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-2", "object": "chat.completion", "created": 1, "model": req.Model,
			"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": reply}, "finish_reason": "stop"}},
			"usage":   map[string]int{"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
		})
		return
	}
	s := newSSE(w, req)
	switch {
	case req.Model == "boss":
		for _, m := range req.Messages {
			if strings.Contains(m.Content, "[researcher] said:") {
				s.text("The team says: facts found.")
				return
			}
		}
		s.toolCall("call_transfer", "transfer_to_agent", `{"agent_name":"researcher"}`)
	case req.Model == "researcher":
		s.text("Facts found.")
	case last.Role == "tool" && last.ToolCallID == "call_ask":
		s.text("Booked for " + last.Content + ".")
	case strings.Contains(lastUser, "[[ask]]"):
		s.toolCall("call_ask", "ask_user", `{"question":"Which day?"}`)
	case strings.Contains(lastUser, "[[break]]"):
		s.chunk(`{"role":"assistant","content":"half "}`, "")
		s.chunk(`{"content":"an "}`, "")
		s.line(`{"error":{"message":"upstream connection lost","type":"server_error"}}`)
	default:
		s.text("openai says: " + lastUser)
	}
}

// after returns what follows marker in s ("" without it).
func after(s, marker string) string {
	_, rest, ok := strings.Cut(s, marker)
	if !ok {
		return ""
	}
	return rest
}

// sse writes one streamed completion.
type sse struct {
	w     http.ResponseWriter
	req   fakeRequest
	words int
}

func newSSE(w http.ResponseWriter, req fakeRequest) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, req: req}
}

func (s *sse) line(data string) {
	_, _ = fmt.Fprintf(s.w, "data: %s\n\n", data)
	s.w.(http.Flusher).Flush()
}

func (s *sse) chunk(delta, finish string) {
	fr := "null"
	if finish != "" {
		fr = `"` + finish + `"`
	}
	s.line(fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`,
		s.req.Model, delta, fr))
}

// end sends the usage chunk (when asked for) and [DONE].
func (s *sse) end() {
	if s.req.StreamOptions.IncludeUsage {
		p := 10 * len(s.req.Messages)
		s.line(fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			s.req.Model, p, s.words, p+s.words))
	}
	s.line("[DONE]")
}

func (s *sse) text(reply string) {
	s.chunk(`{"role":"assistant","content":""}`, "")
	for _, w := range strings.SplitAfter(reply, " ") {
		b, _ := json.Marshal(w)
		s.chunk(`{"content":`+string(b)+`}`, "")
		s.words++
	}
	s.chunk(`{}`, "stop")
	s.end()
}

func (s *sse) toolCall(id, name, args string) {
	a, _ := json.Marshal(args)
	s.chunk(fmt.Sprintf(`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":%q,"type":"function","function":{"name":%q,"arguments":%s}}]}`, id, name, a), "")
	s.words++
	s.chunk(`{}`, "tool_calls")
	s.end()
}

// withOpenAI runs the worker on the fake server (TURNPIKE_MODEL=openai).
func withOpenAI(f *fakeOpenAI, model string) stackOption {
	return func(c *devstack.Config) {
		c.Worker.Model, c.Worker.OpenAIBaseURL, c.Worker.OpenAIAPIKey, c.Worker.OpenAIModel = "openai", f.URL(), "test-key", model
	}
}

// withAgentConfig writes js as the agent configuration file
// (TURNPIKE_AGENT_CONFIG) and points the worker at it.
func withAgentConfig(t *testing.T, js string) stackOption {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agents.json")
	if err := os.WriteFile(path, []byte(js), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(c *devstack.Config) { c.Worker.AgentFile = path }
}

// withWorker changes the worker's settings.
func withWorker(f func(*worker.Config)) stackOption {
	return func(c *devstack.Config) { f(&c.Worker) }
}
