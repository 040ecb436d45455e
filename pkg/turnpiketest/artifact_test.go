package turnpiketest_test

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"io"
	"net/http"
	"strconv"
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

// chartPNG is a real PNG image, 4x4 pixels of one gray level.
func chartPNG(t *testing.T, level uint8) []byte {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, 4, 4))
	for i := range img.Pix {
		img.Pix[i] = level
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// chartAgent saves "chart.png", a PNG whose gray level is the run's
// question ("1", "2", …), then answers as the echo agent.
type chartAgent struct {
	adk.Agent
	t *testing.T
}

func (a chartAgent) Run(ctx context.Context, in *adk.AgentInput, opts ...adk.AgentRunOption) *adk.AsyncIterator[*adk.AgentEvent] {
	q := in.Messages[len(in.Messages)-1].Content
	level, _ := strconv.Atoi(q)
	if err := worker.ArtifactsFromContext(ctx).Save(ctx, "chart.png", "image/png", chartPNG(a.t, uint8(level))); err != nil {
		it, gen := adk.NewAsyncIteratorPair[*adk.AgentEvent]()
		gen.Send(&adk.AgentEvent{Err: err})
		gen.Close()
		return it
	}
	return a.Agent.Run(ctx, in, opts...)
}

// End to end (issue 28): a tool saves a chart twice; the client receives
// artifact.saved for version 1, then version 2, each before its run's
// run.completed; the latest version downloads byte-exact over HTTP, and
// version 1 stays readable with ?version=1.
func TestTheClientIsToldOfEachVersionOfAChartAndReadsEach(t *testing.T) {
	stack := turnpiketest.Start(t, worker.WithAgentFactory(func(ctx context.Context, r worker.Request) (adk.Agent, error) {
		a, err := newAgent(ctx, r)
		return chartAgent{Agent: a, t: t}, err
	}))
	alice := stack.Client("alice")
	f := alice.Follow("charts")
	for v := 1; v <= 2; v++ {
		run := f.Run(alice.Send("charts", strconv.Itoa(v*100)))
		if run.Status != events.StatusComplete {
			t.Fatalf("run %d: %+v", v, run)
		}
		var saved []events.ArtifactInfo
		for _, e := range run.Events {
			if a, ok := e.(*events.ArtifactSavedEvent); ok {
				saved = append(saved, a.Artifact)
			}
		}
		want := events.ArtifactInfo{Name: "chart.png", Version: int64(v), MIME: "image/png", Size: int64(len(chartPNG(t, uint8(v*100))))}
		if len(saved) != 1 || saved[0] != want {
			t.Fatalf("run %d: artifact.saved %+v, want %+v", v, saved, want)
		}
		if n := len(run.Events); n < 2 || run.Events[n-2].Type() != events.TypeArtifactSaved {
			t.Fatalf("run %d: artifact.saved is not right before run.completed", v)
		}
	}
	get := func(query string) (int, string, string, []byte) {
		t.Helper()
		req, err := http.NewRequest("GET", stack.IngestURL+"/v1/conversations/charts/artifacts/chart.png"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+alice.API.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("X-Artifact-Version"), b
	}
	if status, mime, v, body := get(""); status != 200 || mime != "image/png" || v != "2" || !bytes.Equal(body, chartPNG(t, 200)) {
		t.Fatalf("the latest chart.png: %d %s version %s, %d bytes; want 200 image/png version 2, the second chart byte-exact", status, mime, v, len(body))
	}
	if status, _, v, body := get("?version=1"); status != 200 || v != "1" || !bytes.Equal(body, chartPNG(t, 100)) {
		t.Fatalf("chart.png?version=1: %d version %s, %d bytes; want the first chart byte-exact", status, v, len(body))
	}
	if _, err := png.Decode(bytes.NewReader(chartPNG(t, 100))); err != nil {
		t.Fatalf("the chart is not a PNG: %v", err)
	}
}
