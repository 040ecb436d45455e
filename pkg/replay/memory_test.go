package replay

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// touchedMemory counts every call reaching a MemoryService.
type touchedMemory struct {
	history.MemoryService
	calls atomic.Int64
}

func (m *touchedMemory) Add(ctx context.Context, mm history.Memory) (bool, error) {
	m.calls.Add(1)
	return m.MemoryService.Add(ctx, mm)
}

func (m *touchedMemory) Search(ctx context.Context, tenant, user, query string, limit int) ([]history.MemoryHit, error) {
	m.calls.Add(1)
	return m.MemoryService.Search(ctx, tenant, user, query, limit)
}

// okModel answers "ok".
type okModel struct{}

func (okModel) Generate(context.Context, []*schema.Message, ...model.Option) (*schema.Message, error) {
	return schema.AssistantMessage("ok", nil), nil
}

func (okModel) Stream(context.Context, []*schema.Message, ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	return schema.StreamReaderFromArray([]*schema.Message{schema.AssistantMessage("ok", nil)}), nil
}

func (o okModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return o, nil }

// A shadow replay runs without long-term memory: an agent file that uses
// it is refused with a clear error, and the options' WithMemory service
// is neither searched nor written by the shadow runs.
func TestAShadowReplayRunsWithoutMemory(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	e := newEnv(t)
	ids := e.conversations(t, ctx, "mel", 2, 1)
	for _, js := range []string{`{"agent":{"name":"x","memory":{"inject":true}}}`, `{"agent":{"name":"x","tools":["search_memory"]}}`} {
		cfg := e.config(modeShadow, "memfile")
		cfg.AgentFile = filepath.Join(e.dir, "memory.json")
		if err := os.WriteFile(cfg.AgentFile, []byte(js), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := connect(ctx, cfg, io.Discard, nil)
		if !errors.Is(err, worker.ErrNoMemoryService) || !strings.Contains(err.Error(), "a shadow replay runs without long-term memory") {
			t.Fatalf("a file using memory (%s): %v; want the shadow replay's refusal", js, err)
		}
	}

	mem := &touchedMemory{MemoryService: history.NewInMemoryMemory()}
	cfg := e.config(modeShadow, "memgo")
	replayAll(t, ctx, cfg, len(ids), []worker.Option{
		worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
			return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "a", Description: "ok", Model: okModel{}})
		}),
		worker.WithMemory(mem, worker.MemoryConfig{Inject: true}),
	})
	if n := mem.calls.Load(); n != 0 {
		t.Fatalf("the shadow runs called the options' memory service %d times; want none", n)
	}
}

// touchedArtifacts counts the calls of a service's writes.
type touchedArtifacts struct {
	history.ArtifactService
	calls atomic.Int64
}

func (a *touchedArtifacts) Stage(ctx context.Context, id events.Identity, s history.ArtifactSave) (string, error) {
	a.calls.Add(1)
	return a.ArtifactService.Stage(ctx, id, s)
}

func (a *touchedArtifacts) Publish(ctx context.Context, id events.Identity, tokens []string) ([]history.Artifact, error) {
	a.calls.Add(1)
	return a.ArtifactService.Publish(ctx, id, tokens)
}

// A shadow replay given WithArtifacts runs without artifacts: the
// replayed runs would save into, and publish in, the live store. Its
// agents find no artifacts in their context.
func TestAShadowReplayRunsWithoutArtifacts(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	e := newEnv(t)
	ids := e.conversations(t, ctx, "art", 2, 1)
	arts := &touchedArtifacts{ArtifactService: history.NewMemoryArtifacts(history.ArtifactLimits{})}
	var saw atomic.Int64
	cfg := e.config(modeShadow, "artgo")
	replayAll(t, ctx, cfg, len(ids), []worker.Option{
		worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
			if a := worker.ArtifactsFromContext(ctx); a != nil {
				saw.Add(1)
				if err := a.Save(ctx, "shadow.txt", "text/plain", []byte("replayed")); err != nil {
					return nil, err
				}
			}
			return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "a", Description: "ok", Model: okModel{}})
		}),
		worker.WithArtifacts(arts),
	})
	if n, c := saw.Load(), arts.calls.Load(); n != 0 || c != 0 {
		t.Fatalf("the shadow runs saw artifacts %d times and called the options' service %d times; want none", n, c)
	}
}

// replayAll runs the shadow replay of cfg with opts and checks that it
// completed each of its want requests.
func replayAll(t *testing.T, ctx context.Context, cfg config, want int, opts []worker.Option) {
	t.Helper()
	d, closeDeps, err := connect(ctx, cfg, io.Discard, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeDeps)
	sum, err := runReplay(ctx, cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Completed != int64(want) {
		t.Fatalf("completed %d, want %d", sum.Completed, want)
	}
}
