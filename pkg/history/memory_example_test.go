package history_test

import (
	"context"
	"fmt"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// A turn of one conversation is found from the user's other
// conversations, by relevance; another user finds nothing, and adding the
// turn again adds nothing.
func ExampleInMemoryMemory() {
	ctx := context.Background()
	mem := history.NewInMemoryMemory()
	a := events.Identity{Tenant: "acme", User: "alice", Conversation: "trip"}
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	added, _ := mem.Add(ctx, history.Memory{Identity: a, Turn: 1, Question: "My sister lives in Lisbon", Answer: "Noted.", At: at})
	again, _ := mem.Add(ctx, history.Memory{Identity: a, Turn: 1, Question: "My sister lives in Lisbon", Answer: "Noted.", At: at})
	_, _ = mem.Add(ctx, history.Memory{Identity: a, Turn: 2, Question: "Book a hotel in Porto", Answer: "Done.", At: at.Add(time.Minute)})
	fmt.Println(added, again)

	hits, _ := mem.Search(ctx, "acme", "alice", "where does my sister live? lisbon", 5)
	for _, h := range hits {
		fmt.Printf("%s#%d %q\n", h.Identity.Conversation, h.Turn, h.Question)
	}
	bob, _ := mem.Search(ctx, "acme", "bob", "lisbon", 5)
	fmt.Println(len(bob))
	n, _ := mem.Delete(ctx, "acme", "alice", "trip")
	fmt.Println(n)
	// Output:
	// true false
	// trip#1 "My sister lives in Lisbon"
	// 0
	// 2
}
