package history

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/turnpike-dev/turnpike/internal/testenv"
)

// fakeBulk is a bulk writer whose writes wait to be released, recording
// the batches they got. An item "dup-…" fails as a duplicate key, "bad-…"
// with another write error.
type fakeBulk struct {
	release chan struct{}
	// mu guards batches.
	mu      sync.Mutex
	batches [][]string
	started chan struct{} // a write started
}

func newFakeBulk() *fakeBulk {
	return &fakeBulk{release: make(chan struct{}), started: make(chan struct{}, 100)}
}

func (f *fakeBulk) write(ctx context.Context, items []string) []error {
	f.mu.Lock()
	f.batches = append(f.batches, slices.Clone(items))
	f.mu.Unlock()
	f.started <- struct{}{}
	<-f.release
	var bwe mongo.BulkWriteException
	for i, it := range items {
		switch {
		case len(it) > 4 && it[:4] == "dup-":
			bwe.WriteErrors = append(bwe.WriteErrors, mongo.BulkWriteError{WriteError: mongo.WriteError{Index: i, Code: 11000, Message: "E11000 duplicate key"}})
		case len(it) > 4 && it[:4] == "bad-":
			bwe.WriteErrors = append(bwe.WriteErrors, mongo.BulkWriteError{WriteError: mongo.WriteError{Index: i, Code: 2, Message: "bad value"}})
		}
	}
	if len(bwe.WriteErrors) == 0 {
		return bulkErrors(len(items), nil)
	}
	return bulkErrors(len(items), bwe)
}

// waiting reports how many writes the open batch holds.
func waiting[T any](g *groupWriter[T]) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == nil {
		return 0
	}
	return len(g.open.items)
}

// until polls cond: the writers' goroutines join batches on their own,
// with nothing to wait on but the batch itself. It fails the test when
// the test's ctx ends first: the test's own bound, not one of the wait's.
func until(t *testing.T, ctx context.Context, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("condition not reached before the test's context ended")
		case <-time.After(time.Millisecond):
		}
	}
}

func TestGroupWriterBatchesConcurrentWritesAndGivesEachItsOwnResult(t *testing.T) {
	t.Parallel()
	tctx := testenv.Context(t, time.Minute)
	f := newFakeBulk()
	g := newGroupWriter(3, 1, time.Minute, f.write)
	ctx := context.Background()
	results := make(map[string]error)
	var mu sync.Mutex
	var wg sync.WaitGroup
	do := func(item string) {
		wg.Go(func() {
			err := g.do(ctx, item)
			mu.Lock()
			results[item] = err
			mu.Unlock()
		})
	}
	do("first")
	<-f.started // the first write holds the only slot
	// One by one: three fill a batch, which is then closed; the next two
	// open another. Both wait for the slot.
	for i, it := range []string{"a", "dup-b", "c", "bad-d", "e"} {
		do(it)
		until(t, tctx, func() bool { return waiting(g) == []int{1, 2, 0, 1, 2}[i] })
	}
	for range 3 {
		f.release <- struct{}{}
	}
	wg.Wait()
	f.mu.Lock()
	batches := slices.Clone(f.batches)
	f.mu.Unlock()
	// The two waiting batches take the slot in either order.
	slices.SortFunc(batches, func(a, b []string) int { return len(a) - len(b) })
	if want := [][]string{{"first"}, {"bad-d", "e"}, {"a", "dup-b", "c"}}; !slices.EqualFunc(batches, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", batches, want)
	}
	for it, err := range results {
		switch {
		case it == "dup-b":
			if !mongo.IsDuplicateKeyError(err) {
				t.Errorf("%s: %v, want a duplicate key error", it, err)
			}
		case it == "bad-d":
			if err == nil || mongo.IsDuplicateKeyError(err) {
				t.Errorf("%s: %v, want its own write error", it, err)
			}
		case err != nil:
			t.Errorf("%s: %v, want success", it, err)
		}
	}
}

