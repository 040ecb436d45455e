package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// BenchmarkOrdering compares key-ordered concurrency with one record at a
// time per partition: echo replies of 10 tokens 200 ms
// apart, 8 partitions, 2,000 conversations with one request each.
//
//	go test -run '^$' -bench Ordering -benchtime 1x -timeout 30m ./pkg/worker/
//
// The store is MongoDB-compatible (embedded FerretDB, or TURNPIKE_MONGO_URI)
// in the "mongo" sub-benchmarks and in memory in the "memory" ones, to
// separate the worker's own limits from the store's.
func BenchmarkOrdering(b *testing.B) {
	const (
		partitions = 8
		convs      = 2000
		content    = "[[delay:200ms]][[tokens:10]]"
	)
	for _, storeKind := range []string{"memory", "mongo"} {
		var keyRate float64
		for _, ordering := range []string{"key", "partition"} {
			b.Run(fmt.Sprintf("store=%s/ordering=%s", storeKind, ordering), func(b *testing.B) {
				for range b.N {
					var store history.Store = history.NewMemoryStore()
					if storeKind == "mongo" {
						s, err := history.NewMongoStore(testenv.Context(b, time.Minute), testenv.MongoDB(b), history.MongoConfig{})
						if err != nil {
							b.Fatal(err)
						}
						store = s
					}
					rate, peak, running := runOrdering(b, store, ordering, partitions, convs, content, &kafka.Murmur2Balancer{})
					b.ReportMetric(rate, "turns/s")
					b.ReportMetric(float64(peak), "peak-inflight")
					b.ReportMetric(float64(running), "peak-running")
					if ordering == "key" {
						keyRate = rate
					} else if keyRate > 0 {
						b.ReportMetric(keyRate/rate, "key/partition")
					}
				}
			})
		}
	}
}

// runOrdering runs one worker over convs requests, placed by placement,
// and returns its turns/s peak records in flight and peak runs at once.
// Partition ordering is slow by design: it is measured over a fixed 30 s
// instead of to the end.
func runOrdering(b *testing.B, store history.Store, ordering string, partitions, convs int, content string, placement kafka.Balancer) (rate float64, peakInflight, peakRunning int) {
	b.Helper()
	ctx := testenv.Context(b, 20*time.Minute)
	brokers := testenv.Kafka(b)
	prefix := testenv.Name(b, "bench") + "."
	names := topic.NewNames(prefix)
	if err := topic.Ensure(ctx, brokers, partitions, names.All()...); err != nil {
		b.Fatal(err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: names.Requests, Balancer: placement, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	var batch []kafka.Message
	for i := range convs {
		id := events.Identity{Tenant: "bench", User: "u", Conversation: fmt.Sprintf("c%d", i)}
		batch = append(batch, kafka.Message{Key: []byte(id.Key()), Value: request(id, fmt.Sprintf("r%d", i), content)})
	}
	if err := w.WriteMessages(ctx, batch...); err != nil {
		b.Fatal(err)
	}
	w.Close()

	m, err := echo.New(echo.Config{})
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	wk, err := worker.NewConsumer(worker.Config{
		Brokers: brokers, TopicPrefix: prefix, GroupID: testenv.Name(b, "g"), Partitions: partitions,
		Ordering: ordering, MaxInflight: 4096, ReadAhead: 1024,
	}, worker.Deps{Store: store, Model: m, Registerer: reg})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() { done <- wk.Run(runCtx) }()
	deadline := time.Time{}
	if ordering == "partition" {
		deadline = start.Add(30 * time.Second)
	}
	var turns float64
	for {
		time.Sleep(100 * time.Millisecond)
		turns = counter(b, reg, "turnpike_worker_runs_total")
		if int(turns) >= convs || (!deadline.IsZero() && time.Now().After(deadline)) {
			break
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.Logf("%s ordering: %.0f turns in %v, peak %d records in flight, %d runs at once", ordering, turns, elapsed.Round(time.Millisecond), wk.PeakInflight(), wk.PeakRunning())
	return turns / elapsed.Seconds(), wk.PeakInflight(), wk.PeakRunning()
}

// counter sums a counter family in reg.
func counter(b *testing.B, reg *prometheus.Registry, name string) float64 {
	b.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
