package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// callCounting counts the MemoryService calls of the runs (each is one
// store command on MongoMemory's text search: a find, an insert).
type callCounting struct {
	history.MemoryService
	searches, adds atomic.Int64
}

func (c *callCounting) Search(ctx context.Context, tenant, user, query string, limit int) ([]history.MemoryHit, error) {
	c.searches.Add(1)
	return c.MemoryService.Search(ctx, tenant, user, query, limit)
}

func (c *callCounting) Add(ctx context.Context, m history.Memory) (bool, error) {
	c.adds.Add(1)
	return c.MemoryService.Add(ctx, m)
}

// BenchmarkMemoryInjection is the cost of memory per turn: a run of the
// echo agent on the in-memory store, without memory, with memory
// remembered only, and with injection of 3 of 200 memories. It reports
// the memory calls per turn (searches/op, adds/op).
//
//	go test -run '^$' -bench MemoryInjection -benchtime 2000x ./pkg/worker
func BenchmarkMemoryInjection(b *testing.B) {
	for _, mode := range []string{"off", "remember", "inject"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			mem := &callCounting{MemoryService: history.NewInMemoryMemory()}
			owner := events.Identity{Tenant: "acme", User: "alice", Conversation: "old"}
			for i := 1; i <= 200; i++ {
				if _, err := mem.MemoryService.Add(ctx, history.Memory{Identity: owner, Turn: int64(i),
					Question: fmt.Sprintf("fact %d about otters and rivers", i), Answer: "noted", At: time.Unix(int64(i), 0)}); err != nil {
					b.Fatal(err)
				}
			}
			ag, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "assistant", Description: "bench", Model: echoing()})
			if err != nil {
				b.Fatal(err)
			}
			opts := []worker.Option{worker.WithAgent(ag)}
			switch mode {
			case "remember":
				opts = append(opts, worker.WithMemory(mem, worker.MemoryConfig{}))
			case "inject":
				opts = append(opts, worker.WithMemory(mem, worker.MemoryConfig{Inject: true}))
			}
			st := newStep(b, stepConfig(), opts...)
			store := history.NewMemoryStore()
			id := events.Identity{Tenant: "acme", User: "alice"}
			b.ResetTimer()
			for i := range b.N {
				id.Conversation = fmt.Sprintf("c%d", i)
				if _, err := st.Run(ctx, stepRequest(id, "r1", "tell me about otters"), store, discard{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(mem.searches.Load())/float64(b.N), "searches/op")
			b.ReportMetric(float64(mem.adds.Load())/float64(b.N), "adds/op")
		})
	}
}
