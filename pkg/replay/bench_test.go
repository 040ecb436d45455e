package replay

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/schema"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// BenchmarkShadowReplay replays 20,000 requests (2,000 conversations of 10
// messages, 12 partitions) in shadow mode through the zero-delay echo
// model and an in-memory shadow store, after a raw kafka-go read of the
// same selection in the same run, and reports both rates and their ratio:
//
//	go test -run '^$' -bench ShadowReplay -benchtime 3x ./pkg/replay/
//
// with the worker's eino agent (agent=adk) and the direct agent (agent=direct).
func BenchmarkShadowReplay(b *testing.B) {
	const (
		partitions = 12
		convs      = 2000
		msgs       = 10
	)
	ctx := testenv.Context(b, 10*time.Minute)
	brokers := testenv.Kafka(b)
	prefix := testenv.Name(b, "bench") + "."
	names := topic.NewNames(prefix)
	if err := topic.Ensure(ctx, brokers, partitions, names.Requests); err != nil {
		b.Fatal(err)
	}
	w := testenv.Producer(b, brokers, names.Requests)
	w.BatchSize = 1000
	batch := make([]kafka.Message, 0, convs)
	for j := 1; j <= msgs; j++ {
		batch = batch[:0]
		for i := range convs {
			id := events.Identity{Tenant: "bench", User: fmt.Sprintf("u%d", i%50), Conversation: fmt.Sprintf("c%d", i)}
			batch = append(batch, testenv.Request(id, fmt.Sprintf("c%d-m%d", i, j), fmt.Sprintf("message %d of conversation %d", j, i)))
		}
		if err := w.WriteMessages(ctx, batch...); err != nil {
			b.Fatal(err)
		}
	}
	for _, kind := range []string{agentADK, agentDirect} {
		b.Run("agent="+kind, func(b *testing.B) {
			dir := b.TempDir()
			var rate, raw float64
			for i := range b.N {
				report := filepath.Join(dir, fmt.Sprintf("%s-%d.jsonl", kind, i))
				cfg := config{shared: shared{Brokers: brokers, TopicPrefix: prefix, Model: "echo"}, Mode: modeShadow,
					StartOffset: -1, EndOffset: -1, Report: report, MeasureRaw: true, Agent: kind}
				sum, err := runReplay(ctx, cfg, deps{})
				if err != nil {
					b.Fatal(err)
				}
				if sum.Completed != convs*msgs {
					b.Fatalf("completed %d of %d: %v", sum.Completed, convs*msgs, sum.Statuses)
				}
				rate += sum.RecordsPerSec
				raw += sum.Raw.RecordsPerSec
				b.Logf("shadow %.0f requests/s in %v (p50 %v, p99 %v); raw read %.0f records/s in %v; ratio %.3f",
					sum.RecordsPerSec, sum.Elapsed.Round(time.Millisecond), sum.Latency.P50, sum.Latency.P99,
					sum.Raw.RecordsPerSec, sum.Raw.Elapsed.Round(time.Millisecond), sum.RatioToRaw)
			}
			b.ReportMetric(rate/float64(b.N), "requests/s")
			b.ReportMetric(raw/float64(b.N), "raw-records/s")
			b.ReportMetric(rate/raw, "shadow/raw")
		})
	}
}

// BenchmarkShadowRequest is the per-request cost of a shadow run without
// Kafka, on all cores. Its sub-benchmarks separate the layers:
//
//   - model: the zero-delay echo model's stream alone, read to its end;
//   - agent: the eino adk runner (chat model agent over the echo model),
//     its events drained without the bridge;
//   - bridge=default: the worker's run step (worker.Step: the history
//     window, the agent, the bridge with its default 1,000-item buffer,
//     and the commit to a memory store);
//   - bridge=shadow: the same with the shadow runs' buffer (what shadow
//     mode does: newStep);
//   - direct: bridge=shadow with the direct agent (-agent direct) instead
//     of eino's.
//
// Run it with:
//
//	go test -run '^$' -bench ShadowRequest -benchmem ./pkg/replay/
func BenchmarkShadowRequest(b *testing.B) {
	ctx := context.Background()
	m := echoModel(b)
	chat, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: worker.DefaultConfig().AgentName, Description: "bench", Model: m})
	if err != nil {
		b.Fatal(err)
	}
	agent := adk.NewRunner(ctx, adk.RunnerConfig{Agent: chat, EnableStreaming: true})
	input := []adk.Message{schema.UserMessage("hello there, how are you today")}
	b.Run("model", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				sr, err := m.Stream(ctx, input)
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := sr.Recv(); err != nil {
						break
					}
				}
				sr.Close()
			}
		})
	})
	b.Run("agent", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				iter := agent.Run(ctx, input)
				for {
					ev, ok := iter.Next()
					if !ok {
						break
					}
					if mo := ev.Output; mo != nil && mo.MessageOutput != nil && mo.MessageOutput.IsStreaming {
						s := mo.MessageOutput.MessageStream
						for {
							if _, err := s.Recv(); err != nil {
								break
							}
						}
						s.Close()
					}
				}
			}
		})
	})
	cfg := config{shared: shared{Model: "echo"}}
	cfg.setDefaults()
	log := slog.New(slog.DiscardHandler)
	adkStep, err := newStep(cfg, log, nil)
	if err != nil {
		b.Fatal(err)
	}
	defaultStep, err := worker.NewStep(cfg.WorkerConfig(), worker.WithLogger(log))
	if err != nil {
		b.Fatal(err)
	}
	cfg.Agent = agentDirect
	directStep, err := newStep(cfg, log, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		step stepRunner
	}{{"bridge=default", defaultStep}, {"bridge=shadow", adkStep}, {"direct", directStep}} {
		b.Run(bc.name, func(b *testing.B) {
			store := history.NewMemoryStore()
			var seq atomicCounter
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := seq.next()
					req := events.Request{V: 1, Tenant: "t", User: "u", Conversation: fmt.Sprintf("c%d", n%1000),
						RequestID: fmt.Sprintf("r%d", n), Content: "hello there, how are you today"}
					if _, err := bc.step.Run(ctx, req, store, discardSink{}); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// atomicCounter hands out 0, 1, 2 … to parallel benchmark goroutines.
type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) next() int64 { return c.n.Add(1) - 1 }
