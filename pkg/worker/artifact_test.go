package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// saveTool saves "chart.png" with the content of its n-th call ("png n")
// and reports whether the save was already readable in the run.
type saveTool struct{ calls *atomic.Int32 }

func (s saveTool) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{Name: "save", Desc: "saves a chart"}, nil
}

func (s saveTool) InvokableRun(ctx context.Context, _ string, _ ...tool.Option) (string, error) {
	n := s.calls.Add(1)
	a := worker.ArtifactsFromContext(ctx)
	if err := a.Save(ctx, "chart.png", "image/png", []byte(fmt.Sprintf("png %d", n))); err != nil {
		return "", err
	}
	list, err := a.List(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("saved, %d visible", len(list)), nil
}

func artifactStep(t *testing.T, svc history.ArtifactService, calls *atomic.Int32, say func(string) string) *worker.Step {
	t.Helper()
	return newStep(t, stepConfig(), worker.WithArtifacts(svc), worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		return toolAgent(ctx, toolThenSay("save", say), saveTool{calls: calls})
	}))
}

func expectVersions(t *testing.T, ctx context.Context, svc history.ArtifactService, id events.Identity, want ...string) {
	t.Helper()
	for v, w := range want {
		_, data, err := svc.OpenArtifact(ctx, id, "chart.png", v+1)
		if err != nil || string(data) != w {
			t.Fatalf("version %d = %q, %v; want %q", v+1, data, err, w)
		}
	}
	if a, _, err := svc.OpenArtifact(ctx, id, "chart.png", len(want)+1); !errors.Is(err, history.ErrNotFound) {
		t.Fatalf("version %d = %+v, %v; want none", len(want)+1, a, err)
	}
}

// A tool's save is not visible during its run, is version 1 once the turn
// commits, and the next run's save is version 2 with version 1 kept.
func TestAToolsSaveIsPublishedByTheTurnsCommit(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	svc := history.NewMemoryArtifacts(history.ArtifactLimits{})
	var calls atomic.Int32
	step := artifactStep(t, svc, &calls, echoResult)
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "charts"}
	res, err := step.Run(ctx, stepRequest(id, "r1", "chart"), store, newRecordingSink())
	if err != nil || res.Answer != "said saved, 0 visible" {
		t.Fatalf("run 1: %+v, %v; want the save invisible during the run", res, err)
	}
	expectVersions(t, ctx, svc, id, "png 1")
	if res, err := step.Run(ctx, stepRequest(id, "r2", "chart"), store, newRecordingSink()); err != nil || res.Answer != "said saved, 1 visible" {
		t.Fatalf("run 2: %+v, %v", res, err)
	}
	expectVersions(t, ctx, svc, id, "png 1", "png 2")
	if got := worker.ArtifactsFromContext(ctx); got != nil {
		t.Fatalf("ArtifactsFromContext outside a run = %v", got)
	}
	if err := (*worker.Artifacts)(nil).Save(ctx, "a", "text/plain", nil); !errors.Is(err, worker.ErrNoArtifacts) {
		t.Fatalf("Save on nil = %v", err)
	}
}

// A run that persists nothing (its answer is empty: discarded) publishes
// nothing, and its staged content is swept.
func TestASaveOfARunThatPersistedNothingIsNeverVisible(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	svc := history.NewMemoryArtifacts(history.ArtifactLimits{})
	var calls atomic.Int32
	step := artifactStep(t, svc, &calls, func(string) string { return "" })
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "lost"}
	res, err := step.Run(ctx, stepRequest(id, "r1", "chart"), history.NewMemoryStore(), newRecordingSink())
	if err != nil || res.Status != events.StatusDiscarded || calls.Load() != 1 {
		t.Fatalf("run: %+v, %v (%d saves); want discarded after a save", res, err, calls.Load())
	}
	expectVersions(t, ctx, svc, id)
	if n, err := svc.SweepArtifacts(ctx, time.Now().Add(time.Hour)); n != 1 || err != nil {
		t.Fatalf("sweep = %d, %v; want the staged save", n, err)
	}
}

// failingPublish fails its first Publish after the turn's commit (a crash
// between the commit and the publication).
type failingPublish struct {
	history.ArtifactService
	failed atomic.Bool
}

func (f *failingPublish) Publish(ctx context.Context, id events.Identity, tokens []string) ([]history.Artifact, error) {
	if f.failed.CompareAndSwap(false, true) {
		return nil, errors.New("store down")
	}
	return f.ArtifactService.Publish(ctx, id, tokens)
}

