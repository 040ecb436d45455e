// Command turnpike is a small client of a running Turnpike stack:
//
//	go run ./cmd/turnpike send c1 "hello there"
//	go run ./cmd/turnpike watch -since earliest c1
//	go run ./cmd/turnpike history c1
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/turnpike-dev/turnpike/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