func TestGroupWriterWritesAtOnceWhenIdle(t *testing.T) {
	t.Parallel()
	f := newFakeBulk()
	close(f.release)
	g := newGroupWriter(64, 2, time.Minute, f.write)
	for i := range 3 {
		if err := g.do(context.Background(), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(f.batches) != 3 {
		t.Fatalf("batches %v, want one per sequential write", f.batches)
	}
}

func TestBulkErrorsSpreadsACommandErrorToEveryDocument(t *testing.T) {
	t.Parallel()
	boom := errors.New("connection reset")
	for i, err := range bulkErrors(3, boom) {
		if !errors.Is(err, boom) {
			t.Errorf("document %d: %v", i, err)
		}
	}
	wce := mongo.BulkWriteException{WriteConcernError: &mongo.WriteConcernError{Code: 64, Message: "waiting for replication timed out"},
		WriteErrors: []mongo.BulkWriteError{{WriteError: mongo.WriteError{Index: 0, Code: 11000}}}}
	for i, err := range bulkErrors(2, wce) {
		if err == nil {
			t.Errorf("document %d: a write concern error must reach every document", i)
		}
	}
	for _, index := range []int{7, 2, -1} {
		bad := mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{{WriteError: mongo.WriteError{Index: index, Code: 11000}}}}
		for i, err := range bulkErrors(2, bad) {
			if err == nil {
				t.Errorf("document %d: an error indexing no document (index %d of 2) must reach every document", i, index)
			}
		}
	}
	// An exception that names no document (no write error, no write
	// concern error: labels only) is the command's failure.
	for i, err := range bulkErrors(2, mongo.BulkWriteException{Labels: []string{"RetryableWriteError"}}) {
		if err == nil {
			t.Errorf("document %d: an exception of no write error must reach every document", i)
		}
	}
	one := mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{{WriteError: mongo.WriteError{Index: 1, Code: 11000}}}}
	if errs := bulkErrors(3, one); errs[0] != nil || errs[1] == nil || errs[2] != nil {
		t.Errorf("a write error of document 1 of 3 gave %v, want it on that document only", errs)
	}
}

func TestGroupWriterLetsAWaiterGiveUpWhileItsBatchIsStillWritten(t *testing.T) {
	t.Parallel()
	tctx := testenv.Context(t, time.Minute)
	f := newFakeBulk()
	g := newGroupWriter(64, 1, time.Minute, f.write)
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.do(context.Background(), "first") })
	<-f.started // the first write holds the only slot
	wg.Go(func() { _ = g.do(context.Background(), "leader") })
	until(t, tctx, func() bool { return waiting(g) == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- g.do(ctx, "impatient") }()
	until(t, tctx, func() bool { return waiting(g) == 2 })
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("a waiter whose context ended got %v, want context.Canceled", err)
	}
	f.release <- struct{}{}
	f.release <- struct{}{}
	wg.Wait()
	if want := [][]string{{"first"}, {"leader", "impatient"}}; !slices.EqualFunc(f.batches, want, slices.Equal) {
		t.Fatalf("batches %v, want %v: the batch holds the document of the caller that gave up", f.batches, want)
	}
}

// A batch is written whatever becomes of its leader's context: it holds
// other callers' documents (group.go: the write runs detached from the
// leader's ctx, bounded by the writer's timeout). The leader's caller
// gone while the batch waited for a slot, the batch is still written and
// every caller in it, the leader included, gets its document's result.
func TestGroupWriterWritesABatchWhoseLeaderWentAway(t *testing.T) {
	t.Parallel()
	tctx := testenv.Context(t, time.Minute)
	release, started := make(chan struct{}), make(chan struct{}, 10)
	g := newGroupWriter(64, 1, time.Minute, func(ctx context.Context, items []string) []error {
		started <- struct{}{}
		<-release
		return spread(make([]error, len(items)), ctx.Err()) // nil unless the write's ctx ended
	})
	results := make(chan error, 3)
	go func() { results <- g.do(context.Background(), "first") }()
	<-started // the first write holds the only slot
	leaderCtx, leaderGone := context.WithCancel(context.Background())
	leader := make(chan error, 1)
	go func() { leader <- g.do(leaderCtx, "led") }()
	until(t, tctx, func() bool { return waiting(g) == 1 })
	go func() { results <- g.do(context.Background(), "joined") }()
	until(t, tctx, func() bool { return waiting(g) == 2 })
	leaderGone()
	release <- struct{}{} // the first write ends; the batch takes the slot
	<-started
	release <- struct{}{}
	if err := <-leader; err != nil {
		t.Errorf("the leader's own document: %v, want written", err)
	}
	for range 2 {
		if err := <-results; err != nil {
			t.Errorf("a document of another caller: %v, want written", err)
		}
	}
}