// A request delivered again after its turn committed (whether its
// artifacts were published or not) publishes the committed manifest: one
// version, the committed run's, never a second.
func TestARedeliveredRequestPublishesItsCommittedSavesOnce(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	svc := &failingPublish{ArtifactService: history.NewMemoryArtifacts(history.ArtifactLimits{})}
	var calls atomic.Int32
	step := artifactStep(t, svc, &calls, echoResult)
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "again"}
	req := stepRequest(id, "r1", "chart")
	if _, err := step.Run(ctx, req, store, newRecordingSink()); err == nil {
		t.Fatal("the run whose publication failed succeeded")
	}
	if c, found, err := store.Lookup(ctx, id, "r1"); err != nil || !found || c.N != 1 {
		t.Fatalf("the turn: %+v, %v, %v; want committed", c, found, err)
	}
	expectVersions(t, ctx, svc, id)
	for i := range 2 {
		res, err := step.Run(ctx, req, store, newRecordingSink())
		if err != nil || !res.Committed.Duplicate {
			t.Fatalf("redelivery %d: %+v, %v; want a duplicate", i+1, res, err)
		}
		expectVersions(t, ctx, svc, id, "png 1")
	}
	if calls.Load() != 1 {
		t.Fatalf("the tool ran %d times", calls.Load())
	}
}

// crashingModel calls tool "save" and, in the run that has crash set,
// crashes (cancels the run and waits for it to end) when the tool's
// result comes back: after the tool's step is journaled.
type crashingModel struct {
	mu    sync.Mutex
	crash func()
}

func (m *crashingModel) reply(ctx context.Context, in []*schema.Message) (*schema.Message, error) {
	if lastOf(in).Role != schema.Tool {
		return call("save", `{}`), nil
	}
	m.mu.Lock()
	crash := m.crash
	m.crash = nil
	m.mu.Unlock()
	if crash != nil {
		crash()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return schema.AssistantMessage("done: "+lastOf(in).Content, nil), nil
}

func (m *crashingModel) Generate(ctx context.Context, in []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	out, err := m.reply(ctx, in)
	if err != nil {
		return nil, err
	}
	out.ResponseMeta = &schema.ResponseMeta{FinishReason: "stop"}
	return out, nil
}

func (m *crashingModel) Stream(ctx context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	out, err := m.Generate(ctx, in)
	if err != nil {
		return nil, err
	}
	return schema.StreamReaderFromArray([]*schema.Message{out}), nil
}

func (m *crashingModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	return m, nil
}

// In a durable run, a save made by a tool call that the re-run answers
// from the journal (the tool does not run again) is still committed and
// published, once.
func TestASaveOfAJournaledToolCallIsCommittedByTheReRun(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	svc := history.NewMemoryArtifacts(history.ArtifactLimits{})
	var calls atomic.Int32
	m := &crashingModel{}
	step := newStep(t, stepConfig(), worker.WithArtifacts(svc), worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		return adk.NewChatModelAgent(ctx, worker.Durable(&adk.ChatModelAgentConfig{Name: "assistant", Description: "charts", Model: m,
			ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{saveTool{calls: &calls}}}}}))
	}))
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "durable"}
	req := stepRequest(id, "r1", "chart")
	firstCtx, crash := context.WithCancel(ctx)
	m.mu.Lock()
	m.crash = crash
	m.mu.Unlock()
	if _, err := step.Run(firstCtx, req, store, newRecordingSink()); !errors.Is(err, bridge.ErrAborted) {
		t.Fatalf("the first run = %v, want aborted by the crash", err)
	}
	expectVersions(t, ctx, svc, id)
	res, err := step.Run(ctx, req, store, newRecordingSink())
	if err != nil || res.Status != events.StatusComplete || !strings.HasPrefix(res.Answer, "done: saved") {
		t.Fatalf("the re-run: %+v, %v", res, err)
	}
	if calls.Load() != 1 {
		t.Fatalf("the tool ran %d times, want once (replayed from the journal)", calls.Load())
	}
	expectVersions(t, ctx, svc, id, "png 1")
}

// heldStage is an ArtifactService whose Stage reports its entry on
// entered and waits for release.
type heldStage struct {
	history.ArtifactService
	entered chan struct{}
	release chan struct{}
}

func (h heldStage) Stage(ctx context.Context, id events.Identity, s history.ArtifactSave) (string, error) {
	h.entered <- struct{}{}
	<-h.release
	return h.ArtifactService.Stage(ctx, id, s)
}

