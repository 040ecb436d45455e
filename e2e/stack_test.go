package e2e

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/devstack"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// stack is a running devstack.
type stack struct {
	devstack.Stack
	stop func()
	dir  string
}

type stackOption func(*devstack.Config)

// stackPartitions is the partition count of a started stack's topics.
const stackPartitions = 4

// startStack runs the devstack on random ports with its data in dir (a
// fresh temp dir when empty) and returns once it is ready.
func startStack(t *testing.T, dir string, opts ...stackOption) *stack {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	var cfg devstack.Config
	cfg.KafkaAddr, cfg.MongoAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", dir
	cfg.MongoDB, cfg.TopicPrefix, cfg.LogLevel = "turnpike", "turnpike.", "warn"
	cfg.Worker = worker.DefaultConfig()
	cfg.Worker.EchoDelay = 0 // the echo model answers at once unless a test asks otherwise
	// Real servers when the environment names them.
	if v := os.Getenv("TURNPIKE_KAFKA_BROKERS"); v != "" {
		cfg.Brokers = strings.Split(v, ",")
		cfg.TopicPrefix = testenv.Name(t, "e2e") + "."
	}
	if v := os.Getenv("TURNPIKE_MONGO_URI"); v != "" {
		cfg.MongoURI, cfg.MongoDB = v, testenv.Name(t, "e2e")
	}
	cfg.Partitions = stackPartitions
	cfg.Worker.RetryBackoffMin = 10 * time.Millisecond
	cfg.Worker.RetryBackoffMax = 200 * time.Millisecond
	cfg.Worker.SessionTimeout = 6 * time.Second
	cfg.Worker.DrainTimeout = 5 * time.Second
	for _, o := range opts {
		o(&cfg)
	}
	ingestLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pushLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithCancel(context.Background())
	readyc := make(chan devstack.Stack, 1)
	done := make(chan error, 1)
	go func() {
		done <- devstack.Run(ctx, cfg, devstack.Listeners{Ingest: ingestLn, Pushgw: pushLn}, log, func(st devstack.Stack) { readyc <- st })
	}()
	s := &stack{dir: dir}
	stopped := false
	s.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("devstack: %v", err)
		}
	}
	t.Cleanup(s.stop)
	select {
	case s.Stack = <-readyc:
	case err := <-done:
		stopped = true
		t.Fatalf("devstack stopped before ready: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("devstack not ready within 60s")
	}
	return s
}

// client returns an API client for tenant/user.
func (s *stack) client(t *testing.T, tenant, user string) *client.Client {
	t.Helper()
	tok, err := auth.Mint(s.AuthSecret, tenant, user, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &client.Client{BaseURL: "http://" + s.IngestAddr, StreamURL: "ws://" + s.PushgwAddr + "/v1/stream", Token: tok}
}

// testWriter sends logs to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
