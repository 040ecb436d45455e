package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Pipeline set-up and retry settings.
const (
	dialConcurrency  = 32
	subscribeTimeout = 30 * time.Second
	maxSendAttempts  = 5
	historyPageLimit = 200 // the ingest API's default maximum
	tokenTTL         = 24 * time.Hour
)

// conversation is one closed-loop chat user.
type conversation struct {
	name  string
	cl    *client.Client
	check *convCheck
	conn  *connection

	subscribeOnce sync.Once
	subscribed    chan struct{} // closed by the reader on the subscribed frame
	failed        atomic.Bool   // stopped early: its history is not checked

	// postStart is the unix ns at which the current turn's POST was sent;
	// awaitFirst is set then and cleared by the reader at the turn's first
	// token event, which records POST → first token.
	postStart  atomic.Int64
	awaitFirst atomic.Bool
}

// connection is one WebSocket and the conversations subscribed on it.
type connection struct {
	id      int
	cl      *client.Client
	ws      *client.Conn
	convs   map[string]*conversation // read-only once the reader runs
	closing atomic.Bool              // set before the pipeline closes ws
	dead    chan struct{}            // closed when the reader returns
}

// pipeline drives the stack through its public API and checks it.
type pipeline struct {
	cfg        Config
	violations *tally
	errs       *tally

	convs []*conversation
	conns []*connection
	users int

	tokenLatency, postLatency, turnLatency, firstTokenLatency Histogram
	tokens, tokenEvents, turns                                atomic.Int64
	lastDone                                                  atomic.Int64 // unix ns of the last run.completed
}

