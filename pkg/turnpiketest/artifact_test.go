package turnpiketest_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/cloudwego/eino/adk"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/turnpiketest"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// savingAgent saves "chart.png" (the run's question as its content)
// through the run's artifact service, then answers as the echo agent.
type savingAgent struct{ adk.Agent }

func (a savingAgent) Run(ctx context.Context, in *adk.AgentInput, opts ...adk.AgentRunOption) *adk.AsyncIterator[*adk.AgentEvent] {
	arts := worker.ArtifactsFromContext(ctx)
	var err error
	if arts == nil {
		err = worker.ErrNoArtifacts
	} else {
		err = arts.Save(ctx, "chart.png", "image/png", []byte(in.Messages[len(in.Messages)-1].Content))
	}
	if err != nil {
		it, gen := adk.NewAsyncIteratorPair[*adk.AgentEvent]()
		gen.Send(&adk.AgentEvent{Err: err})
		gen.Close()
		return it
	}
	return a.Agent.Run(ctx, in, opts...)
}

// The in-process stack wires the artifact service: a run's save is
// served by ingest's artifact routes once the run completed, byte-exact,
// to its user only.
func TestTheStackServesARunsArtifacts(t *testing.T) {
	stack := turnpiketest.Start(t, worker.WithAgentFactory(func(ctx context.Context, r worker.Request) (adk.Agent, error) {
		a, err := newAgent(ctx, r)
		return savingAgent{a}, err
	}))
	alice, bob := stack.Client("alice"), stack.Client("bob")
	f := alice.Follow("c1")
	if run := f.Run(alice.Send("c1", "PNG chart ✓")); run.Status != events.StatusComplete {
		t.Fatalf("run %+v", run)
	}
	get := func(c *turnpiketest.Client) (int, string, string) {
		t.Helper()
		req, err := http.NewRequest("GET", stack.IngestURL+"/v1/conversations/c1/artifacts/chart.png", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+c.API.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	if status, mime, body := get(alice); status != 200 || mime != "image/png" || body != "PNG chart ✓" {
		t.Fatalf("alice's chart.png: %d %s %q; want 200 image/png with the saved bytes", status, mime, body)
	}
	if status, _, body := get(bob); status != 404 {
		t.Fatalf("bob's GET of alice's chart.png: %d %q; want 404", status, body)
	}
}