// Saves made in parallel (tool calls run concurrently) cannot pass the
// per-run limit together: the limit's slots are taken before the Stage,
// so that the turn's manifest never grows past what its commit accepts.
func TestParallelSavesCannotPassTheRunsLimit(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, time.Minute)
	h := heldStage{ArtifactService: history.NewMemoryArtifacts(history.ArtifactLimits{}),
		entered: make(chan struct{}, history.MaxArtifactsPerTurn+1), release: make(chan struct{})}
	a := worker.NewRunArtifacts(events.Identity{Tenant: "acme", User: "ann", Conversation: "c1"}, h)
	errs := make(chan error, history.MaxArtifactsPerTurn)
	for i := range history.MaxArtifactsPerTurn {
		go func() { errs <- a.Save(ctx, fmt.Sprintf("f%d", i), "text/plain", []byte("x")) }()
	}
	for range history.MaxArtifactsPerTurn {
		<-h.entered // every slot is staging
	}
	extra := make(chan error, 1)
	go func() { extra <- a.Save(ctx, "one-too-many", "text/plain", []byte("x")) }()
	select {
	case err := <-extra:
		if !errors.Is(err, history.ErrArtifactLimit) {
			t.Fatalf("the save past the limit = %v, want ErrArtifactLimit", err)
		}
	case <-h.entered:
		t.Fatal("a save past the limit was staged while the others were staging")
	}
	close(h.release)
	for range history.MaxArtifactsPerTurn {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// racedStore is a MemoryStore on which another run of the request
// commits first (with first's manifest) when this run commits: this run's
// commit is then a duplicate. It counts the manifest reads.
type racedStore struct {
	*history.MemoryStore
	first []string
	reads atomic.Int32
}

func (s *racedStore) Commit(ctx context.Context, id events.Identity, t history.Turn) (history.Committed, error) {
	other := t
	other.Artifacts = s.first
	if _, err := s.MemoryStore.Commit(ctx, id, other); err != nil {
		return history.Committed{}, err
	}
	return s.MemoryStore.Commit(ctx, id, t)
}

func (s *racedStore) TurnArtifacts(ctx context.Context, id events.Identity, requestID string) ([]string, bool, error) {
	s.reads.Add(1)
	return s.MemoryStore.TurnArtifacts(ctx, id, requestID)
}

// A run whose commit finds its request committed by another run (a
// duplicate) reads that turn's manifest only when it holds saves, and then
// publishes it: its own saves stay unpublished.
func TestARunWhoseCommitIsADuplicateReadsTheManifestOnlyWhenItHoldsSaves(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	svc := history.NewMemoryArtifacts(history.ArtifactLimits{})
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "raced"}
	other, err := svc.Stage(ctx, id, history.ArtifactSave{Name: "chart.png", MIME: "image/png", Data: []byte("the other run's")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		first []string
		reads int32
	}{
		{"the other run saved nothing", nil, 0},
		{"the other run saved a chart", []string{other}, 1},
	} {
		store := &racedStore{MemoryStore: history.NewMemoryStore(), first: tc.first}
		var calls atomic.Int32
		step := artifactStep(t, svc, &calls, echoResult)
		res, err := step.Run(ctx, stepRequest(id, "r-"+fmt.Sprint(len(tc.first)), "save"), store, newRecordingSink())
		if err != nil {
			t.Fatalf("%s: run: %+v, %v", tc.name, res, err)
		}
		if got := store.reads.Load(); got != tc.reads {
			t.Errorf("%s: the duplicate commit read the manifest %d times, want %d", tc.name, got, tc.reads)
		}
	}
	// Only the other run's save was published; this run's two were not.
	expectVersions(t, ctx, svc, id, "the other run's")
}

// A committed save whose staged save is gone when it is published (swept
// before a crashed publish's redelivery: a sweep age too short for the
// runs and their re-runs) is not skipped silently: the redelivery logs it
// at error and counts it in turnpike_worker_artifacts_lost_total.
func TestACommittedSaveSweptBeforeItsPublishIsLoggedAndCounted(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	svc := &failingPublish{ArtifactService: history.NewMemoryArtifacts(history.ArtifactLimits{})}
	var calls atomic.Int32
	reg := prometheus.NewRegistry()
	var logged lockedBuffer
	step, err := worker.NewStep(stepConfig(), worker.WithArtifacts(svc), worker.WithRegistry(reg),
		worker.WithLogger(slog.New(slog.NewJSONHandler(&logged, nil))),
		worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
			return toolAgent(ctx, toolThenSay("save", echoResult), saveTool{calls: &calls})
		}))
	if err != nil {
		t.Fatal(err)
	}
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "lost"}
	req := stepRequest(id, "r1", "chart")
	if _, err := step.Run(ctx, req, store, newRecordingSink()); err == nil {
		t.Fatal("the run whose publication failed succeeded")
	}
	if got := counterValue(t, reg, "turnpike_worker_artifacts_lost_total"); got != 0 {
		t.Fatalf("artifacts lost after a failed publish = %v, want 0 (nothing was skipped yet)", got)
	}
	if n, err := svc.SweepArtifacts(ctx, time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("SweepArtifacts = %d, %v; want the committed turn's staged save dropped", n, err)
	}
	res, err := step.Run(ctx, req, store, newRecordingSink())
	if err != nil || !res.Committed.Duplicate {
		t.Fatalf("redelivery: %+v, %v; want a duplicate", res, err)
	}
	expectVersions(t, ctx, svc, id)
	if got := counterValue(t, reg, "turnpike_worker_artifacts_lost_total"); got != 1 {
		t.Errorf("turnpike_worker_artifacts_lost_total = %v, want 1", got)
	}
	if out := logged.String(); !strings.Contains(out, `"level":"ERROR"`) || !strings.Contains(out, "not published") {
		t.Errorf("the lost save was not logged at error: %s", out)
	}
}
