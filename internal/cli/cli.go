package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/streamurl"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

const usage = `usage: turnpike <command> [flags] <conversation> [message]

commands:
  send <conversation> <message>   post a message, stream the answer until it completes
  watch <conversation>            print the conversation's stream events as they come
  history <conversation>          print the conversation's history, oldest first
  latency <conversation> <message> send the message -n times, one after another, and
                                  report the time from POST to run.completed
  topics                          create the Turnpike topics that do not exist yet
                                  (TURNPIKE_KAFKA_BROKERS, -partitions)

Common flags (or environment): -ingest (TURNPIKE_INGEST_URL, default
http://localhost:8080), -stream (TURNPIKE_STREAM_URL, default: the push gateway
the ingest API's page names), -token (TURNPIKE_TOKEN). Run
"turnpike <command> -h" for each command's flags.
`

// Run runs one command and returns the process exit code.
func Run(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, args := args[0], args[1:]
	if cmd == "topics" { // talks to Kafka, not to a running stack
		return runTopics(ctx, args, lookup, stdout, stderr)
	}
	fs := flag.NewFlagSet("turnpike "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	set := flagenv.New(fs, lookup)
	var c client.Client
	set.String(&c.BaseURL, "ingest", "TURNPIKE_INGEST_URL", "http://localhost:8080", "ingest API base URL")
	set.String(&c.StreamURL, "stream", "TURNPIKE_STREAM_URL", "",
		"push gateway WebSocket URL (default: the one the ingest API's page names, else the ingest host's port 8081)")
	set.String(&c.Token, "token", "TURNPIKE_TOKEN", "", "bearer token (the devstack prints one)")
	var (
		sse                  bool
		since, strategy, key string
		limit                int
		before               int64
		timeout              time.Duration
	)
	switch cmd {
	case "send":
		set.String(&strategy, "strategy", "", "", "enqueue, reject or interrupt")
		set.String(&key, "idempotency-key", "", "", "Idempotency-Key of the request")
		set.Duration(&timeout, "timeout", "", 5*time.Minute, "how long to wait for the answer")
	case "watch":
		set.String(&since, "since", "", "", `resume point: "earliest" or a cursor; default: live events only`)
		fs.BoolVar(&sse, "sse", false, "stream over Server-Sent Events (GET /v1/conversations/{c}/events on the -stream host) instead of a WebSocket")
	case "latency":
		set.Int(&limit, "n", "", 20, "how many sends")
		set.Duration(&timeout, "timeout", "", 5*time.Minute, "how long to wait for all answers")
	case "history":
		set.Int(&limit, "limit", "", 50, "messages per page")
		fs.Int64Var(&before, "before", 0, "only messages with a lower seq")
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "turnpike: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	if err := set.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "turnpike:", err)
		return 2
	}
	if c.Token == "" {
		fmt.Fprintln(stderr, "turnpike: no token: pass -token or set TURNPIKE_TOKEN (the devstack prints one)")
		return 2
	}
	rest := fs.Args()
	var err error
	if c.StreamURL == "" && cmd != "history" {
		if c.StreamURL, err = streamurl.Discover(ctx, cmp.Or(c.HTTP, http.DefaultClient), c.BaseURL); err != nil {
			fmt.Fprintln(stderr, "turnpike:", err)
			return 2
		}
	}
	switch {
	case cmd == "send" && len(rest) >= 2:
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		err = send(ctx, &c, rest[0], strings.Join(rest[1:], " "), client.SendOptions{Strategy: strategy, IdempotencyKey: key}, stdout)
	case cmd == "watch" && len(rest) == 1:
		err = watch(ctx, &c, rest[0], since, sse, stdout)
	case cmd == "latency" && len(rest) >= 2 && limit > 0:
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		err = latency(ctx, &c, rest[0], strings.Join(rest[1:], " "), limit, stdout)
	case cmd == "history" && len(rest) == 1:
		err = printHistory(ctx, &c, rest[0], limit, before, stdout)
	default:
		fmt.Fprint(stderr, usage)
		return 2
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "turnpike:", message(err))
		return 1
	}
	return 0
}

// send subscribes first, so no event of the new request can be missed, then
// posts and prints the answer as it streams.
func send(ctx context.Context, c *client.Client, conv, content string, o client.SendOptions, out io.Writer) error {
	conn, err := c.Dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.Subscribe(conv, ""); err != nil {
		return err
	}
	for {
		f, err := conn.Next(ctx)
		if err != nil {
			return err
		}
		if f.Type == "error" {
			return fmt.Errorf("subscribe: %s: %s", f.Code, f.Message)
		}
		if f.Type == "subscribed" {
			break
		}
	}
	acc, err := sendPolitely(ctx, c, conv, content, o, func() {})
	if err != nil {
		return err
	}
	for {
		f, err := conn.Next(ctx)
		if err != nil {
			return err
		}
		if f.Event == nil || f.Event.Header().RequestID != acc.RequestID {
			continue
		}
		if done := printEvent(out, f.Event, false); done {
			return nil
		}
	}
}