func runPipeline(ctx context.Context, cfg Config, runID string, violations, errs *tally, notes *[]string) (*PipelineResult, error) {
	p := &pipeline{cfg: cfg, violations: violations, errs: errs}
	if err := p.build(runID); err != nil {
		return nil, err
	}
	var readers sync.WaitGroup
	defer func() {
		for _, c := range p.conns {
			if c.ws != nil {
				c.closing.Store(true)
				_ = c.ws.Close()
			}
		}
		readers.Wait()
	}()
	if err := p.connect(ctx, &readers); err != nil {
		return nil, err
	}

	progCtx, stopProgress := context.WithCancel(ctx)
	var prog sync.WaitGroup
	prog.Go(func() { newProgress(cfg).run(progCtx, p.progressLine()) })
	start := time.Now()
	var wg sync.WaitGroup
	for _, cv := range p.convs {
		if !cv.failed.Load() {
			wg.Go(func() { p.converse(ctx, cv) })
		}
	}
	wg.Wait()
	stopProgress()
	prog.Wait()

	res := &PipelineResult{
		Conversations: len(p.convs), Connections: len(p.conns), Users: p.users,
		TurnsExpected: int64(cfg.Conversations) * int64(cfg.Messages),
		Turns:         p.turns.Load(), Tokens: p.tokens.Load(), TokenEvents: p.tokenEvents.Load(),
		TokenLatency: p.tokenLatency.Summary(), PostLatency: p.postLatency.Summary(), TurnLatency: p.turnLatency.Summary(),
		FirstTokenLatency: p.firstTokenLatency.Summary(), firstToken: &p.firstTokenLatency,
	}
	if last := p.lastDone.Load(); last > 0 {
		res.Elapsed = time.Unix(0, last).Sub(start)
	}
	if s := res.Elapsed.Seconds(); s > 0 {
		res.TokensPerSec, res.TokenEventsPerSec, res.TurnsPerSec = float64(res.Tokens)/s, float64(res.TokenEvents)/s, float64(res.Turns)/s
	}
	for _, cv := range p.convs {
		for _, t := range cv.check.sent() {
			if t.runs > 1 {
				res.Reruns++
			}
		}
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	res.HistoryChecked = p.checkHistories(ctx)
	if skipped := len(p.convs) - res.HistoryChecked; skipped > 0 {
		*notes = append(*notes, fmt.Sprintf("%d conversations stopped early or their history could not be read (see errors): not history-checked", skipped))
	}
	return res, ctx.Err()
}

// build makes the identities, conversations and connections (not dialled).
func (p *pipeline) build(runID string) error {
	cfg := p.cfg
	httpc := &http.Client{Timeout: 30 * time.Second, Transport: newTransport(cfg.Conversations)}
	var clients []*client.Client
	if cfg.Token != "" {
		clients = []*client.Client{{BaseURL: cfg.IngestURL, StreamURL: cfg.StreamURL, Token: cfg.Token, HTTP: httpc}}
	} else {
		now := time.Now()
		for u := range min(cfg.Users, cfg.Conversations) {
			tok, err := auth.Mint(cfg.AuthSecret, auth.DefaultTenant, fmt.Sprintf("loadgen-u%d", u), tokenTTL, now)
			if err != nil {
				return fmt.Errorf("mint token: %w", err)
			}
			clients = append(clients, &client.Client{BaseURL: cfg.IngestURL, StreamURL: cfg.StreamURL, Token: tok, HTTP: httpc})
		}
	}
	p.users = len(clients)
	want := cfg.expectedText()
	byUser := make([][]*conversation, len(clients))
	for i := range cfg.Conversations {
		u := i % len(clients)
		name := conversationName(cfg.ConversationPrefix, runID, i)
		cv := &conversation{name: name, cl: clients[u], check: newConvCheck(name, want, p.violations), subscribed: make(chan struct{})}
		p.convs = append(p.convs, cv)
		byUser[u] = append(byUser[u], cv)
	}
	for u, convs := range byUser {
		for len(convs) > 0 {
			n := min(cfg.SubsPerConn, len(convs))
			c := &connection{id: len(p.conns), cl: clients[u], convs: make(map[string]*conversation, n), dead: make(chan struct{})}
			for _, cv := range convs[:n] {
				cv.conn = c
				c.convs[cv.name] = cv
			}
			p.conns = append(p.conns, c)
			convs = convs[n:]
		}
	}
	return nil
}

// newTransport keeps a keep-alive connection per concurrent conversation.
func newTransport(conversations int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = conversations + 16
	t.MaxIdleConnsPerHost = conversations + 16
	return t
}

// connect dials every connection, subscribes its conversations and starts
// its reader, then waits until every conversation is subscribed. Failures
// are errors of the run; connect itself fails only if nothing connected.
func (p *pipeline) connect(ctx context.Context, readers *sync.WaitGroup) error {
	var g errgroup.Group
	g.SetLimit(dialConcurrency)
	var connected atomic.Int64
	var firstErr error
	var mu sync.Mutex
	for _, c := range p.conns {
		g.Go(func() error {
			err := p.dial(ctx, c, readers)
			if err != nil {
				for _, cv := range c.convs {
					cv.failed.Store(true)
				}
				p.errs.add("ws_dial", "", fmt.Sprintf("connection %d: %v", c.id, err))
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				return nil
			}
			connected.Add(1)
			return nil
		})
	}
	_ = g.Wait()
	if connected.Load() == 0 {
		return fmt.Errorf("no WebSocket connection: %w", firstErr)
	}
	timeout := time.NewTimer(subscribeTimeout)
	defer timeout.Stop()
	for _, cv := range p.convs {
		if cv.failed.Load() {
			continue
		}
		select {
		case <-cv.subscribed:
		case <-cv.conn.dead:
			cv.failed.Store(true)
		case <-timeout.C:
			p.errs.add("subscribe_timeout", cv.name, fmt.Sprintf("no subscribed frame within %v", subscribeTimeout))
			cv.failed.Store(true)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (p *pipeline) dial(ctx context.Context, c *connection, readers *sync.WaitGroup) error {
	ws, err := c.cl.Dial(ctx)
	if err != nil {
		return err
	}
	c.ws = ws
	for name := range c.convs {
		if err := ws.Subscribe(name, ""); err != nil {
			c.closing.Store(true)
			_ = ws.Close()
			c.ws = nil
			return fmt.Errorf("subscribe %s: %w", name, err)
		}
	}
	readers.Go(func() { p.read(c) })
	return nil
}

// read dispatches the frames of c to its conversations' oracles until the
// connection closes. It runs without a context (a per-read cancellation
// hook costs more than the read): the pipeline stops it by closing c.ws.
func (p *pipeline) read(c *connection) {
	defer close(c.dead)
	var (
		buf []byte
		v   client.FrameView
	)
	ctx := context.Background()
	for {
		b, err := c.ws.NextRaw(ctx, buf)
		recv := time.Now()
		if err != nil {
			if !c.closing.Load() {
				kind := "ws_read"
				if code := client.CloseCode(err); code != 0 {
					kind = fmt.Sprintf("ws_close_%d", code)
				}
				p.errs.add(kind, "", fmt.Sprintf("connection %d (%d conversations): %v", c.id, len(c.convs), err))
			}
			return
		}
		buf = b
		if err := v.Decode(b); err != nil {
			p.violations.add(KindBadFrame, "", fmt.Sprintf("connection %d: %v: %.120s", c.id, err, b))
			continue
		}
		switch v.Type {
		case client.FramePong:
			continue
		case client.FrameError:
			p.errs.add("ws_error_frame", "", fmt.Sprintf("connection %d: %s: %s", c.id, v.Code, v.Message))
			continue
		case client.FrameSubscribed:
			if cv := c.convs[string(v.Conversation)]; cv != nil {
				cv.subscribeOnce.Do(func() { close(cv.subscribed) })
			} else {
				p.violations.add(KindForeignEvent, string(v.Conversation), fmt.Sprintf("connection %d: subscribed frame for a conversation it did not subscribe", c.id))
			}
			continue
		}
		if !v.IsEvent() || len(v.RequestID) == 0 || len(v.RunID) == 0 || v.Seq < 1 || v.TS <= 0 {
			p.violations.add(KindBadFrame, "", fmt.Sprintf("connection %d: not a complete stream event: %.120s", c.id, b))
			continue
		}
		cv := c.convs[string(v.Conversation)]
		if cv == nil {
			p.violations.add(KindForeignEvent, string(v.Conversation), fmt.Sprintf("connection %d: %s event of a conversation it did not subscribe", c.id, v.Type))
			continue
		}
		if v.Type == string(events.TypeToken) {
			p.tokenLatency.Record(recv.Sub(time.Unix(0, v.TS)))
			p.tokenEvents.Add(1)
			if cv.awaitFirst.CompareAndSwap(true, false) {
				p.firstTokenLatency.Record(recv.Sub(time.Unix(0, cv.postStart.Load())))
			}
		}
		if words := cv.check.event(&v); words > 0 {
			p.tokens.Add(int64(words))
		}
	}
}

// converse runs one conversation's closed loop: send, wait for the
// run.completed, think, repeat.
func (p *pipeline) converse(ctx context.Context, cv *conversation) {
	for i := 1; i <= p.cfg.Messages; i++ {
		content := p.cfg.content(i)
		idx := cv.check.begin(content)
		start := time.Now()
		cv.postStart.Store(start.UnixNano())
		cv.awaitFirst.Store(true)
		acc, err := p.send(ctx, cv, i, content)
		if err != nil {
			cv.failed.Store(true)
			return
		}
		p.postLatency.Record(time.Since(start))
		cv.check.accepted(idx, acc.RequestID)
		timeout := time.NewTimer(p.cfg.TurnTimeout - time.Since(start))
		select {
		case <-cv.check.done:
			timeout.Stop()
		case <-cv.conn.dead: // counted by the reader
			timeout.Stop()
			cv.failed.Store(true)
			return
		case <-timeout.C:
			p.errs.add("turn_timeout", cv.name, fmt.Sprintf("message %d (request %s): no run.completed within %v", i, acc.RequestID, p.cfg.TurnTimeout))
			cv.failed.Store(true)
			return
		case <-ctx.Done():
			timeout.Stop()
			cv.failed.Store(true)
			return
		}
		now := time.Now()
		p.turnLatency.Record(now.Sub(start))
		p.turns.Add(1)
		p.lastDone.Store(now.UnixNano())
		if i < p.cfg.Messages && pause(ctx, p.cfg.Think) != nil {
			cv.failed.Store(true)
			return
		}
	}
}

// send posts message i, retrying (with the same Idempotency-Key, so a
// retry never makes a second request) after 429, 503 and transport errors.
// Every failed attempt is an error of the run.
func (p *pipeline) send(ctx context.Context, cv *conversation, i int, content string) (client.Accepted, error) {
	opts := client.SendOptions{IdempotencyKey: fmt.Sprintf("%s-m%d", cv.name, i)}
	for attempt := 1; ; attempt++ {
		acc, err := cv.cl.Send(ctx, cv.name, content, opts)
		if err == nil {
			return acc, nil
		}
		if ctx.Err() != nil {
			return acc, ctx.Err()
		}
		kind, retry, wait := classify(err)
		p.errs.add(kind, cv.name, fmt.Sprintf("POST message %d, attempt %d: %v", i, attempt, err))
		if !retry || attempt == maxSendAttempts {
			return acc, err
		}
		if err := pause(ctx, wait); err != nil {
			return acc, err
		}
	}
}

// classify names an API call's error and says whether to retry, after how long.
func classify(err error) (kind string, retry bool, wait time.Duration) {
	var ae *client.APIError
	if errors.As(err, &ae) {
		kind = fmt.Sprintf("http_%d_%s", ae.Status, ae.Code)
		retry = ae.Status == http.StatusTooManyRequests || ae.Status == http.StatusServiceUnavailable
		return kind, retry, min(max(ae.RetryAfter, 100*time.Millisecond), 5*time.Second)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "http_timeout", true, 100 * time.Millisecond
	}
	return "http_transport", true, 100 * time.Millisecond
}

// checkHistories reads back the history of every conversation that ran to
// the end and checks it; it returns how many it checked.
func (p *pipeline) checkHistories(ctx context.Context) int {
	var g errgroup.Group
	g.SetLimit(p.cfg.HistoryConcurrency)
	var checked atomic.Int64
	for _, cv := range p.convs {
		if cv.failed.Load() {
			continue
		}
		g.Go(func() error {
			if p.checkHistory(ctx, cv) {
				checked.Add(1)
			}
			return nil
		})
	}
	_ = g.Wait()
	return int(checked.Load())
}

// checkHistory pages through the conversation's history (next_before) and
// checks it against what was sent and streamed: exactly two messages per
// turn, seqs 1..2M, user contents as sent, assistant texts as expected with
// status complete, and the request ids of the 202s.
func (p *pipeline) checkHistory(ctx context.Context, cv *conversation) bool {
	turns := cv.check.sent()
	want := 2 * len(turns)
	var pages [][]client.Message
	var before int64
	for n := 0; ; n++ {
		if n > want/historyPageLimit+2 {
			p.violations.add(KindHistoryCount, cv.name, fmt.Sprintf("next_before still set after %d pages of %d messages", n, historyPageLimit))
			break
		}
		page, err := cv.cl.History(ctx, cv.name, historyPageLimit, before)
		if err != nil {
			kind, _, _ := classify(err)
			p.errs.add(kind, cv.name, fmt.Sprintf("GET history before %d: %v", before, err))
			return false
		}
		pages = append(pages, page.Messages)
		if page.NextBefore == nil {
			break
		}
		if *page.NextBefore >= before && before > 0 {
			p.violations.add(KindHistorySeq, cv.name, fmt.Sprintf("next_before %d does not go back from before %d", *page.NextBefore, before))
			break
		}
		before = *page.NextBefore
	}
	var msgs []client.Message
	for i := len(pages) - 1; i >= 0; i-- { // pages come newest first
		msgs = append(msgs, pages[i]...)
	}
	if len(msgs) != want {
		p.violations.add(KindHistoryCount, cv.name, fmt.Sprintf("%d messages, want %d", len(msgs), want))
	}
	wantText := p.cfg.expectedText()
	seqReported := false
	for k, m := range msgs {
		if m.Seq != int64(k+1) && !seqReported {
			p.violations.add(KindHistorySeq, cv.name, fmt.Sprintf("message %d has seq %d", k+1, m.Seq))
			seqReported = true
		}
		if k >= want {
			continue
		}
		t := turns[k/2]
		var bad []string
		if m.RequestID != t.requestID {
			bad = append(bad, fmt.Sprintf("request_id %s, want %s", m.RequestID, t.requestID))
		}
		if k%2 == 0 {
			if m.Role != "user" || m.Content != t.content {
				bad = append(bad, fmt.Sprintf("%s %q, want user %q", m.Role, clipText(m.Content), t.content))
			}
		} else {
			switch {
			case m.Role != "assistant":
				bad = append(bad, fmt.Sprintf("role %s, want assistant", m.Role))
			case m.Status != string(events.StatusComplete) || m.Incomplete:
				bad = append(bad, fmt.Sprintf("status %q (incomplete %v), want complete", m.Status, m.Incomplete))
			case m.Content != wantText:
				bad = append(bad, "assistant text "+describeDiff(m.Content, wantText))
			}
		}
		if len(bad) > 0 {
			p.violations.add(KindHistoryMessage, cv.name, fmt.Sprintf("seq %d: %s", m.Seq, strings.Join(bad, "; ")))
		}
	}
	return true
}

func clipText(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

func (p *pipeline) progressLine() func(elapsed, sinceLast time.Duration) string {
	var last int64
	total := int64(p.cfg.Conversations) * int64(p.cfg.Messages)
	return func(elapsed, sinceLast time.Duration) string {
		n := p.tokens.Load()
		rate := float64(n-last) / max(sinceLast.Seconds(), 1e-9)
		last = n
		return fmt.Sprintf("pipeline %5.0fs  turns %d/%d  %.0f tokens/s  p99 %s  errors %d  violations %d",
			elapsed.Seconds(), p.turns.Load(), total, rate, ms(p.tokenLatency.Quantile(0.99)), p.errs.total(), p.violations.total())
	}
}
