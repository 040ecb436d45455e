package worker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

func TestParseAgentConfigAcceptsAGoodFile(t *testing.T) {
	t.Parallel()
	c, err := worker.ParseAgentConfig([]byte(`{
		"models": {"fast": {"provider": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "qwen", "api_key_env": "VLLM_KEY"},
		           "local": {"provider": "echo"}},
		"agent": {"name": "supervisor", "instruction": "Route the question.", "tools": ["current_time"],
			"sub_agents": [{"name": "booker", "description": "Books tables.", "model": "fast", "tools": ["ask_user", "current_time"]},
			               {"name": "chatter", "description": "Small talk.", "model": "local", "sticky": true}]},
		"stream": ["supervisor", "booker"], "persist": ["*"],
		"summarizer": {"model": "fast", "instruction": "Be brief."}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Agent.SubAgents[0].Model != "fast" || c.Models["fast"].APIKeyEnv != "VLLM_KEY" || c.Summarizer.Instruction != "Be brief." ||
		c.Agent.SubAgents[0].Sticky || !c.Agent.SubAgents[1].Sticky {
		t.Fatalf("parsed %+v", c)
	}
}

func TestParseAgentConfigReportsEveryProblem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []string // each must appear in the error
	}{
		{"Not JSON is rejected.", `{"agent":`, []string{"decode"}},
		{"An unknown field is rejected.", `{"agent":{"name":"a","temperature":1}}`, []string{"unknown field"}},
		{"Trailing data is rejected.", `{"agent":{"name":"a"}} {}`, []string{"trailing"}},
		{"A sticky root agent is rejected.", `{"agent":{"name":"a","sticky":true}}`, []string{`agent.sticky: only a sub-agent can be sticky`}},
		{"Sticky takes a boolean only.", `{"agent":{"name":"a","sub_agents":[{"name":"b","description":"d","sticky":"yes"}]}}`, []string{"decode"}},
		{"Every problem is reported at once, with where it is.", `{
			"models": {"default": {"provider": "echo"}, "bad": {"provider": "anthropic"}, "nomodel": {"provider": "openai", "base_url": "ftp://x"}},
			"agent": {"name": "bad name", "model": "missing", "tools": ["rm_rf", "current_time", "current_time"], "max_iterations": -1,
				"sub_agents": [{"name": "helper"}, {"name": "helper", "description": "again", "sub_agents": [{"name": "deep", "description": "d"}]}]},
			"stream": ["nobody"], "persist": ["helper", "ghost"],
			"summarizer": {"model": "nowhere"}
		}`, []string{
			`models.default: "default" is TURNPIKE_MODEL's model`,
			`models.bad: provider "anthropic"`,
			`models.nomodel: model is required`,
			`models.nomodel: base_url "ftp://x"`,
			`agent.name: "bad name"`,
			`agent.model: "missing" is not defined`,
			`agent.tools[0]: unknown tool "rm_rf" (built-in tools: ask_user, current_time, search_memory)`,
			`agent.tools[2]: tool "current_time" listed twice`,
			`agent.max_iterations: -1 < 0`,
			`agent.sub_agents[0].description: required`,
			`agent.sub_agents[1].name: "helper" is used by two agents`,
			`agent.sub_agents[1].sub_agents: only the root agent`,
			`stream[0]: "nobody" is not an agent`,
			`persist[1]: "ghost" is not an agent`,
			`summarizer.model: "nowhere" is not defined`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := worker.ParseAgentConfig([]byte(tt.in))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestLoadAgentConfigNamesTheFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "agents.json")
	if err := os.WriteFile(path, []byte(`{"agent":{"name":""}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := worker.LoadAgentConfig(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "agent.name") {
		t.Fatalf("LoadAgentConfig: %v", err)
	}
	if _, err := worker.LoadAgentConfig(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Fatal("a missing file was accepted")
	}
}

func TestNewFailsWhenTheConfigNamesAModelThatWasNotBuilt(t *testing.T) {
	t.Parallel()
	m, _ := echo.New(echo.Config{})
	cfg, err := worker.ParseAgentConfig([]byte(`{"models":{"x":{"provider":"echo"}},"agent":{"name":"a","model":"x"}}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = worker.NewConsumer(worker.Config{Brokers: []string{"127.0.0.1:1"}}, worker.Deps{Store: history.NewMemoryStore(), Model: m, Agent: cfg})
	if err == nil || !strings.Contains(err.Error(), `model "x"`) {
		t.Fatalf("New: %v", err)
	}
}