func watch(ctx context.Context, c *client.Client, conv, since string, sse bool, out io.Writer) error {
	var conn interface {
		Next(context.Context) (client.Frame, error)
		Close() error
	}
	if sse {
		s, err := c.Events(ctx, conv, client.EventsOptions{Since: since})
		if err != nil {
			return err
		}
		conn = s
	} else {
		ws, err := c.Dial(ctx)
		if err != nil {
			return err
		}
		if err := ws.Subscribe(conv, since); err != nil {
			ws.Close()
			return err
		}
		conn = ws
	}
	defer conn.Close()
	for {
		f, err := conn.Next(ctx)
		if errors.Is(err, io.EOF) {
			return errors.New("the gateway ended the stream")
		}
		if err != nil {
			return err
		}
		switch {
		case f.Type == "error":
			return fmt.Errorf("%s: %s", f.Code, f.Message)
		case f.Type == "subscribed":
			fmt.Fprintf(out, "subscribed to %s\n", f.Conversation)
		case f.Event != nil:
			printEvent(out, f.Event, true)
		}
	}
}

// printEvent prints one event; it reports whether the run completed.
func printEvent(out io.Writer, e events.Event, verbose bool) bool {
	switch e := e.(type) {
	case *events.RunStartedEvent:
		if verbose {
			fmt.Fprintf(out, "[%s run %s started]\n", e.RequestID, e.RunID)
		}
	case *events.TokenEvent:
		fmt.Fprint(out, e.Delta)
	case *events.NoticeEvent:
		fmt.Fprintf(out, "\n[notice: %s]\n", e.Message)
	case *events.AgentTransferEvent:
		fmt.Fprintf(out, "\n[%s → %s]\n", e.From, e.To)
	case *events.RunInterruptedEvent:
		fmt.Fprintf(out, "\n[interrupted: %s asks %q]\n", e.Interrupt.Agent, e.Interrupt.Question)
	case *events.RunCompletedEvent:
		if verbose {
			fmt.Fprintf(out, "\n[%s %s, cursor %s]\n", e.RequestID, e.Status, e.Cursor)
		} else {
			fmt.Fprintf(out, "\n[%s]\n", e.Status)
		}
		return true
	}
	return false
}

func printHistory(ctx context.Context, c *client.Client, conv string, limit int, before int64, out io.Writer) error {
	p, err := c.History(ctx, conv, limit, before)
	if err != nil {
		return err
	}
	for _, m := range p.Messages {
		mark := ""
		if m.Role == "assistant" && m.Status != "complete" {
			mark = " (" + m.Status + ")"
		}
		fmt.Fprintf(out, "%4d %-9s %s%s\n", m.Seq, m.Role, m.Content, mark)
	}
	if p.NextBefore != nil {
		fmt.Fprintf(out, "older messages: -before %d\n", *p.NextBefore)
	}
	return nil
}

// latency sends content n times, each after the previous completed, and
// prints the distribution of POST → run.completed times.
func latency(ctx context.Context, c *client.Client, conv, content string, n int, out io.Writer) error {
	conn, err := c.Dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.Subscribe(conv, ""); err != nil {
		return err
	}
	if f, err := conn.Next(ctx); err != nil || f.Type != "subscribed" {
		return fmt.Errorf("subscribe: %+v %v", f, err)
	}
	took := make([]time.Duration, 0, n)
	for range n {
		var start time.Time
		acc, err := sendPolitely(ctx, c, conv, content, client.SendOptions{}, func() { start = time.Now() })
		if err != nil {
			return err
		}
		for {
			f, err := conn.Next(ctx)
			if err != nil {
				return err
			}
			if done, ok := f.Event.(*events.RunCompletedEvent); ok && done.RequestID == acc.RequestID {
				if done.Status != events.StatusComplete {
					return fmt.Errorf("request %s completed %s", acc.RequestID, done.Status)
				}
				break
			}
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	q := func(p float64) time.Duration { return took[int(p*float64(len(took)-1)+0.5)] }
	fmt.Fprintf(out, "%d runs of %q, POST to run.completed: min %v  median %v  p90 %v  max %v\n",
		n, content, took[0].Round(time.Microsecond), q(0.5).Round(time.Microsecond), q(0.9).Round(time.Microsecond), took[len(took)-1].Round(time.Microsecond))
	return nil
}

// sendPolitely sends, and on 429 waits as long as Retry-After says (at
// least a second) and tries again, up to five times. attempt is called
// before each try.
func sendPolitely(ctx context.Context, c *client.Client, conv, content string, o client.SendOptions, attempt func()) (client.Accepted, error) {
	for tries := 1; ; tries++ {
		attempt()
		acc, err := c.Send(ctx, conv, content, o)
		var ae *client.APIError
		if err == nil || !errors.As(err, &ae) || ae.Status != 429 || tries == 5 {
			return acc, err
		}
		select {
		case <-time.After(max(ae.RetryAfter, time.Second)):
		case <-ctx.Done():
			return acc, ctx.Err()
		}
	}
}
