package devstack_test

import (
	"context"
	"fmt"
	"os/signal"
	"syscall"

	"github.com/cloudwego/eino/adk"

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
