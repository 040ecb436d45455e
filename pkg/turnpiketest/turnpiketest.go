// Package turnpiketest runs the whole Turnpike pipeline inside a Go test,
// with no outside service: an embedded Kafka-protocol broker (kfake) and
// an embedded MongoDB-compatible store (FerretDB on SQLite, patched, in a
// temporary directory) on random loopback ports, the ingest API, the push
// gateway and a worker running the caller's eino agent. Teams test their
// agent against the real pipeline (ordering, streaming, persistence,
// interrupts and resumes) as they would in production.
//
//	stack := turnpiketest.Start(t, worker.WithAgentFactory(newAgent))
//	c := stack.Client("alice")
//	run := c.Follow("c1").Run(c.Send("c1", "hello"))
//	// run.Text is what was streamed; c.History("c1") what was persisted.
//
// Everything stops when the test ends (t.Cleanup).
//
// A Stack and its Clients are safe for concurrent use: several goroutines
// may send, resume, cancel, follow and read history through one Client, on
// one conversation or several (a Client holds nothing but its token and
// the public client, itself safe for concurrent use). A helper that fails
// calls t.Fatalf, which ends only the goroutine that called it: from a
// goroutine of your own, mark the work done with a defer. A Follower is
// not safe for concurrent use: give each goroutine its own.
//
// The stack's ingest runs with ingest's defaults except its per-user rate
// limit of POSTs (10 a second, bursts of 20, in production), which is off,
// so that a test may send as many requests at once as it likes;
// StartWithIngest sets ingest's configuration, that limit included. The
// other limits stay: at most 20 requests queued or running per
// conversation (429 beyond).
package turnpiketest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/devstack"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/ingest"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// Timeout bounds each wait of a helper (a start, a send, a run): past it
// the test fails instead of hanging.
const Timeout = 2 * time.Minute

// Stack is a running pipeline.
type Stack struct {
	t testing.TB
	// IngestURL is the ingest API's base URL, StreamURL the push gateway's
	// WebSocket endpoint.
	IngestURL, StreamURL string
	// Brokers are the embedded broker's addresses and MongoURI the
	// embedded store's, for tests that look underneath.
	Brokers  []string
	MongoURI string
	// RequestsTopic and DLQTopic are the requests topic and its dead
	// letters, for tests that produce records themselves
	// (client.Producer) or read what was dead-lettered; StreamTopic is
	// the stream events' topic, for tests that read their records (their
	// headers: the trace context).
	RequestsTopic, DLQTopic, StreamTopic string
	// Tenant is the tenant of the Clients' tokens: "default".
	Tenant string
	secret string
}

// Config returns the worker configuration Start uses: worker.DefaultConfig
// with no per-token delay for the echo model and warnings only in the log.
// Brokers and MongoURI are set by the stack.
func Config() worker.Config {
	c := worker.DefaultConfig()
	c.EchoDelay = 0
	c.LogLevel = "warn"
	c.LogFormat = "text"
	c.Partitions = 4
	return c
}

// IngestConfig returns the ingest configuration Start uses:
// ingest.DefaultConfig with the per-user rate limit of POSTs off
// (RatePerSecond -1; ingest's default is ingest.DefaultRatePerSecond, 10 a
// second, with bursts of ingest.DefaultRateBurst, 20). The stack sets its
// brokers, store, topics, secret, logs and listener.
func IngestConfig() ingest.Config {
	c := ingest.DefaultConfig()
	c.RatePerSecond = -1
	return c
}

// Start starts a pipeline for t whose worker runs with opts (typically
// worker.WithAgentFactory and hooks) and Config(), and whose ingest runs
// with IngestConfig() (no per-user rate limit); it returns once every
// part serves, and stops it all when the test ends. Warnings and errors
// of the stack go to t.Log; the options' logger, registry and ready hook
// do not apply.
func Start(t testing.TB, opts ...worker.Option) *Stack {
	t.Helper()
	return StartWithIngest(t, IngestConfig(), Config(), opts...)
}

// StartConfig is Start with the worker configured by cfg (its Brokers,
// MongoURI and Addr are ignored).
func StartConfig(t testing.TB, cfg worker.Config, opts ...worker.Option) *Stack {
	t.Helper()
	return StartWithIngest(t, IngestConfig(), cfg, opts...)
}

