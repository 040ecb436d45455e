package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/devstack"
)

// stack is the Turnpike stack the Examples talk to: the devstack (embedded
// broker and store, ingest, an echo worker and the push gateway) on random
// loopback ports, for the length of the test binary.
var stack *devstack.Stack

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "client-devstack-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	cfg := devstack.DefaultConfig()
	cfg.DataDir, cfg.Logger = dir, slog.New(slog.DiscardHandler)
	cfg.KafkaAddr, cfg.MongoAddr, cfg.IngestAddr, cfg.PushgwAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Worker.Partitions = 3
	cfg.Worker.EchoDelay = 0
	cfg.Worker.SessionTimeout = 6 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.AfterFunc(60*time.Second, cancel)
	if stack, err = devstack.Start(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		return 1
	}
	start.Stop()
	code := m.Run()
	// A part still starting when the tests end (the devstack reports ready
	// once each part serves) stops with context.Canceled: a normal stop.
	if err := stack.Close(); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		return 1
	}
	return code
}
