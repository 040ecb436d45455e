package devstack_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cloudwego/eino/adk"

	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/devstack"
	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

func newAgent(ctx context.Context, _ worker.Request) (adk.Agent, error) {
	model, err := echo.New(echo.Config{})
	if err != nil {
		return nil, err
	}
	return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "assistant", Description: "Echoes.", Model: model})
}

// A devstack binary with a Go agent: `go run .` serves the demo page at
// http://localhost:8080/ with cmd/devstack's flags and environment.
func ExampleMain() {
	devstack.Main(worker.WithAgentFactory(newAgent))
}

// The devstack run from Go, on random ports, until SIGINT.
func ExampleRun() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT)
	defer stop()
	c := devstack.DefaultConfig()
	c.IngestAddr, c.PushgwAddr, c.KafkaAddr, c.MongoAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	c.Ready = func(s devstack.Stack) { fmt.Println("demo page:", s.IngestURL, "token:", s.DevToken) }
	if err := devstack.Run(ctx, c, worker.WithAgentFactory(newAgent)); err != nil {
		fmt.Println(err)
	}
}

// A devstack started from Go on random ports, for a program or a test:
// Start returns once every part serves, and the Stack says where. Here a
// client sends one message and follows the run to its end.
func ExampleStart() {
	dir, err := os.MkdirTemp("", "devstack-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := devstack.DefaultConfig()
	c.DataDir = dir
	c.IngestAddr, c.PushgwAddr, c.KafkaAddr, c.MongoAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	c.Logger = slog.New(slog.DiscardHandler)
	st, err := devstack.Start(ctx, c, worker.WithAgentFactory(newAgent))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()

	cl := &client.Client{BaseURL: st.IngestURL, StreamURL: st.StreamURL, Token: st.DevToken}
	sub, err := cl.Subscribe(ctx, "c1", client.SubscribeOptions{Since: "earliest"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sub.Close()
	a, err := cl.Send(ctx, "c1", "hello", client.SendOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	var tr client.Transcript
	for {
		e, err := sub.Next(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		if rs := tr.Apply(e); rs.RequestID == a.RequestID && rs.Status != "" {
			fmt.Println(rs.Status, rs.Text)
			break
		}
	}
	// Output: complete echo #1: hello
}