// StartWithIngest is StartConfig with ingest configured by ic: its limits
// (RatePerSecond and RateBurst, the per-user token bucket of POSTs, over
// which a POST gets 429 rate_limited; MaxQueuedPerConversation…) apply;
// its brokers, store, topics, secret, logs, tracing and addresses are the
// stack's, and its MaxContentBytes is cfg's. Start from IngestConfig(), or
// from ingest.DefaultConfig() for production's limits.
func StartWithIngest(t testing.TB, ic ingest.Config, cfg worker.Config, opts ...worker.Option) *Stack {
	t.Helper()
	if _, err := worker.New(withPlaceholders(cfg), opts...); err != nil {
		t.Fatalf("turnpiketest: %v", err)
	}
	cfg.Brokers, cfg.MongoURI, cfg.PprofAddr = nil, "", ""
	dc := devstack.Config{Worker: cfg, Ingest: ic, DataDir: t.TempDir(),
		KafkaAddr: "127.0.0.1:0", MongoAddr: "127.0.0.1:0", IngestAddr: "127.0.0.1:0", PushgwAddr: "127.0.0.1:0"}

	var logMu sync.Mutex
	stopped := false
	dc.Logger = slog.New(slog.NewTextHandler(logWriter(func(s string) {
		logMu.Lock()
		defer logMu.Unlock()
		if !stopped {
			t.Log(strings.TrimSpace(s))
		}
	}), &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(Timeout, cancel)
	st, err := devstack.Start(ctx, dc, opts...)
	timedOut := !timer.Stop()
	if err != nil {
		cancel()
		if timedOut {
			t.Fatalf("turnpiketest: the stack did not start within %v", Timeout)
		}
		t.Fatalf("turnpiketest: start: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("turnpiketest: the stack stopped with %v", err)
		}
		logMu.Lock()
		stopped = true
		logMu.Unlock()
	})
	// The worker is ready once its topics exist: tests may produce
	// records themselves at once.
	names := topic.NewNames(cfg.TopicPrefix)
	return &Stack{t: t, IngestURL: st.IngestURL, StreamURL: st.StreamURL, Brokers: st.Brokers, MongoURI: st.MongoURI,
		RequestsTopic: names.Requests, DLQTopic: names.DLQ, StreamTopic: names.Stream, Tenant: auth.DefaultTenant, secret: st.AuthSecret}
}

// withPlaceholders is cfg with the broker and store the stack will start:
// their addresses are not known yet, but everything else of cfg (and of
// the options) is checked before anything starts.
func withPlaceholders(cfg worker.Config) worker.Config {
	cfg.Brokers, cfg.MongoURI = []string{"127.0.0.1:0"}, "mongodb://127.0.0.1:0"
	return cfg
}

type logWriter func(string)

func (w logWriter) Write(p []byte) (int, error) { w(string(p)); return len(p), nil }

// Client returns a client acting as user (of tenant Stack.Tenant).
func (s *Stack) Client(user string) *Client {
	s.t.Helper()
	tok, err := auth.Mint(s.secret, s.Tenant, user, 24*time.Hour, time.Now())
	if err != nil {
		s.t.Fatalf("turnpiketest: token for %q: %v", user, err)
	}
	return &Client{t: s.t, API: &client.Client{BaseURL: s.IngestURL, StreamURL: s.StreamURL, Token: tok}}
}

// Client sends messages and resumes, follows conversations and reads
// their history as one user; every method fails the test on an error. It
// is safe for concurrent use (see the package documentation).
type Client struct {
	t testing.TB
	// API is the underlying public client, for what the helpers do not do.
	API *client.Client
}

func (c *Client) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), Timeout)
}

// Send posts a user message to conversation and returns its request id.
func (c *Client) Send(conversation, content string) string {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	a, err := c.API.Send(ctx, conversation, content, client.SendOptions{})
	if err != nil {
		c.t.Fatalf("turnpiketest: send to %s: %v", conversation, err)
	}
	return a.RequestID
}

// Resume answers the interrupted request requestID of conversation and
// returns the resume's own request id.
func (c *Client) Resume(conversation, requestID, answer string) string {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	a, err := c.API.Resume(ctx, conversation, requestID, answer, client.SendOptions{})
	if err != nil {
		c.t.Fatalf("turnpiketest: resume %s of %s: %v", requestID, conversation, err)
	}
	return a.RequestID
}

// Cancel cancels request requestID of conversation ("": the running
// request and those queued before the cancel).
func (c *Client) Cancel(conversation, requestID string) {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	if _, err := c.API.Cancel(ctx, conversation, requestID); err != nil {
		c.t.Fatalf("turnpiketest: cancel %s of %s: %v", requestID, conversation, err)
	}
}

