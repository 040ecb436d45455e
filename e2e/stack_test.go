package e2e

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv/stacktest"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/devstack"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// stack is a running devstack.
type stack struct {
	*devstack.Stack
	stop func()
	dir  string
	cfg  devstack.Config // what the stack was started with
}

type stackOption func(*devstack.Config)

// gatedStack is startStack whose agent runs on the echo model through
// gates (stacktest.Gates): a test holds an answer mid-stream for as long as
// it needs it running.
func gatedStack(t *testing.T, gates *stacktest.Gates, opts ...stackOption) *stack {
	t.Helper()
	return startStackWith(t, "", gates, opts...)
}

// stackPartitions is the partition count of a started stack's topics.
const stackPartitions = 4

// startStack runs the devstack on random ports with its data in dir (a
// fresh temp dir when empty) and returns once it is ready.
func startStack(t *testing.T, dir string, opts ...stackOption) *stack {
	t.Helper()
	return startStackWith(t, dir, nil, opts...)
}

// startStackWith is startStack, with the agent on gates when set.
func startStackWith(t *testing.T, dir string, gates *stacktest.Gates, opts ...stackOption) *stack {
	t.Helper()
	cfg := stacktest.Config(t, "e2e")
	if dir != "" {
		cfg.DataDir = dir
	}
	cfg.Worker.Partitions = stackPartitions
	cfg.Worker.RetryBackoffMin = 10 * time.Millisecond
	cfg.Worker.RetryBackoffMax = 200 * time.Millisecond
	cfg.Worker.SessionTimeout = 6 * time.Second
	cfg.Worker.DrainTimeout = 5 * time.Second
	for _, o := range opts {
		o(&cfg)
	}
	var wopts []worker.Option
	if gates != nil {
		wopts = append(wopts, gates.Agent(cfg.Worker))
	}
	st := stacktest.Start(t, cfg, wopts...)
	return &stack{Stack: st, dir: cfg.DataDir, cfg: cfg, stop: func() {
		if err := st.Close(); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("devstack: %v", err)
		}
	}}
}

// client returns an API client for tenant/user.
func (s *stack) client(t *testing.T, tenant, user string) *client.Client {
	t.Helper()
	tok, err := auth.Mint(s.AuthSecret, tenant, user, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Every HTTP exchange of the client, event streams included, is
	// checked against docs/openapi.yaml and docs/asyncapi.yaml's schemas
	// (contract_check_test.go); a mismatch fails the test.
	hc := &http.Client{Transport: newContractTransport(t, newContractReport(t)), Timeout: 30 * time.Second}
	return &client.Client{BaseURL: "http://" + s.IngestAddr, StreamURL: "ws://" + s.PushgwAddr + "/v1/stream", Token: tok, HTTP: hc}
}

// testWriter sends logs to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
