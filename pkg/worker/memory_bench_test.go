package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

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
// echo agent on the in-memory turn store, without memory, with memory
// remembered only, and with injection of 3 of 200 memories, on the
// in-memory memory service and (the -ferretdb arms) on MongoMemory's term
// search in the embedded FerretDB (or TURNPIKE_MONGO_URI). It reports the
// memory calls per turn (searches/op, adds/op) and, on FerretDB, the
// memory's store commands per turn (cmds/op, counted with the driver's
// command monitor).
//
//	go test -run '^$' -bench MemoryInjection -benchtime 2000x ./pkg/worker
func BenchmarkMemoryInjection(b *testing.B) {
	for _, mode := range []string{"off", "remember", "inject", "remember-ferretdb", "inject-ferretdb"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			var (
				svc  history.MemoryService = history.NewInMemoryMemory()
				cmds *commandLog
			)
			if strings.HasSuffix(mode, "-ferretdb") {
				svc, cmds = monitoredMemory(b, ctx, history.MemorySearchTerms)
			}
			mem := &callCounting{MemoryService: svc}
			seedOtters(b, ctx, svc, 200)
			ag, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "assistant", Description: "bench", Model: echoing()})
			if err != nil {
				b.Fatal(err)
			}
			opts := []worker.Option{worker.WithAgent(ag)}
			switch strings.TrimSuffix(mode, "-ferretdb") {
			case "remember":
				opts = append(opts, worker.WithMemory(mem, worker.MemoryConfig{}))
			case "inject":
				opts = append(opts, worker.WithMemory(mem, worker.MemoryConfig{Inject: true}))
			}
			st := newStep(b, stepConfig(), opts...)
			store := history.NewMemoryStore()
			id := events.Identity{Tenant: "acme", User: "alice"}
			if cmds != nil {
				cmds.arm()
			}
			b.ResetTimer()
			for i := range b.N {
				id.Conversation = fmt.Sprintf("c%d", i)
				if _, err := st.Run(ctx, stepRequest(id, "r1", "tell me about otters"), store, discard{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(mem.searches.Load())/float64(b.N), "searches/op")
			b.ReportMetric(float64(mem.adds.Load())/float64(b.N), "adds/op")
			if cmds != nil {
				names, _ := cmds.disarm()
				b.ReportMetric(float64(len(names))/float64(b.N), "cmds/op")
			}
		})
	}
}
