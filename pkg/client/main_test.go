package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/devstack"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// stack is the Turnpike stack the Examples talk to: the devstack (embedded
// broker and store, ingest, an echo worker and the push gateway) on random
// loopback ports, for the length of the test binary.
var stack devstack.Stack

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
	var cfg devstack.Config
	cfg.KafkaAddr, cfg.MongoAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", dir
	cfg.MongoDB, cfg.TopicPrefix, cfg.Partitions = "turnpike", "turnpike.", 3
	cfg.Worker = worker.DefaultConfig()
	cfg.Worker.EchoDelay = 0
	cfg.Worker.SessionTimeout = 6 * time.Second
	var lns devstack.Listeners
	for _, ln := range []*net.Listener{&lns.Ingest, &lns.Pushgw} {
		if *ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			fmt.Fprintln(os.Stderr, "listen:", err)
			return 1
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan devstack.Stack, 1)
	done := make(chan error, 1)
	go func() {
		done <- devstack.Run(ctx, cfg, lns, slog.New(slog.NewTextHandler(io.Discard, nil)), func(st devstack.Stack) { ready <- st })
	}()
	select {
	case stack = <-ready:
	case err := <-done:
		fmt.Fprintln(os.Stderr, "devstack:", err)
		return 1
	case <-time.After(60 * time.Second):
		fmt.Fprintln(os.Stderr, "devstack not ready within 60s")
		return 1
	}
	code := m.Run()
	cancel()
	// A part still starting when the tests end (the devstack reports ready
	// once each part serves) stops with context.Canceled: a normal stop.
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		return 1
	}
	return code
}
