package testenv

import (
	"context"
	"sync"
)

// WatchDone returns a context that is ctx, and a channel closed the first
// time the context's Done is called: a test learns that the code under
// test has begun to wait on the context (a select on Done, a
// context.AfterFunc), and cancels it then, instead of after a guessed
// time. Contexts derived from it (WithCancel and the like) call Done to
// follow it, so watch the one the code under test receives.
func WatchDone(ctx context.Context) (context.Context, <-chan struct{}) {
	w := &doneWatch{Context: ctx, asked: make(chan struct{})}
	return w, w.asked
}

// doneWatch is WatchDone's context.
type doneWatch struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func (c *doneWatch) Done() <-chan struct{} {
	c.once.Do(func() { close(c.asked) })
	return c.Context.Done()
}
