package echo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	tools []*schema.ToolInfo // bound by WithTools
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

// WithTools returns a copy of m bound to tools, which [[call:NAME]] may
// call. A model.WithTools option given to Generate or Stream replaces them
// for that call (eino v0.9's ChatModelAgent passes its tools that way and
// never calls WithTools).
func (m *Model) WithTools(tools []*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	c := *m
	c.tools = slices.Clone(tools)
	return &c, nil
}

// toolsOf returns the tools of one call: those of a model.WithTools option,
// else those bound by WithTools.
func (m *Model) toolsOf(opts []model.Option) []*schema.ToolInfo {
	return model.GetCommonOptions(&model.Options{Tools: m.tools}, opts...).Tools
}

// Generate returns the whole reply as one assistant message, carrying
// ResponseMeta (finish reason "stop" and token usage). It takes as long as
// the stream would (the pauses included) and returns ctx.Err() when ctx
// ends first. Of the options, only model.WithTools is read.
func (m *Model) Generate(ctx context.Context, input []*schema.Message, opts ...model.Option) (*schema.Message, error) {
	r, err := m.plan(input, m.toolsOf(opts))
	if err != nil {
		return nil, err
	}
	if r.call != nil {
		if err := m.pause(ctx, r); err != nil {
			return nil, err
		}
		return r.callMessage(), nil
	}
	if err := m.emit(ctx, r, func(string, bool) bool { return true }); err != nil {
		return nil, err
	}
	msg := schema.AssistantMessage(r.text, nil)
	msg.ResponseMeta = r.meta()
	return msg, nil
}

// pause waits r's delay (once, before a tool call) or until ctx ends.
func (m *Model) pause(ctx context.Context, r reply) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.delay > 0 {
		return m.sleep(ctx, r.delay)
	}
	return nil
}

// Stream streams the reply one word per chunk (schema.AssistantMessage); the
// last chunk of a reply that ends normally carries ResponseMeta. A bad
// directive or an ended ctx is returned at once; later, Recv returns
// ErrInjectedFailure or ctx.Err() after the chunks already sent, and io.EOF
// at the end. A tool call ([[call:NAME]]) is one chunk. The caller must
// Close the reader. Of the options, only model.WithTools is read.
func (m *Model) Stream(ctx context.Context, input []*schema.Message, opts ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	r, err := m.plan(input, m.toolsOf(opts))
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
	if r.call != nil {
		if err := m.pause(ctx, r); err != nil {
			sw.Send(nil, err)
			return
		}
		sw.Send(r.callMessage(), nil)
		return
	}
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
	// call, when set, is the reply instead of text: a call of a tool.
	call *schema.ToolCall
}

// plan works out the reply to input; tools are the tools [[call:NAME]]
// may call.
func (m *Model) plan(input []*schema.Message, tools []*schema.ToolInfo) (reply, error) {
	var (
		users  int
		last   string
		prompt int
		result *schema.Message // a tool result after the last user message
	)
	for _, msg := range input {
		if msg == nil {
			continue
		}
		prompt += countWords(msg.Content)
		switch msg.Role {
		case schema.User:
			users++
			last = msg.Content
			result = nil
		case schema.Tool:
			result = msg
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
	case d.call != "" && result != nil:
		// The tool answered: echo its result.
		content = result.Content
	case d.call != "":
		if !slices.ContainsFunc(tools, func(t *schema.ToolInfo) bool { return t != nil && t.Name == d.call }) {
			return reply{}, fmt.Errorf("%w [[call:%s]]: no tool %s was given to the model (WithTools or the model.WithTools option)", ErrBadDirective, d.call, d.call)
		}
		args := strings.TrimSpace(content)
		if !strings.HasPrefix(args, "{") || !json.Valid([]byte(args)) {
			args = "{}"
		}
		r.call = &schema.ToolCall{Index: new(0), ID: "echo-call-" + strconv.Itoa(users), Type: "function",
			Function: schema.FunctionCall{Name: d.call, Arguments: args}}
		return r, nil
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

// callMessage is the reply of a tool call: one assistant message with the
// call, finish reason "tool_calls" and the prompt's usage.
func (r reply) callMessage() *schema.Message {
	msg := schema.AssistantMessage("", []schema.ToolCall{*r.call})
	msg.ResponseMeta = &schema.ResponseMeta{
		FinishReason: "tool_calls",
		Usage:        &schema.TokenUsage{PromptTokens: r.prompt, TotalTokens: r.prompt},
	}
	return msg
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
