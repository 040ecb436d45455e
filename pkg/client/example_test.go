package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

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
// connections, and fold the events into answers.
func ExampleClient_Subscribe() {
	ctx := context.Background()
	c := &client.Client{BaseURL: "http://localhost:8080", StreamURL: "ws://localhost:8081/v1/stream", Token: os.Getenv("TURNPIKE_TOKEN")}
	sub, err := c.Subscribe(ctx, "c1", client.SubscribeOptions{})
	if err != nil {
		fmt.Println("subscribe:", err)
		return
	}
	defer sub.Close()
	sent, err := c.Send(ctx, "c1", "hello", client.SendOptions{IdempotencyKey: "hello-1"})
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
		if r := answers.Apply(e); r.RequestID == sent.RequestID && r.Status != "" {
			fmt.Println(r.Text, "-", r.Status)
			return
		}
	}
}

// Send a message, then stream its one answer over Server-Sent Events: with
// Follow the stream starts early enough to hold the whole answer and ends
// after its run.completed.
func ExampleClient_Events() {
	ctx := context.Background()
	c := &client.Client{BaseURL: "http://localhost:8080", EventsURL: "http://localhost:8081", Token: os.Getenv("TURNPIKE_TOKEN")}
	sent, err := c.Send(ctx, "c1", "hello", client.SendOptions{})
	if err != nil {
		fmt.Println("send:", err)
		return
	}
	s, err := c.Events(ctx, "c1", client.EventsOptions{Follow: sent.RequestID})
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
}

// An asynchronous producer writes requests straight to the requests topic.
func ExampleProducer() {
	p := client.NewProducer([]string{"localhost:9092"}, client.DefaultRequestsTopic)
	defer p.Close()
	id := events.Identity{Tenant: "acme", User: "batch-importer", Conversation: "ticket-4711"}
	requestID, err := p.Produce(context.Background(), id, "Summarise the ticket", client.ProduceOptions{RequestID: "ticket-4711-summary"})
	if err != nil {
		fmt.Println("produce:", err)
		return
	}
	fmt.Println("queued", requestID)
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
