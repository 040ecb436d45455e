package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// A FrameView decodes frames lightly into reused memory; with Conn.NextRaw
// reading into a reused buffer, a high-rate reader allocates nothing per
// frame. Its byte slices are only valid until the next Decode.
func ExampleFrameView() {
	var v client.FrameView
	for _, frame := range []string{
		`{"type":"subscribed","conversation":"c1"}`,
		`{"type":"token","conversation":"c1","request_id":"r-1","run_id":"u-1","seq":2,"ts":1767225600000000000,"delta":"w1 \"w2\" ","agent":"assistant","role":"assistant","cursor":"3-17"}`,
		`{"type":"run.completed","conversation":"c1","request_id":"r-1","run_id":"u-1","seq":3,"ts":1767225600000000001,"status":"complete","cursor":"3-18"}`,
	} {
		if err := v.Decode([]byte(frame)); err != nil {
			fmt.Println(err)
			continue
		}
		switch {
		case v.Type == client.FrameSubscribed:
			fmt.Printf("subscribed to %s\n", v.Conversation)
		case v.IsEvent():
			fmt.Printf("%s %s seq %d delta %q status %q\n", v.Type, v.RequestID, v.Seq, v.Delta, v.Status)
		}
	}
	// Output:
	// subscribed to c1
	// token r-1 seq 2 delta "w1 \"w2\" " status ""
	// run.completed r-1 seq 3 delta "" status "complete"
}

// A chat client: send a message, follow the conversation through dropped
// connections, and fold the events into answers. (stack is a running
// Turnpike stack; a real client takes the URLs and the token from its
// configuration.)
func ExampleClient_Subscribe() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := &client.Client{BaseURL: stack.IngestURL, StreamURL: stack.StreamURL, Token: stack.DevToken}
	sub, err := c.Subscribe(ctx, "example-chat", client.SubscribeOptions{})
	if err != nil {
		fmt.Println("subscribe:", err)
		return
	}
	defer sub.Close()
	sent, err := c.Send(ctx, "example-chat", "hello", client.SendOptions{IdempotencyKey: "hello-1"})
	if err != nil {
		fmt.Println("send:", err)
		return
	}
	var answers client.Transcript
	for {
		e, err := sub.Next(ctx) // reconnects and resumes by cursor on its own
		if errors.Is(err, client.ErrCursorExpired) {
			fmt.Println("reload the history, then subscribe again")
			return
		}
		if err != nil {
			fmt.Println("stream:", err)
			return
		}
		r := answers.Apply(e)
		if r.RequestID != sent.RequestID || r.Status == "" {
			continue
		}
		if r.NeedsHistory { // the stream did not show the whole answer
			page, err := c.History(ctx, "example-chat", 2, 0)
			if err != nil {
				fmt.Println("history:", err)
				return
			}
			r.Text = page.Messages[len(page.Messages)-1].Content
		}
		fmt.Println(r.Text, "-", r.Status)
		return
	}
	// Output:
	// echo #1: hello - complete
}

// Send a message, then stream its one answer over Server-Sent Events: with
// Follow the stream starts early enough to hold the whole answer and ends
// after its run.completed.
func ExampleClient_Events() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// EventsURL defaults to StreamURL's host.
	c := &client.Client{BaseURL: stack.IngestURL, StreamURL: stack.StreamURL, Token: stack.DevToken}
	sent, err := c.Send(ctx, "example-events", "hello", client.SendOptions{})
	if err != nil {
		fmt.Println("send:", err)
		return
	}
	s, err := c.Events(ctx, "example-events", client.EventsOptions{Follow: sent.RequestID})
	if err != nil {
		fmt.Println("events:", err)
		return
	}
	defer s.Close()
	var answer client.Transcript
	for {
		f, err := s.Next(ctx)
		if errors.Is(err, io.EOF) { // the answer is complete
			for _, r := range answer.Runs() {
				fmt.Println(r.Text, "-", r.Status)
			}
			return
		}
		if err != nil {
			fmt.Println("stream:", err)
			return
		}
		if f.Type == client.FrameError {
			fmt.Println(f.Code, f.Message)
			return
		}
		if f.Event != nil {
			answer.Apply(f.Event)
		}
	}
	// Output:
	// echo #1: hello - complete
}

// An asynchronous producer writes requests straight to the requests topic;
// their answers are in history like any other.
func ExampleProducer() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := client.NewProducer(stack.Brokers, client.DefaultRequestsTopic)
	defer p.Close()
	// The identity the dev token speaks for, so that the example can read
	// the answer back through the HTTP API.
	id := events.Identity{Tenant: "default", User: "dev", Conversation: "ticket-4711"}
	requestID, err := p.Produce(ctx, id, "Summarise the ticket", client.ProduceOptions{RequestID: "ticket-4711-summary"})
	if err != nil {
		fmt.Println("produce:", err)
		return
	}
	fmt.Println("queued", requestID)
	c := &client.Client{BaseURL: stack.IngestURL, Token: stack.DevToken}
	for {
		page, err := c.History(ctx, id.Conversation, 2, 0)
		if err == nil && len(page.Messages) == 2 {
			fmt.Println(page.Messages[1].Content)
			return
		}
		if err != nil && !client.IsCode(err, "not_found") {
			fmt.Println("history:", err)
			return
		}
		select {
		case <-ctx.Done():
			fmt.Println("no answer:", ctx.Err())
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Output:
	// queued ticket-4711-summary
	// echo #1: Summarise the ticket
}

// A long-lived client gets its tokens from a callback: the gateway closes a
// connection when its token expires (close code CloseTokenExpired), and the
// subscription dials again with a fresh token and resumes from its cursor.
func ExampleClient_tokenSource() {
	c := &client.Client{
		BaseURL:   "http://localhost:8080",
		StreamURL: "ws://localhost:8081/v1/stream",
		TokenSource: func(ctx context.Context) (string, error) {
			// Ask the identity provider for a fresh token here.
			return os.Getenv("TURNPIKE_TOKEN"), nil
		},
	}
	sub, err := c.Subscribe(context.Background(), "c1", client.SubscribeOptions{
		OnReconnect: func(cursor string) { fmt.Println("resumed after", cursor) },
	})
	if err != nil {
		fmt.Println("subscribe:", err)
		return
	}
	defer sub.Close()
}
