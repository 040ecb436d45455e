package history_test

import (
	"context"
	"fmt"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// A worker's turn: Start tells whether the request is already decided or
// cancelled and gives the window; Commit persists the answer. A second
// delivery of the same request is decided, so it does not run again.
func ExamplePending_Start() {
	ctx := context.Background()
	store := history.NewMemoryStore()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "c1"}
	src := history.Source{Topic: "turnpike.requests", Partition: 3, Offset: 41}

	p := history.Begin(store, id, "req-1", "hello", time.Now())
	p.SetSource(src)
	st, err := p.Start(ctx, 20)
	if err != nil {
		panic(err)
	}
	fmt.Println("decided:", st.Decided, "cancelled:", st.Cancelled, "window:", len(st.Window))
	c, err := p.Commit(ctx, "hi there", "echo", events.StatusComplete, time.Now())
	if err != nil {
		panic(err)
	}
	fmt.Println("committed turn", c.N)

	again := history.Begin(store, id, "req-1", "hello", time.Now())
	again.SetSource(src)
	st, err = again.Start(ctx, 20)
	if err != nil {
		panic(err)
	}
	fmt.Println("redelivery decided:", st.Decided, "turn", st.Committed.N, st.Committed.Status)
	// Output:
	// decided: false cancelled: false window: 1
	// committed turn 1
	// redelivery decided: true turn 1 complete
}
