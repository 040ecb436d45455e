package echo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"
)

// DefaultDelay is the documented default pause before each streamed token
// (TURNPIKE_ECHO_DELAY). Config's zero value means no pause, so callers that
// want the default set it explicitly.
const DefaultDelay = 20 * time.Millisecond

// ErrInjectedFailure is the error a [[fail-after:N]] directive produces, from
// the stream's Recv after N chunks, or from Generate.
var ErrInjectedFailure = errors.New("echo: injected failure")

// Config configures a Model.
type Config struct {
	// Delay is the pause before each token, overridden per request by
	// [[delay:D]]. Zero (the default) means no pause; 0..MaxDelay.
	Delay time.Duration

	// Sleep pauses for d, returning early with ctx.Err() when ctx ends.
	// Default (nil): a timer. Tests inject it to observe pauses without
	// waiting. It is never called for a zero pause.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Validate reports every problem of c.
func (c Config) Validate() error {
	var errs []error
	if c.Delay < 0 || c.Delay > MaxDelay {
		errs = append(errs, fmt.Errorf("echo: delay %v: want 0 to %v", c.Delay, MaxDelay))
	}
	return errors.Join(errs...)
}

// Model is the echo chat model. It is immutable and safe for concurrent use.
type Model struct {
	delay time.Duration
	sleep func(ctx context.Context, d time.Duration) error
}

var _ model.ToolCallingChatModel = (*Model)(nil)

// New returns an echo model.
func New(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Model{delay: cfg.Delay, sleep: cfg.Sleep}
	if m.sleep == nil {
		m.sleep = sleep
	}
	return m, nil
}

// GetType names the model in eino callbacks (components.Typer).
func (m *Model) GetType() string { return "Echo" }

// WithTools returns a copy of m. The echo model never calls tools, so they
// are accepted and ignored.
func (m *Model) WithTools(_ []*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	c := *m
	return &c, nil
}

// Generate returns the whole reply as one assistant message, carrying
// ResponseMeta (finish reason "stop" and token usage). It takes as long as
// the stream would (the pauses included) and returns ctx.Err() when ctx
// ends first. Options are ignored.
func (m *Model) Generate(ctx context.Context, input []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	r, err := m.plan(input)
	if err != nil {
		return nil, err
	}
	if err := m.emit(ctx, r, func(string, bool) bool { return true }); err != nil {
		return nil, err
	}
	msg := schema.AssistantMessage(r.text, nil)
	msg.ResponseMeta = r.meta()
	return msg, nil
}

// Stream streams the reply one word per chunk (schema.AssistantMessage); the
// last chunk of a reply that ends normally carries ResponseMeta. A bad
// directive or an ended ctx is returned at once; later, Recv returns
// ErrInjectedFailure or ctx.Err() after the chunks already sent, and io.EOF
// at the end. The caller must Close the reader. Options are ignored.
func (m *Model) Stream(ctx context.Context, input []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	r, err := m.plan(input)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Unbuffered: a chunk is handed over only when the reader asks for one,
	// so at most one chunk made before a cancellation still reaches it.
	sr, sw := schema.Pipe[*schema.Message](0)
	go m.produce(ctx, r, sw)
	return sr, nil
}

// produce writes r's chunks to sw and closes it. It returns at the end of the
// reply, when ctx ends, or at the next chunk after the reader is closed.
func (m *Model) produce(ctx context.Context, r reply, sw *schema.StreamWriter[*schema.Message]) {
	defer sw.Close()
	sent := false
	err := m.emit(ctx, r, func(token string, last bool) bool {
		sent = true
		msg := schema.AssistantMessage(token, nil)
		if last {
			msg.ResponseMeta = r.meta()
		}
		return !sw.Send(msg, nil)
	})
	switch {
	case err != nil && !errors.Is(err, errReaderClosed):
		sw.Send(nil, err)
	case err == nil && !sent:
		// An empty reply still ends like a real model's: one chunk with no
		// content and the finish reason. (eino's agent refuses to
		// concatenate a stream without any chunk and would report an error.)
		msg := schema.AssistantMessage("", nil)
		msg.ResponseMeta = r.meta()
		sw.Send(msg, nil)
	}
}

// errReaderClosed stops emit when the stream's reader went away.
var errReaderClosed = errors.New("echo: reader closed")

// emit calls send for each token of r after its pause; last is set on the
// final token of a reply that ends normally. It returns ErrInjectedFailure
// for [[fail-after:N]], ctx.Err() when ctx ends, and errReaderClosed when
// send returns false.
func (m *Model) emit(ctx context.Context, r reply, send func(token string, last bool) bool) error {
	n := 0
	for pos := 0; pos < len(r.text); n++ {
		if n == r.failAfter {
			return fmt.Errorf("%w after %d tokens", ErrInjectedFailure, n)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if r.delay > 0 {
			if err := m.sleep(ctx, r.delay); err != nil {
				return err
			}
		}
		end := len(r.text)
		if sp := strings.IndexByte(r.text[pos:], ' '); sp >= 0 {
			end = pos + sp + 1
		}
		if !send(r.text[pos:end], end == len(r.text) && r.failAfter < 0) {
			return errReaderClosed
		}
		pos = end
	}
	if r.failAfter >= 0 {
		return fmt.Errorf("%w after %d tokens", ErrInjectedFailure, n)
	}
	return nil
}

// sleep is the default Config.Sleep.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// reply is what the model answers to one input.
type reply struct {
	// text is the reply's words joined by single spaces ("" for none); its
	// tokens are the words, each with its following space.
	text      string
	words     int
	delay     time.Duration
	failAfter int // -1: no injected failure
	prompt    int // words in the input
}

// plan works out the reply to input.
func (m *Model) plan(input []*schema.Message) (reply, error) {
	var (
		users  int
		last   string
		prompt int
	)
	for _, msg := range input {
		if msg == nil {
			continue
		}
		prompt += countWords(msg.Content)
		if msg.Role == schema.User {
			users++
			last = msg.Content
		}
	}
	content, d, err := parseDirectives(last)
	if err != nil {
		return reply{}, err
	}
	r := reply{delay: m.delay, failAfter: d.failAfter, prompt: prompt}
	if d.hasDelay {
		r.delay = d.delay
	}
	switch {
	case d.empty:
	case d.tokens >= 0:
		r.text, r.words = fillerWords(d.tokens), d.tokens
	default:
		words := strings.Fields(content)
		var b strings.Builder
		b.Grow(len("echo #: ") + 20 + len(content))
		b.WriteString("echo #")
		b.WriteString(strconv.Itoa(users))
		b.WriteByte(':')
		for _, w := range words {
			b.WriteByte(' ')
			b.WriteString(w)
		}
		r.text, r.words = b.String(), 2+len(words)
	}
	return r, nil
}

// meta is the ResponseMeta of a reply that ended normally.
func (r reply) meta() *schema.ResponseMeta {
	return &schema.ResponseMeta{
		FinishReason: "stop",
		Usage: &schema.TokenUsage{
			PromptTokens:     r.prompt,
			CompletionTokens: r.words,
			TotalTokens:      r.prompt + r.words,
		},
	}
}

// fillerWords returns "w1 w2 … wn".
func fillerWords(n int) string {
	if n == 0 {
		return ""
	}
	b := make([]byte, 0, n*(len(" w")+len(strconv.Itoa(n))))
	for i := 1; i <= n; i++ {
		if i > 1 {
			b = append(b, ' ')
		}
		b = append(b, 'w')
		b = strconv.AppendInt(b, int64(i), 10)
	}
	return string(b)
}

// countWords counts the whitespace-separated words of s, as strings.Fields
// would, without allocating.
func countWords(s string) int {
	n := 0
	inWord := false
	for _, r := range s {
		space := unicode.IsSpace(r)
		if !space && !inWord {
			n++
		}
		inWord = !space
	}
	return n
}
