package history

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// groupWriter is group commit: it writes the single documents of
// concurrent callers to one collection in unordered bulk writes, and gives
// each caller its own document's result.
//
// A caller that finds no batch open opens one and leads it: it waits for
// one of the flush slots, closes the batch to newcomers and writes it.
// While every slot is busy, later callers join the open batch, so batches
// grow with the load and an idle store writes each document at once, with
// no added delay. A batch holds at most maxBatch documents; a full one is
// closed and the next caller opens another, whose callers all wait for a
// slot: a batch never grows without limit, and the memory held is that of
// the blocked callers' own documents.
type groupWriter[T any] struct {
	maxBatch int
	timeout  time.Duration
	slots    chan struct{} // one per bulk write in flight
	// write writes items and returns one error per item (nil: written).
	write func(ctx context.Context, items []T) []error

	mu   sync.Mutex // guards open
	open *group[T]  // the batch new writes join; nil when none
}

type group[T any] struct {
	items []T
	errs  []error       // set before done is closed
	done  chan struct{} // closed when the batch is written
}

func newGroupWriter[T any](maxBatch, flushes int, timeout time.Duration, write func(context.Context, []T) []error) *groupWriter[T] {
	return &groupWriter[T]{maxBatch: maxBatch, timeout: timeout, slots: make(chan struct{}, flushes), write: write}
}

// do writes item with the next bulk write and returns item's own result.
// A caller whose ctx ends while another leads its batch returns ctx's
// error; the document may still be written (like a write whose reply was
// lost), which the stores' idempotent writes absorb.
func (g *groupWriter[T]) do(ctx context.Context, item T) error {
	g.mu.Lock()
	b, leader := g.open, false
	if b == nil {
		b = &group[T]{done: make(chan struct{})}
		g.open, leader = b, true
	}
	i := len(b.items)
	b.items = append(b.items, item)
	if len(b.items) >= g.maxBatch {
		g.open = nil // full: the next write opens another batch
	}
	g.mu.Unlock()
	if leader {
		g.flush(ctx, b)
		return b.errs[i]
	}
	select {
	case <-b.done:
		return b.errs[i]
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flush waits for a slot and writes b. The wait is not cut short by ctx:
// the batch holds other callers' documents, and a slot frees within the
// timeout of the write holding it.
func (g *groupWriter[T]) flush(ctx context.Context, b *group[T]) {
	g.slots <- struct{}{}
	g.mu.Lock()
	if g.open == b {
		g.open = nil
	}
	g.mu.Unlock()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
	b.errs = g.write(wctx, b.items)
	cancel()
	<-g.slots
	close(b.done)
}

// bulkErrors spreads the result of an unordered bulk write of n documents
// over them: a write error to its own document, any other error (the
// command failed, a write concern error) to every one.
func bulkErrors(n int, err error) []error {
	errs := make([]error, n)
	if err == nil {
		return errs
	}
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) && bwe.WriteConcernError == nil && len(bwe.WriteErrors) > 0 {
		for _, we := range bwe.WriteErrors {
			if we.Index < 0 || we.Index >= n {
				return spread(errs, err)
			}
			errs[we.Index] = mongo.WriteException{WriteErrors: mongo.WriteErrors{we.WriteError}, Labels: bwe.Labels}
		}
		return errs
	}
	return spread(errs, err)
}

func spread(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}
