package worker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// heldCommitStore holds each Commit until the test releases it: entered
// receives once the commit is called, and committed counts the commits
// that returned.
type heldCommitStore struct {
	history.Store
	entered   chan struct{}
	release   chan struct{}
	committed atomic.Int32
}

func (s *heldCommitStore) Commit(ctx context.Context, id events.Identity, t history.Turn) (history.Committed, error) {
	s.entered <- struct{}{}
	<-s.release
	c, err := s.Store.Commit(ctx, id, t)
	s.committed.Add(1)
	return c, err
}

// checkingSink records the events of a run and, at each artifact.saved,
// what was true when it was emitted: how many commits had returned and
// whether the version it names was readable.
type checkingSink struct {
	*recordingSink
	commits  func() int32
	readable func(events.ArtifactInfo) error

	mu     sync.Mutex
	checks []string // one per artifact.saved: "" when all held, else why not
}

func (s *checkingSink) Emit(ctx context.Context, id events.Identity, e events.Event) error {
	if a, ok := e.(*events.ArtifactSavedEvent); ok {
		var why string
		if n := s.commits(); n == 0 {
			why = "emitted before the turn's commit returned"
		} else if err := s.readable(a.Artifact); err != nil {
			why = fmt.Sprintf("emitted while its version is not readable: %v", err)
		}
		s.mu.Lock()
		s.checks = append(s.checks, why)
		s.mu.Unlock()
	}
	return s.recordingSink.Emit(ctx, id, e)
}

// artifactsSaved is the artifact.saved events a sink recorded.
func artifactsSaved(s *recordingSink) []events.ArtifactInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []events.ArtifactInfo
	for _, e := range s.evs {
		if a, ok := e.(*events.ArtifactSavedEvent); ok {
			out = append(out, a.Artifact)
		}
	}
	return out
}

// artifact.saved follows the turn's commit and the publish after it, never
// precedes them: while the commit is held, nothing of the save is on the
// stream nor readable; the event, emitted once the commit returned, names
// a version that is readable, byte-exact, and comes right before
// run.completed.
func TestArtifactSavedFollowsTheCommitAndThePublish(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	svc := history.NewMemoryArtifacts(history.ArtifactLimits{})
	var calls atomic.Int32
	step := artifactStep(t, svc, &calls, echoResult)
	store := &heldCommitStore{Store: history.NewMemoryStore(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "held"}
	sink := &checkingSink{recordingSink: newRecordingSink(), commits: store.committed.Load,
		readable: func(a events.ArtifactInfo) error {
			got, data, err := svc.OpenArtifact(ctx, id, a.Name, int(a.Version))
			if err != nil {
				return err
			}
			if string(data) != "png 1" || got.MIME != a.MIME || got.Size != a.Size {
				return fmt.Errorf("version %d is %+v %q", a.Version, got, data)
			}
			return nil
		}}
	type result struct {
		st  events.Status
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := step.Run(ctx, stepRequest(id, "r1", "chart"), store, sink)
		done <- result{res.Status, err}
	}()
	select {
	case <-store.entered:
	case r := <-done:
		t.Fatalf("the run ended (%+v) without committing", r)
	case <-ctx.Done():
		t.Fatal("the run never committed")
	}
	// The commit is held: the run's tokens may be out, its artifact not.
	if got := artifactsSaved(sink.recordingSink); len(got) > 0 {
		t.Fatalf("artifact.saved %+v on the stream before the turn's commit", got)
	}
	if a, _, err := svc.OpenArtifact(ctx, id, "chart.png", 0); err == nil {
		t.Fatalf("chart.png readable before the turn's commit: %+v", a)
	}
	close(store.release)
	if r := <-done; r.err != nil || r.st != events.StatusComplete {
		t.Fatalf("run: %+v", r)
	}
	want := []events.ArtifactInfo{{Name: "chart.png", Version: 1, MIME: "image/png", Size: int64(len("png 1"))}}
	if got := artifactsSaved(sink.recordingSink); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("artifact.saved = %+v, want %+v", got, want)
	}
	sink.mu.Lock()
	checks := sink.checks
	sink.mu.Unlock()
	for _, why := range checks {
		if why != "" {
			t.Fatalf("artifact.saved %s", why)
		}
	}
	types := sink.types()
	if n := len(types); n < 3 || types[n-2] != events.TypeArtifactSaved || types[n-1] != events.TypeRunCompleted {
		t.Fatalf("events %v: want artifact.saved right before run.completed", types)
	}
}

