// Package stacktest starts the devstack (pkg/devstack) inside a test: the
// one helper of the tests that run the whole stack in-process (e2e,
// internal/loadgen, internal/webui). Real Kafka and MongoDB are used when
// TURNPIKE_KAFKA_BROKERS / TURNPIKE_MONGO_URI name them, with a topic
// prefix and a database unique to the test. It imports pkg/ packages, so
// no pkg/ package may import it (pkg/turnpiketest builds on pkg/devstack
// directly).
package stacktest

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/devstack"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// StartTimeout bounds a start: past it the test fails instead of hanging.
const StartTimeout = 2 * time.Minute

// Config is the devstack configuration a test starts from: every port
// random on loopback, a fresh data directory, the echo model without
// delay, warnings and errors of the stack in t.Log (until the test's
// cleanups are done), and the real servers the environment names, if any
// (topics under a prefix, and a database, named after name and the test).
func Config(t testing.TB, name string) devstack.Config {
	t.Helper()
	c := devstack.DefaultConfig()
	c.DataDir = t.TempDir()
	c.KafkaAddr, c.MongoAddr, c.IngestAddr, c.PushgwAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	c.Worker.EchoDelay = 0 // the echo model answers at once unless a test asks otherwise
	c.Worker.LogLevel = "warn"
	if v := os.Getenv("TURNPIKE_KAFKA_BROKERS"); v != "" {
		c.Worker.Brokers = strings.Split(v, ",")
		c.Worker.TopicPrefix = testenv.Name(t, name) + "."
	}
	if v := os.Getenv("TURNPIKE_MONGO_URI"); v != "" {
		c.Worker.MongoURI, c.Worker.MongoDB = v, testenv.Name(t, name)
	}
	c.Logger = Logger(t)
	return c
}

// Logger is a logger of warnings and errors to t.Log, silent once the
// test's cleanups have run (a stack still stopping may log).
func Logger(t testing.TB) *slog.Logger {
	w := &testLog{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testLog struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *testLog) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(b), "\n"))
	}
	return len(b), nil
}

// Start starts the devstack of c with the worker options opts and
// returns once every part serves (it fails t if the stack stops first, or
// does not start within StartTimeout). The stack stops when the test
// ends, and t fails if it stopped with an error other than a cancel. A
// test may Close it earlier.
func Start(t testing.TB, c devstack.Config, opts ...worker.Option) *devstack.Stack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(StartTimeout, cancel)
	st, err := devstack.Start(ctx, c, opts...)
	timedOut := !timer.Stop()
	if err != nil {
		cancel()
		if timedOut {
			t.Fatalf("devstack not ready within %v: %v", StartTimeout, err)
		}
		t.Fatalf("devstack stopped before ready: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := st.Wait(); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("devstack: %v", err)
		}
	})
	return st
}
