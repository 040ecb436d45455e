package worker

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/eino/schema"
)

func TestTheOpenAIModelTalksToTheConfiguredServer(t *testing.T) {
	t.Parallel()
	var gotAuth, gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read the request body: %v", err)
		}
		gotAuth, gotBody = r.Header.Get("Authorization"), string(b)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, line := range []string{
			`{"id":"1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi "},"finish_reason":null}]}`,
			`{"id":"1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"there"},"finish_reason":"stop"}]}`,
			`{"id":"1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}`,
			`[DONE]`,
		} {
			_, _ = io.WriteString(w, "data: "+line+"\n\n")
		}
	}))
	defer srv.Close()
	c := DefaultConfig()
	c.Model, c.OpenAIBaseURL, c.OpenAIAPIKey, c.OpenAIModel = "openai", srv.URL+"/v1", "k-1", "qwen"
	m, err := c.newModel()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sr, err := m.Stream(ctx, []*schema.Message{schema.UserMessage("hello")})
	if err != nil {
		t.Fatal(err)
	}
	var text string
	var usage *schema.TokenUsage
	for {
		msg, err := sr.Recv()
		if err != nil {
			break
		}
		text += msg.Content
		if msg.ResponseMeta != nil && msg.ResponseMeta.Usage != nil {
			usage = msg.ResponseMeta.Usage
		}
	}
	if text != "Hi there" || usage == nil || usage.TotalTokens != 9 {
		t.Fatalf("streamed %q with usage %+v", text, usage)
	}
	if gotAuth != "Bearer k-1" || !strings.Contains(gotBody, `"model":"qwen"`) || !strings.Contains(gotBody, `"include_usage":true`) {
		t.Fatalf("request: auth %q body %s", gotAuth, gotBody)
	}
	if c.modelLabel() != "qwen" {
		t.Errorf("modelLabel %q", c.modelLabel())
	}
}

func TestModelSettingsAreCheckedAtStart(t *testing.T) {
	t.Parallel()
	if _, err := (Config{Model: "openai"}).newModel(); err == nil || !strings.Contains(err.Error(), "TURNPIKE_OPENAI_MODEL") {
		t.Errorf("openai without a model name: %v", err)
	}
	cfg, err := parseAgentConfig([]byte(`{"models":{"a":{"provider":"openai","model":"x","api_key_env":"MISSING_KEY"},
		"b":{"provider":"echo"},"c":{"provider":"openai","model":"y"}},"agent":{"name":"r"}}`))
	if err != nil {
		t.Fatal(err)
	}
	env := func(string) string { return "" }
	if _, err := (Config{}).newAgentModels(cfg, env); err == nil || !strings.Contains(err.Error(), "models.a: api_key_env MISSING_KEY is not set") {
		t.Errorf("a missing key: %v", err)
	}
	env = func(k string) string { return map[string]string{"MISSING_KEY": "secret"}[k] }
	models, err := (Config{}).newAgentModels(cfg, env)
	if err != nil || len(models) != 3 {
		t.Fatalf("NewAgentModels = %d models, %v", len(models), err)
	}

	path := filepath.Join(t.TempDir(), "agents.json")
	if err := os.WriteFile(path, []byte(`{"agent":{"name":"r","tools":["nope"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.Brokers, c.MongoURI, c.MongoDB, c.Model, c.AgentFile = []string{"k:9092"}, "mongodb://m", "t", "openai", path
	err = c.Validate()
	for _, want := range []string{"TURNPIKE_OPENAI_MODEL is required", path, `agent.tools[0]: unknown tool "nope"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error does not say %q: %v", want, err)
		}
	}
}
