package replay_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/replay"
	"github.com/turnpike-dev/turnpike/pkg/turnpiketest"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// shout answers with the user's message in capitals and the request id it
// found in its context.
type shout struct{}

func (shout) Generate(ctx context.Context, in []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	r, _ := worker.RequestFromContext(ctx)
	return schema.AssistantMessage(strings.ToUpper(in[len(in)-1].Content)+" #"+r.RequestID, nil), nil
}

func (s shout) Stream(ctx context.Context, in []*schema.Message, opts ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	m, err := s.Generate(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	return schema.StreamReaderFromArray([]*schema.Message{m}), nil
}

func (s shout) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return s, nil }

// Past traffic (answered live by the default echo agent) replayed in
// shadow through a Go agent: one report line per request, answered by the
// new agent built for that request, with the request in its context.
func TestShadowReplayRunsAGoAgent(t *testing.T) {
	stack := turnpiketest.Start(t)
	c := stack.Client("carol")
	f := c.Follow("c1")
	ids := []string{c.Send("c1", "first"), c.Send("c1", "second")}
	for _, id := range ids {
		f.Run(id)
	}

	var mu sync.Mutex
	built := map[string]worker.Request{}
	agent := worker.WithAgentFactory(func(ctx context.Context, r worker.Request) (adk.Agent, error) {
		mu.Lock()
		built[r.RequestID] = r
		mu.Unlock()
		return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "shouter", Description: "shouts", Model: shout{}})
	})
	report := filepath.Join(t.TempDir(), "report.jsonl")
	var stdout, stderr bytes.Buffer
	code := replay.MainArgs([]string{"-mode", "shadow", "-kafka-brokers", strings.Join(stack.Brokers, ","), "-report", report},
		func(string) (string, bool) { return "", false }, &stdout, &stderr, agent)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var lines []struct {
		RequestID, Status, Answer, Agent, Conversation string
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var l struct {
			RequestID    string `json:"request_id"`
			Status       string `json:"status"`
			Answer       string `json:"answer"`
			Agent        string `json:"agent"`
			Conversation string `json:"conversation"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, struct{ RequestID, Status, Answer, Agent, Conversation string }(l))
	}
	if len(lines) != 2 {
		t.Fatalf("report %s", b)
	}
	for i, l := range lines {
		want := strings.ToUpper([]string{"first", "second"}[i]) + " #" + ids[i]
		if l.RequestID != ids[i] || l.Status != string(events.StatusComplete) || l.Answer != want || l.Agent != "shouter" {
			t.Errorf("line %d: %+v, want %s complete %q by shouter", i, l, ids[i], want)
		}
		if r := built[ids[i]]; r.Conversation != "c1" || r.User != "carol" {
			t.Errorf("the factory of %s got %+v", ids[i], r)
		}
	}
	stderr.Reset()
	hooksOnly := worker.WithPersist(func(bridge.Source) bool { return true })
	if code := replay.MainArgs([]string{"-mode", "shadow", "-kafka-brokers", strings.Join(stack.Brokers, ","), "-report", report + "2"},
		func(string) (string, bool) { return "", false }, &stdout, &stderr, hooksOnly); code != 2 || !strings.Contains(stderr.String(), "hook") {
		t.Errorf("a hook without an agent: exit %d, %q; want 2 naming the hook", code, stderr.String())
	}
	stderr.Reset()
	if code := replay.MainArgs([]string{"-mode", "shadow", "-agent", "direct", "-kafka-brokers", strings.Join(stack.Brokers, ","), "-report", report + "3"},
		func(string) (string, bool) { return "", false }, &stdout, &stderr, agent); code != 2 || !strings.Contains(stderr.String(), "agent direct") {
		t.Errorf("-agent direct beside a Go agent: exit %d, %q; want 2 naming -agent direct", code, stderr.String())
	}
}
