package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// testPartitions is the partition count of every test topic.
const testPartitions = 3

// env is a broker with one set of topics, for one test.
type env struct {
	brokers []string
	prefix  string
	names   topic.Names
	dir     string
	// group is the live workers' consumer group: a worker started after
	// another goes on from its committed offsets.
	group string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{brokers: testenv.Kafka(t), prefix: testenv.Name(t, "rp") + ".", dir: t.TempDir(), group: testenv.Name(t, "g")}
	e.names = topic.NewNames(e.prefix)
	if err := topic.Ensure(testenv.Context(t, 20*time.Second), e.brokers, testPartitions, e.names.All()...); err != nil {
		t.Fatal(err)
	}
	return e
}

// config is a replay of mode over the requests topic with its report in
// the test's directory under name.
func (e *env) config(mode, name string) config {
	report := filepath.Join(e.dir, name+".jsonl")
	return config{
		shared:             shared{Brokers: e.brokers, TopicPrefix: e.prefix, MongoDB: "turnpike", Model: "echo"},
		Mode:               mode,
		StartOffset:        -1,
		EndOffset:          -1,
		Report:             report,
		Checkpoint:         report + ".checkpoint",
		CheckpointInterval: 20 * time.Millisecond,
		DrainTimeout:       5 * time.Second,
	}
}