// History returns conversation's persisted messages, oldest first (the
// newest 100).
func (c *Client) History(conversation string) []client.Message {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	p, err := c.API.History(ctx, conversation, 100, 0)
	if err != nil {
		c.t.Fatalf("turnpiketest: history of %s: %v", conversation, err)
	}
	return p.Messages
}

// Follow subscribes to conversation's events from its first one; the
// subscription ends with the test.
func (c *Client) Follow(conversation string) *Follower {
	c.t.Helper()
	ctx, cancel := c.ctx()
	defer cancel()
	sub, err := c.API.Subscribe(ctx, conversation, client.SubscribeOptions{Since: "earliest"})
	if err != nil {
		c.t.Fatalf("turnpiketest: follow %s: %v", conversation, err)
	}
	c.t.Cleanup(func() { _ = sub.Close() })
	return &Follower{t: c.t, conv: conversation, sub: sub, pending: map[string][]events.Event{}}
}

// Follower reads one conversation's events. It is not safe for
// concurrent use.
type Follower struct {
	t       testing.TB
	conv    string
	sub     *client.Subscription
	pending map[string][]events.Event // by request id, runs not asked for yet
}

// Run is what the stream showed of one request, up to its run.completed.
type Run struct {
	RequestID string
	// Events are the request's events in stream order, from the
	// run.started of its last run (a request re-run after a failure
	// starts over with a new run id) to run.completed.
	Events []events.Event
	// Text is the concatenated token deltas; Status the completed status.
	Text   string
	Status events.Status
	// Notices are the notices' messages.
	Notices []string
	// Transfers are the agent transfers, in order.
	Transfers []events.AgentTransferEvent
	// Interrupt is what an interrupted run asked.
	Interrupt *events.Interrupt
}

// WaitTokens waits until the current run of request requestID has
// streamed at least n token events, and returns what it showed so far
// (Status is empty: the run is still going). It returns as soon as the
// n-th token event arrives, so a test can act in the middle of an answer:
// cancel it, send another message. The events stay with the Follower, so
// Run(requestID) afterwards still returns the whole run. Token events may
// carry several tokens each (the bridge sends together those that arrive
// while it writes), so n = 1 is the count a test can rely on unless its
// model waits between tokens. The test fails if the run completes first.
func (f *Follower) WaitTokens(requestID string, n int) Run {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	for {
		if evs := f.pending[requestID]; len(evs) > 0 {
			r := fold(requestID, evs)
			tokens := 0
			for _, e := range r.Events {
				if e.Type() == events.TypeToken {
					tokens++
				}
			}
			if tokens >= n {
				r.Status = ""
				return r
			}
			if r.Status != "" {
				f.t.Fatalf("turnpiketest: %s in %s completed with %d token events, want %d first: %v", requestID, f.conv, tokens, n, r)
			}
		}
		f.next(ctx, requestID)
	}
}

// next reads one event into pending.
func (f *Follower) next(ctx context.Context, requestID string) {
	f.t.Helper()
	e, err := f.sub.Next(ctx)
	if err != nil {
		f.t.Fatalf("turnpiketest: waiting for %s in %s: %v", requestID, f.conv, err)
	}
	id := e.Header().RequestID
	f.pending[id] = append(f.pending[id], e)
}

// Run waits for request requestID's run.completed and returns its run.
func (f *Follower) Run(requestID string) Run {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	for {
		evs := f.pending[requestID]
		if n := len(evs); n > 0 && evs[n-1].Type() == events.TypeRunCompleted {
			delete(f.pending, requestID)
			return fold(requestID, evs)
		}
		f.next(ctx, requestID)
	}
}

// fold keeps the last run's events and sums them up.
func fold(requestID string, evs []events.Event) Run {
	last := evs[len(evs)-1].Header().RunID
	r := Run{RequestID: requestID}
	for _, e := range evs {
		if e.Header().RunID != last {
			continue
		}
		r.Events = append(r.Events, e)
		switch e := e.(type) {
		case *events.TokenEvent:
			r.Text += e.Delta
		case *events.NoticeEvent:
			r.Notices = append(r.Notices, e.Message)
		case *events.AgentTransferEvent:
			r.Transfers = append(r.Transfers, *e)
		case *events.RunInterruptedEvent:
			in := e.Interrupt
			r.Interrupt = &in
		case *events.RunCompletedEvent:
			r.Status = e.Status
		}
	}
	return r
}

// String renders a run for failure messages.
func (r Run) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "request %s %s:", r.RequestID, r.Status)
	for _, e := range r.Events {
		fmt.Fprintf(&b, " %s", e.Type())
	}
	fmt.Fprintf(&b, " text=%q", r.Text)
	return b.String()
}
