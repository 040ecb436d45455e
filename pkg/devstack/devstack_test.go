package devstack_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
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

// Start returns once every part serves, with a Stack that says where (the
// listeners handed in, the embedded broker and store, the secret the dev
// token is signed with); Close stops it cleanly and closes the listeners,
// and Wait then returns the same.
func TestStartReportsWhereItServesAndCloseStopsIt(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 2*time.Minute)
	ingestLn, pushLn := listen(t), listen(t)
	c := devstack.Config{DataDir: t.TempDir(), KafkaAddr: "127.0.0.1:0", MongoAddr: "127.0.0.1:0",
		IngestListener: ingestLn, PushgwListener: pushLn, AuthSecret: strings.Repeat("s", auth.MinSecretBytes),
		Logger: slog.New(slog.DiscardHandler)}
	c.Worker.Partitions = 2
	st, err := devstack.Start(ctx, c, worker.WithAgentFactory(newAgent))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if st.IngestAddr != ingestLn.Addr().String() || st.PushgwAddr != pushLn.Addr().String() {
		t.Errorf("Stack listens on %s and %s, want the given %s and %s", st.IngestAddr, st.PushgwAddr, ingestLn.Addr(), pushLn.Addr())
	}
	if st.AuthSecret != c.AuthSecret || len(st.Brokers) != 1 || st.MongoURI == "" {
		t.Errorf("Stack %+v: want the given secret, the embedded broker and store", st)
	}
	if _, err := topic.Partitions(ctx, st.Brokers, topic.NewNames(worker.DefaultConfig().TopicPrefix).Requests); err != nil {
		t.Errorf("the requests topic on Stack.Brokers: %v", err)
	}
	v, err := auth.NewVerifier(st.AuthSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.VerifyToken(st.DevToken); err != nil {
		t.Errorf("the dev token does not verify with Stack.AuthSecret: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := st.Wait(); err != nil {
		t.Errorf("Wait after Close: %v", err)
	}
	if _, err := ingestLn.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the ingest listener still accepts after Close (%v)", err)
	}
}

// Start returns the failure of a devstack that cannot start, and nothing.
func TestStartReturnsWhyTheStackCouldNotStart(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, time.Minute)
	busy := listen(t)
	c := devstack.Config{DataDir: t.TempDir(), KafkaAddr: "127.0.0.1:0", MongoAddr: "127.0.0.1:0", IngestAddr: busy.Addr().String(),
		PushgwAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)}
	st, err := devstack.Start(ctx, c)
	if st != nil || err == nil || !strings.Contains(err.Error(), "TURNPIKE_INGEST_ADDR="+busy.Addr().String()) {
		t.Fatalf("Start = %v, %v; want no stack and the busy ingest address", st, err)
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}
