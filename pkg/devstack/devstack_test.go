package devstack_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"

	internaldevstack "github.com/turnpike-dev/turnpike/internal/devstack"
	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/devstack"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// The devstack with a Go agent serves a request end to end with its dev
// token, then stops cleanly when its context ends.
func TestRunServesAGoAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	c := devstack.DefaultConfig()
	c.DataDir = t.TempDir()
	c.IngestAddr, c.PushgwAddr, c.KafkaAddr, c.MongoAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	c.Worker.EchoDelay, c.Worker.LogLevel = 0, "error"
	ready := make(chan devstack.Stack, 1)
	c.Ready = func(s devstack.Stack) { ready <- s }
	built := make(chan worker.Request, 1)
	done := make(chan error, 1)
	go func() {
		done <- devstack.Run(runCtx, c, worker.WithAgentFactory(func(ctx context.Context, r worker.Request) (adk.Agent, error) {
			built <- r
			return newAgent(ctx, r)
		}))
	}()
	var st devstack.Stack
	select {
	case st = <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-ctx.Done():
		t.Fatal("the devstack did not start")
	}
	cl := &client.Client{BaseURL: st.IngestURL, StreamURL: st.StreamURL, Token: st.DevToken}
	sub, err := cl.Subscribe(ctx, "c1", client.SubscribeOptions{Since: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	a, err := cl.Send(ctx, "c1", "hi there", client.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var tr client.Transcript
	for {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rs := tr.Apply(e); rs.RequestID == a.RequestID && rs.Status != "" {
			if rs.Status != events.StatusComplete || rs.Text == "" {
				t.Fatalf("run %+v", rs)
			}
			break
		}
	}
	if r := <-built; r.RequestID != a.RequestID || r.User != "dev" || r.Conversation != "c1" {
		t.Errorf("the factory got %+v", r)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run after stop: %v", err)
	}
}

// The defaults are cmd/devstack's: every listener on loopback.
func TestDefaultConfigIsCmdDevstacks(t *testing.T) {
	var cmd internaldevstack.Config
	if _, ok := flagenv.ParseCommand("devstack", nil, func(string) (string, bool) { return "", false }, io.Discard, cmd.Bind); !ok {
		t.Fatal("parse")
	}
	c := devstack.DefaultConfig()
	got := []string{c.IngestAddr, c.PushgwAddr, c.KafkaAddr, c.MongoAddr, c.DataDir, c.DevUser}
	want := []string{cmd.IngestAddr, cmd.PushgwAddr, cmd.KafkaAddr, cmd.MongoAddr, cmd.DataDir, cmd.DevUser}
	if !slices.Equal(got, want) {
		t.Errorf("DefaultConfig: %q, cmd/devstack: %q", got, want)
	}
	for _, a := range got[:4] {
		if host, _, err := net.SplitHostPort(a); err != nil || !net.ParseIP(host).IsLoopback() {
			t.Errorf("default address %q is not on loopback", a)
		}
	}
}

// Config.Worker's zero fields take their defaults one by one: a caller
// who sets only Worker.Brokers, as its documentation invites, gets a
// devstack on that broker (and every other default): no embedded broker
// starts, and the topics are created on the caller's. (Before, a Worker
// without a Model was replaced whole by the defaults, brokers included.)
func TestAWorkerConfigWithOnlyBrokersRunsOnThatBroker(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 2*time.Minute)
	k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	dir := t.TempDir()
	ready := make(chan devstack.Stack, 1)
	c := devstack.Config{DataDir: dir, IngestAddr: "127.0.0.1:0", PushgwAddr: "127.0.0.1:0", KafkaAddr: "127.0.0.1:0", MongoAddr: "127.0.0.1:0",
		Worker: worker.Config{Brokers: []string{k.Addr()}}, Logger: slog.New(slog.DiscardHandler),
		Ready: func(s devstack.Stack) { ready <- s }}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- devstack.Run(runCtx, c) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-ctx.Done():
		t.Fatal("the devstack did not start")
	}
	names := topic.NewNames(worker.DefaultConfig().TopicPrefix)
	for _, name := range names.All() {
		if _, err := topic.Partitions(ctx, []string{k.Addr()}, name); err != nil {
			t.Errorf("topic %s on the given broker: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "kafka")); !os.IsNotExist(err) {
		t.Errorf("an embedded broker started beside the given one (%s: %v)", filepath.Join(dir, "kafka"), err)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run after stop: %v", err)
	}
}