// The fields of artifact.saved are the published version's: a second run's
// save of the same name is announced as version 2, with its MIME type and
// size; the event's header is the run's.
func TestArtifactSavedNamesThePublishedVersion(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	svc := history.NewMemoryArtifacts(history.ArtifactLimits{})
	var calls atomic.Int32
	step := artifactStep(t, svc, &calls, echoResult)
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "versions"}
	for i, requestID := range []string{"r1", "r2"} {
		sink := newRecordingSink()
		res, err := step.Run(ctx, stepRequest(id, requestID, "chart"), store, sink)
		if err != nil || res.Status != events.StatusComplete {
			t.Fatalf("run %d: %+v, %v", i+1, res, err)
		}
		published, data, err := svc.OpenArtifact(ctx, id, "chart.png", 0)
		if err != nil {
			t.Fatal(err)
		}
		want := events.ArtifactInfo{Name: "chart.png", Version: int64(published.Version), MIME: "image/png", Size: int64(len(data))}
		if published.Version != i+1 || string(data) != fmt.Sprintf("png %d", i+1) {
			t.Fatalf("run %d published %+v %q", i+1, published, data)
		}
		got := artifactsSaved(sink)
		if len(got) != 1 || got[0] != want {
			t.Fatalf("run %d: artifact.saved = %+v, want %+v", i+1, got, want)
		}
		sink.mu.Lock()
		for _, e := range sink.evs {
			if a, ok := e.(*events.ArtifactSavedEvent); ok {
				if m := a.Meta; m.Conversation != id.Conversation || m.RequestID != requestID || m.RunID != sink.evs[0].Header().RunID || m.Seq < 2 {
					t.Errorf("run %d: artifact.saved header %+v", i+1, m)
				}
			}
		}
		sink.mu.Unlock()
	}
}

// A run that persists nothing (its answer is empty: discarded) sends no
// artifact.saved, though its tool saved.
func TestARunThatPersistedNothingSendsNoArtifactSaved(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	svc := history.NewMemoryArtifacts(history.ArtifactLimits{})
	var calls atomic.Int32
	step := artifactStep(t, svc, &calls, func(string) string { return "" })
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "nothing"}
	sink := newRecordingSink()
	res, err := step.Run(ctx, stepRequest(id, "r1", "chart"), history.NewMemoryStore(), sink)
	if err != nil || res.Status != events.StatusDiscarded || calls.Load() != 1 {
		t.Fatalf("run: %+v, %v (%d saves); want discarded after a save", res, err, calls.Load())
	}
	if got := artifactsSaved(sink); len(got) > 0 {
		t.Fatalf("artifact.saved %+v for a run that persisted nothing", got)
	}
	if types := sink.types(); types[len(types)-1] != events.TypeRunCompleted {
		t.Fatalf("events %v", types)
	}
}

// A request delivered again after its turn committed but before its
// artifacts were published (the publish failed) publishes them and
// announces them, before its re-announced run.completed; a later
// redelivery announces the same version again (at least once: clients
// dedupe by name and version).
func TestARedeliveryAnnouncesTheVersionsItPublishes(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	svc := &failingPublish{ArtifactService: history.NewMemoryArtifacts(history.ArtifactLimits{})}
	var calls atomic.Int32
	step := artifactStep(t, svc, &calls, echoResult)
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "redelivered"}
	req := stepRequest(id, "r1", "chart")
	sink := newRecordingSink()
	if _, err := step.Run(ctx, req, store, sink); err == nil {
		t.Fatal("the run whose publication failed succeeded")
	}
	if got := artifactsSaved(sink); len(got) > 0 {
		t.Fatalf("artifact.saved %+v by the run whose publish failed", got)
	}
	want := []events.ArtifactInfo{{Name: "chart.png", Version: 1, MIME: "image/png", Size: int64(len("png 1"))}}
	for i := range 2 {
		sink := newRecordingSink()
		res, err := step.Run(ctx, req, store, sink)
		if err != nil || !res.Committed.Duplicate {
			t.Fatalf("redelivery %d: %+v, %v; want a duplicate", i+1, res, err)
		}
		if got := artifactsSaved(sink); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("redelivery %d: artifact.saved = %+v, want %+v", i+1, got, want)
		}
		if types := sink.types(); fmt.Sprint(types) != fmt.Sprint([]events.Type{events.TypeArtifactSaved, events.TypeRunCompleted}) {
			t.Fatalf("redelivery %d: events %v", i+1, types)
		}
		expectVersions(t, ctx, svc, id, "png 1")
	}
}