// readAll returns every record of a topic, partition by partition.
func (e *env) readAll(t *testing.T, ctx context.Context, topicName string) []kafka.Message {
	t.Helper()
	cl := &kafka.Client{Addr: kafka.TCP(e.brokers...), Timeout: 10 * time.Second}
	parts, err := partitionsOf(ctx, cl, topicName, e.prefix)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := listOffsets(ctx, cl, topicName, parts, func(p int) kafka.OffsetRequest { return kafka.LastOffsetOf(p) })
	if err != nil {
		t.Fatal(err)
	}
	var out []kafka.Message
	for _, p := range parts {
		err := readRange(ctx, e.brokers, topicName, partitionRange{Partition: p, Start: 0, End: ends[p], Next: 0}, func(m kafka.Message) error {
			out = append(out, m)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// endOffsets returns the end of each partition of a topic.
func (e *env) endOffsets(t *testing.T, ctx context.Context, topicName string) map[int]int64 {
	t.Helper()
	cl := &kafka.Client{Addr: kafka.TCP(e.brokers...), Timeout: 10 * time.Second}
	parts, err := partitionsOf(ctx, cl, topicName, e.prefix)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := listOffsets(ctx, cl, topicName, parts, func(p int) kafka.OffsetRequest { return kafka.LastOffsetOf(p) })
	if err != nil {
		t.Fatal(err)
	}
	return ends
}

// waitRecords waits until topic holds at least n records.
func (e *env) waitRecords(t *testing.T, ctx context.Context, topicName string, n int64) {
	t.Helper()
	for {
		var sum int64
		for _, v := range e.endOffsets(t, ctx, topicName) {
			sum += v
		}
		if sum >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s holds %d records, want %d: %v", topicName, sum, n, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitHandled waits until the live workers' group has committed every
// record of the requests topic: each was handled to its end (run, or
// recognised as a duplicate), so nothing more will change the store.
func (e *env) waitHandled(t *testing.T, ctx context.Context) {
	t.Helper()
	cl := &kafka.Client{Addr: kafka.TCP(e.brokers...), Timeout: 10 * time.Second}
	for {
		ends := e.endOffsets(t, ctx, e.names.Requests)
		parts := make([]int, 0, len(ends))
		for p := range ends {
			parts = append(parts, p)
		}
		got, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: e.group, Topics: map[string][]int{e.names.Requests: parts}})
		if err == nil {
			err = got.Error
		}
		behind := 0
		if err == nil {
			committed := map[int]int64{}
			for _, p := range got.Topics[e.names.Requests] {
				committed[p.Partition] = p.CommittedOffset
			}
			for p, end := range ends {
				if end > 0 && committed[p] < end {
					behind++
				}
			}
			if behind == 0 {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("requests not all handled: %d partitions behind, %v (%v)", behind, err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startWorker runs a live worker on the env's topics until the test ends
// or stop is called.
func (e *env) startWorker(t *testing.T, ctx context.Context, store history.Store, m model.ToolCallingChatModel, tweak func(*worker.Config)) (stop func()) {
	t.Helper()
	var opts []worker.Option
	if m != nil {
		// The agent cmd/worker builds, on m.
		agent, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: worker.DefaultConfig().AgentName, Description: "Turnpike conversation agent", Model: m})
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, worker.WithAgent(agent))
	}
	return e.startWorkerWith(t, ctx, store, tweak, opts...)
}

// startWorkerWith runs a live worker with opts on the env's topics until
// the test ends or stop is called.
func (e *env) startWorkerWith(t *testing.T, ctx context.Context, store history.Store, tweak func(*worker.Config), opts ...worker.Option) (stop func()) {
	t.Helper()
	cfg := worker.DefaultConfig()
	cfg.Brokers, cfg.TopicPrefix, cfg.GroupID, cfg.Partitions = e.brokers, e.prefix, e.group, testPartitions
	cfg.RetryBackoffMin, cfg.RetryBackoffMax, cfg.SessionTimeout = 5*time.Millisecond, 50*time.Millisecond, 6*time.Second
	cfg.DrainTimeout, cfg.CommitInterval = 2*time.Second, 20*time.Millisecond
	cfg.EchoDelay, cfg.Addr = 0, ""
	if tweak != nil {
		tweak(&cfg)
	}
	opts = append(opts, worker.WithStore(store), worker.WithLogger(slog.New(slog.DiscardHandler)))
	w, err := worker.New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// connectAndRun runs the replay of cfg with the dependencies connect makes
// of it, as the command does; they stay open until the test ends.
func connectAndRun(t *testing.T, ctx context.Context, cfg config) (*summary, deps) {
	t.Helper()
	deps, closeDeps, err := connect(ctx, cfg, io.Discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeDeps)
	sum, err := runReplay(ctx, cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return sum, deps
}

// waitTurns waits until every conversation in want has exactly that many
// turns in store, and returns their messages.
func waitTurns(t *testing.T, ctx context.Context, store history.Store, want map[events.Identity]int) map[events.Identity][]history.Message {
	t.Helper()
	for {
		got := map[events.Identity][]history.Message{}
		ok := true
		for id, n := range want {
			page, err := store.List(ctx, id, 0, history.MaxListLimit)
			if err != nil && !errors.Is(err, history.ErrNotFound) {
				t.Fatal(err)
			}
			got[id] = page.Messages
			turns := 0 // a turn is one user message and its answer's, committed whole
			for _, m := range page.Messages {
				if m.Role == history.RoleUser {
					turns++
				}
			}
			if turns != n {
				ok = false
			}
		}
		if ok {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("turns not reached: %v; have %v", ctx.Err(), summarize(got))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func summarize(h map[events.Identity][]history.Message) string {
	var b strings.Builder
	for id, ms := range h {
		fmt.Fprintf(&b, "%s: %d messages; ", id, len(ms))
	}
	return b.String()
}

// readReport parses a report file.
func readReport(t *testing.T, path string) []reportLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []reportLine
	for _, s := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if s == "" {
			continue
		}
		var l reportLine
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("report line %q: %v", s, err)
		}
		out = append(out, l)
	}
	return out
}

// flakyModel is the echo model behind a switch: while broken, a message
// containing "flaky" fails before any content with a refused connection
// (a transient model failure: the worker retries it, then dead-letters it
// and records it failed).
type flakyModel struct {
	*echo.Model
	broken atomic.Bool
}

func newFlakyModel(t *testing.T) *flakyModel {
	t.Helper()
	m, err := echo.New(echo.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f := &flakyModel{Model: m}
	f.broken.Store(true)
	return f
}

func (f *flakyModel) Stream(ctx context.Context, in []*schema.Message, opts ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	if f.broken.Load() && len(in) > 0 && strings.Contains(in[len(in)-1].Content, "flaky") {
		return nil, fmt.Errorf("dial model: %w", syscall.ECONNREFUSED)
	}
	return f.Model.Stream(ctx, in, opts...)
}

func (f *flakyModel) WithTools(tools []*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	return f, nil
}
