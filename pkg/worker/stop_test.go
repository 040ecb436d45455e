package worker_test

import (
	"context"
	"errors"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// stallingSearch is a MemoryService whose searches wait for their context
// to end and return its error; entered is closed by the first.
type stallingSearch struct {
	history.MemoryService
	once    sync.Once
	entered chan struct{}
}

func (s *stallingSearch) Search(ctx context.Context, _, _, _ string, _ int) ([]history.MemoryHit, error) {
	s.once.Do(func() { close(s.entered) })
	<-ctx.Done()
	return nil, ctx.Err()
}

// stallingStore is a store whose window reads (the history window a run
// loads before its agent starts) wait for their context to end and return
// its error; entered is closed by the first.
type stallingStore struct {
	history.Store
	once    sync.Once
	entered chan struct{}
}

func (s *stallingStore) Window(ctx context.Context, _ events.Identity, _ int) ([]history.Message, error) {
	s.once.Do(func() { close(s.entered) })
	<-ctx.Done()
	return nil, ctx.Err()
}

// returned waits for done, which a call the test expects to return closes,
// until the test's deadline (go test -timeout) is near: a call that hangs
// fails the test with every goroutine's stack instead of hanging it.
func returned(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	dl, ok := t.Deadline()
	if !ok {
		<-done
		return
	}
	t.Log("waiting until", dl.Add(-10*time.Second), "(the test's deadline, less 10s) for", what)
	timer := time.NewTimer(time.Until(dl) - 10*time.Second)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
		t.Fatalf("%s did not return by the test's deadline; goroutines:\n%s", what, b.String())
	}
}

// runStopped runs req on st in the background under a context that the
// test cancels once entered is closed, and returns Run's result when it
// returns (the test's deadline bounds the wait).
func runStopped(t *testing.T, st *worker.Step, store history.Store, req events.Request, entered <-chan struct{}) (bridge.Result, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{})
	var (
		res bridge.Result
		err error
	)
	go func() {
		defer close(done)
		res, err = st.Run(ctx, req, store, newRecordingSink())
	}()
	select {
	case <-entered:
	case <-done:
		t.Fatalf("Run returned before the stall it should be stopped in: %+v, %v", res, err)
	}
	cancel()
	returned(t, done, "Step.Run whose context ended")
	return res, err
}

// A Step.Run whose context ends before its agent starts returns: while
// the injection's search, the window's read or the agent's build is under
// way, the run stops with its caller's context (aborted, as a run that had
// started), and the model is never called. A search or a store call that
// waits on its context does not hold the run (the run's own context is not
// the caller's: it outlives the caller's by design, so that a commit is
// never cut halfway).
func TestARunWhoseContextEndsBeforeItsAgentStartsReturns(t *testing.T) {
	t.Parallel()
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "b"}
	check := func(t *testing.T, m *scripted, res bridge.Result, err error) {
		t.Helper()
		if !errors.Is(err, bridge.ErrAborted) {
			t.Errorf("Run = %+v, %v; want an error wrapping bridge.ErrAborted", res, err)
		}
		if n := len(m.seen()); n != 0 {
			t.Errorf("the model was called %d times; want none (the run stopped before its agent started)", n)
		}
	}
	t.Run("during the injection's search", func(t *testing.T) {
		t.Parallel()
		mem := &stallingSearch{MemoryService: history.NewInMemoryMemory(), entered: make(chan struct{})}
		m := echoing()
		// A search timeout far past the test: only the caller's context
		// can end the search.
		st := injectStep(t, m, mem, worker.MemoryConfig{Inject: true, SearchTimeout: 24 * time.Hour}, prometheus.NewRegistry())
		res, err := runStopped(t, st, history.NewMemoryStore(), stepRequest(id, "r1", "Where does my sister live?"), mem.entered)
		check(t, m, res, err)
	})
	t.Run("during the window's read", func(t *testing.T) {
		t.Parallel()
		store := &stallingStore{Store: history.NewMemoryStore(), entered: make(chan struct{})}
		m := echoing()
		st := newStep(t, stepConfig(), worker.WithAgent(chatAgent(t, m)))
		res, err := runStopped(t, st, store, stepRequest(id, "r1", "hello"), store.entered)
		check(t, m, res, err)
	})
	t.Run("just before the agent starts", func(t *testing.T) {
		t.Parallel()
		// The agent's build is the last thing before the agent starts:
		// the caller's context ends there.
		m := echoing()
		built := make(chan struct{})
		release := make(chan struct{})
		st := newStep(t, stepConfig(), worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
			close(built)
			<-release
			return chatAgent(t, m), nil
		}))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan struct{})
		var (
			res bridge.Result
			err error
		)
		go func() {
			defer close(done)
			res, err = st.Run(ctx, stepRequest(id, "r1", "hello"), history.NewMemoryStore(), newRecordingSink())
		}()
		returned(t, built, "the agent's build")
		cancel()
		close(release)
		returned(t, done, "Step.Run whose context ended as its agent was built")
		check(t, m, res, err)
	})
}

// A worker told to stop while a record's run reads its window from a
// store that does not answer stops: the read ends at the drain deadline
// (the run is abandoned, its record left uncommitted for the next owner)
// instead of holding the partition's drain, and so the worker, forever.
func TestAWorkerStopsWhileARunWaitsOnItsStoreBeforeItsAgentStarts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := &stallingStore{Store: history.NewMemoryStore(), entered: make(chan struct{})}
	s := newStack(t, store)
	s.cfg.DrainTimeout = 50 * time.Millisecond
	m := echoing()
	stop := s.start(t, ctx, worker.Deps{Model: m, Registerer: prometheus.NewRegistry()})
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "c"}
	s.produce(t, ctx, id.Key(), request(id, "r1", "hello"))
	returned(t, store.entered, "the run's window read")
	done := make(chan struct{})
	go func() {
		defer close(done)
		stop()
	}()
	returned(t, done, "the worker's Run")
	if n := len(m.seen()); n != 0 {
		t.Errorf("the model was called %d times; want none", n)
	}
}
