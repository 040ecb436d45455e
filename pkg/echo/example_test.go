package echo_test

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/echo"
)

func Example() {
	m, err := echo.New(echo.Config{Delay: 0}) // the local stack uses echo.DefaultDelay
	if err != nil {
		fmt.Println(err)
		return
	}
	input := []*schema.Message{
		schema.UserMessage("hi"),
		schema.AssistantMessage("echo #1: hi", nil),
		schema.UserMessage("hello   [[delay:1ms]] world"),
	}
	sr, err := m.Stream(context.Background(), input)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sr.Close()
	for {
		chunk, err := sr.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%q\n", chunk.Content)
	}
	// Output:
	// "echo "
	// "#2: "
	// "hello "
	// "world"
}

func ExampleModel_Generate() {
	m, err := echo.New(echo.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for _, content := range []string{"[[tokens:3]]", "a b [[fail-after:1]]", "[[tokens:-1]]"} {
		msg, err := m.Generate(ctx, []*schema.Message{schema.UserMessage(content)})
		switch {
		case errors.Is(err, echo.ErrInjectedFailure):
			fmt.Println("injected:", err)
		case errors.Is(err, echo.ErrBadDirective):
			fmt.Println("bad:", err)
		default:
			fmt.Printf("%q finish=%s completion_tokens=%d\n",
				msg.Content, msg.ResponseMeta.FinishReason, msg.ResponseMeta.Usage.CompletionTokens)
		}
	}
	// Output:
	// "w1 w2 w3" finish=stop completion_tokens=3
	// injected: echo: injected failure after 1 tokens
	// bad: echo: bad directive [[tokens:-1]]: want a count from 0 to 100000
}
