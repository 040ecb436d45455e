package echo_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/echo"
)

// producerFrame names the goroutine behind every stream, to find leaks.
const producerFrame = "echo.(*Model).produce("

// TestMain fails the run if any stream's goroutine outlives the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// The run's end has no test context: a minute for the last
		// streams' goroutines to go.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		n := waitProducers(ctx, 0)
		cancel()
		if n > 0 {
			fmt.Fprintf(os.Stderr, "%d stream goroutines leaked\n", n)
			code = 1
		}
	}
	os.Exit(code)
}

// producers counts the goroutines currently running a stream.
func producers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), producerFrame)
		}
		buf = make([]byte, 2*len(buf))
	}
}

// waitProducers waits until want goroutines run a stream, or ctx ends
// (the test's own bound), and returns how many do.
func waitProducers(ctx context.Context, want int) int {
	for {
		n := producers()
		if n == want {
			return n
		}
		select {
		case <-ctx.Done():
			return n
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newModel(t *testing.T, cfg echo.Config) *echo.Model {
	t.Helper()
	m, err := echo.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

func user(content string) []*schema.Message { return []*schema.Message{schema.UserMessage(content)} }

// drain reads sr to its end and closes it: the chunks, and the error that
// ended it (nil for io.EOF).
func drain(t *testing.T, sr *schema.StreamReader[*schema.Message]) ([]*schema.Message, error) {
	t.Helper()
	defer sr.Close()
	var chunks []*schema.Message
	for {
		msg, err := sr.Recv()
		if errors.Is(err, io.EOF) {
			return chunks, nil
		}
		if err != nil {
			return chunks, err
		}
		chunks = append(chunks, msg)
	}
}

func contents(chunks []*schema.Message) []string {
	out := make([]string, len(chunks))
	for i, c := range chunks {
		out[i] = c.Content
	}
	return out
}

// recvWithin calls Recv, failing the test if it does not return before
// bound ends (the test's context: a hang detector, not a timing).
func recvWithin(t *testing.T, bound context.Context, sr *schema.StreamReader[*schema.Message]) (*schema.Message, error) {
	t.Helper()
	type result struct {
		msg *schema.Message
		err error
	}
	done := make(chan result, 1)
	go func() {
		msg, err := sr.Recv()
		done <- result{msg, err}
	}()
	select {
	case r := <-done:
		return r.msg, r.err
	case <-bound.Done():
		t.Fatalf("Recv did not return: %v", bound.Err())
		return nil, nil
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     echo.Config
		wantErr bool
	}{
		{"The zero config is valid and means no delay.", echo.Config{}, false},
		{"The default delay is valid.", echo.Config{Delay: echo.DefaultDelay}, false},
		{"The largest delay is valid.", echo.Config{Delay: echo.MaxDelay}, false},
		{"A negative delay is rejected.", echo.Config{Delay: -time.Millisecond}, true},
		{"A delay over the cap is rejected.", echo.Config{Delay: echo.MaxDelay + 1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := echo.New(tt.cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("New(%+v) error = %v, want error: %v", tt.cfg, err, tt.wantErr)
			}
			if (m == nil) == (err == nil) {
				t.Fatalf("New returned model %v with error %v", m, err)
			}
		})
	}
}

func TestReply(t *testing.T) {
	t.Parallel()
	m := newModel(t, echo.Config{})
	tests := []struct {
		name  string
		input []*schema.Message
		want  []string
	}{
		{
			name:  "A single user message is echoed as number one.",
			input: user("hi"),
			want:  []string{"echo ", "#1: ", "hi"},
		},
		{
			name: "K counts every user message of the history window and runs of spaces collapse.",
			input: []*schema.Message{
				schema.SystemMessage("be brief"),
				schema.UserMessage("one"),
				schema.AssistantMessage("echo #1: one", nil),
				schema.UserMessage("two"),
				schema.AssistantMessage("echo #2: two", nil),
				schema.UserMessage("  hello \t  world\n"),
			},
			want: []string{"echo ", "#3: ", "hello ", "world"},
		},
		{
			name: "The last user message is echoed even when another role follows it.",
			input: []*schema.Message{
				schema.UserMessage("first"),
				schema.UserMessage("second"),
				schema.SystemMessage("note"),
			},
			want: []string{"echo ", "#2: ", "second"},
		},
		{
			name: "Directives of earlier messages are ignored.",
			input: []*schema.Message{
				schema.UserMessage("[[empty]]"),
				schema.AssistantMessage("", nil),
				schema.UserMessage("now [[delay:0s]] talk"),
			},
			want: []string{"echo ", "#2: ", "now ", "talk"},
		},
		{
			name:  "A directive is removed and the words around it are kept.",
			input: user("hi [[delay:1ms]] there"),
			want:  []string{"echo ", "#1: ", "hi ", "there"},
		},
		{
			name:  "A directive glued to words removes only itself.",
			input: user("a[[delay:0s]]b"),
			want:  []string{"echo ", "#1: ", "ab"},
		},
		{
			name:  "Unknown bracket text is echoed verbatim.",
			input: user("see [[foo:1]] [[EMPTY]] [[emptyish]] [[ tokens:2 ]] [[]]"),
			want:  []string{"echo ", "#1: ", "see ", "[[foo:1]] ", "[[EMPTY]] ", "[[emptyish]] ", "[[ ", "tokens:2 ", "]] ", "[[]]"},
		},
		{
			name:  "A directive that is never closed is echoed verbatim.",
			input: user("x [[tokens:3"),
			want:  []string{"echo ", "#1: ", "x ", "[[tokens:3"},
		},
		{
			name:  "A directive inside extra brackets is still found.",
			input: user("x[[[delay:0s]]]y"),
			want:  []string{"echo ", "#1: ", "x[]y"},
		},
		{
			name:  "A message holding only a directive echoes the bare prefix.",
			input: user("[[delay:0s]]"),
			want:  []string{"echo ", "#1:"},
		},
		{
			name:  "Input without any user message echoes number zero.",
			input: []*schema.Message{schema.SystemMessage("hello")},
			want:  []string{"echo ", "#0:"},
		},
		{
			name:  "Non-ASCII whitespace separates words too.",
			input: user("a\u00a0b\u2003c"),
			want:  []string{"echo ", "#1: ", "a ", "b ", "c"},
		},
		{
			name:  "The tokens directive replaces the echo with filler words.",
			input: user("ignored [[tokens:3]] too"),
			want:  []string{"w1 ", "w2 ", "w3"},
		},
		{
			name:  "Zero filler words give one chunk without content.",
			input: user("[[tokens:0]]"),
			want:  []string{""},
		},
		{
			name:  "The empty directive gives one chunk without content.",
			input: user("say [[empty]] nothing"),
			want:  []string{""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			sr, err := m.Stream(ctx, tt.input)
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			chunks, err := drain(t, sr)
			if err != nil {
				t.Fatalf("stream ended with %v", err)
			}
			if got := contents(chunks); !slices.Equal(got, tt.want) {
				t.Fatalf("chunks = %q, want %q", got, tt.want)
			}
			for i, c := range chunks {
				if c.Role != schema.Assistant || len(c.ToolCalls) != 0 {
					t.Fatalf("chunk %d = %+v, want an assistant message without tool calls", i, c)
				}
			}

			msg, err := m.Generate(ctx, tt.input)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if want := strings.Join(tt.want, ""); msg.Content != want || msg.Role != schema.Assistant {
				t.Fatalf("Generate = %s %q, want assistant %q (the concatenated stream)", msg.Role, msg.Content, want)
			}
		})
	}
}

func TestResponseMeta(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	m := newModel(t, echo.Config{})
	input := []*schema.Message{
		schema.SystemMessage("you echo"),               // 2 words
		schema.UserMessage("hello there"),              // 2 words
		schema.AssistantMessage("echo #1: hello", nil), // 3 words
		schema.UserMessage("a b [[delay:0s]] c"),       // 4 words, directive included
	}
	want := schema.TokenUsage{PromptTokens: 11, CompletionTokens: 5, TotalTokens: 16}

	sr, err := m.Stream(ctx, input)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	chunks, err := drain(t, sr)
	if err != nil || len(chunks) != 5 {
		t.Fatalf("stream = %d chunks, %v; want 5 chunks", len(chunks), err)
	}
	for i, c := range chunks[:len(chunks)-1] {
		if c.ResponseMeta != nil {
			t.Fatalf("chunk %d carries ResponseMeta %+v; only the last should", i, c.ResponseMeta)
		}
	}
	streamed, err := schema.ConcatMessages(chunks)
	if err != nil {
		t.Fatalf("ConcatMessages: %v", err)
	}
	generated, err := m.Generate(ctx, input)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	for name, msg := range map[string]*schema.Message{"stream": streamed, "Generate": generated} {
		meta := msg.ResponseMeta
		if meta == nil || meta.Usage == nil {
			t.Fatalf("%s: no ResponseMeta/Usage", name)
		}
		if meta.FinishReason != "stop" || *meta.Usage != want {
			t.Fatalf("%s: meta = %q %+v, want \"stop\" %+v", name, meta.FinishReason, *meta.Usage, want)
		}
	}
}

func TestBadDirective(t *testing.T) {
	t.Parallel()
	m := newModel(t, echo.Config{})
	tests := []struct {
		name    string
		content string
	}{
		{"A negative token count is rejected.", "[[tokens:-1]]"},
		{"A token count that is not a number is rejected.", "[[tokens:abc]]"},
		{"A token count over the cap is rejected.", fmt.Sprintf("[[tokens:%d]]", echo.MaxTokens+1)},
		{"A token count with a space is rejected.", "[[tokens: 5]]"},
		{"The tokens directive without a value is rejected.", "[[tokens]]"},
		{"An empty token count is rejected.", "[[tokens:]]"},
		{"A delay that is not a duration is rejected.", "hi [[delay:abc]]"},
		{"A delay without a unit is rejected.", "[[delay:5]]"},
		{"A negative delay is rejected.", "[[delay:-1s]]"},
		{"A delay over the cap is rejected.", "[[delay:61s]]"},
		{"A negative fail-after count is rejected.", "[[fail-after:-3]]"},
		{"A fail-after count over the cap is rejected.", "[[fail-after:1000000]]"},
		{"The empty directive with a value is rejected.", "[[empty:1]]"},
		{"A directive given twice is rejected.", "[[tokens:1]] [[tokens:1]]"},
		{"Empty and tokens together are rejected.", "[[empty]] [[tokens:3]]"},
		{"A bad directive after a good one is rejected.", "[[delay:0s]] ok [[fail-after:x]]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			sr, err := m.Stream(ctx, user(tt.content))
			if !errors.Is(err, echo.ErrBadDirective) || sr != nil {
				if sr != nil {
					sr.Close()
				}
				t.Fatalf("Stream(%q) = %v, %v; want no stream and ErrBadDirective", tt.content, sr, err)
			}
			msg, err := m.Generate(ctx, user(tt.content))
			if !errors.Is(err, echo.ErrBadDirective) || msg != nil {
				t.Fatalf("Generate(%q) = %v, %v; want ErrBadDirective", tt.content, msg, err)
			}
		})
	}
}

func TestFailAfter(t *testing.T) {
	t.Parallel()
	m := newModel(t, echo.Config{})
	tests := []struct {
		name    string
		content string
		want    []string
	}{
		{"Failing after zero tokens streams nothing.", "a b [[fail-after:0]]", nil},
		{"Failing after two tokens streams two.", "a b c [[fail-after:2]]", []string{"echo ", "#1: "}},
		{"Failing after the last token streams the whole reply.", "a [[fail-after:3]]", []string{"echo ", "#1: ", "a"}},
		{"Failing after more tokens than the reply has streams it whole.", "a [[fail-after:50]]", []string{"echo ", "#1: ", "a"}},
		{"Filler words fail after N too.", "[[tokens:5]][[fail-after:3]]", []string{"w1 ", "w2 ", "w3 "}},
		{"An empty reply still fails.", "[[empty]] [[fail-after:1]]", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			sr, err := m.Stream(ctx, user(tt.content))
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			chunks, err := drain(t, sr)
			if !errors.Is(err, echo.ErrInjectedFailure) {
				t.Fatalf("stream ended with %v, want ErrInjectedFailure", err)
			}
			if got := contents(chunks); !slices.Equal(got, tt.want) {
				t.Fatalf("chunks before the failure = %q, want %q", got, tt.want)
			}
			for i, c := range chunks {
				if c.ResponseMeta != nil {
					t.Fatalf("chunk %d of a failing stream carries ResponseMeta %+v", i, c.ResponseMeta)
				}
			}
			msg, err := m.Generate(ctx, user(tt.content))
			if !errors.Is(err, echo.ErrInjectedFailure) || msg != nil {
				t.Fatalf("Generate = %v, %v; want ErrInjectedFailure", msg, err)
			}
		})
	}
}

// sleepRecorder is a Config.Sleep that records each pause and returns at once.
type sleepRecorder struct {
	mu     sync.Mutex // guards pauses
	pauses []time.Duration
}

func (s *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.pauses = append(s.pauses, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleepRecorder) take() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pauses
	s.pauses = nil
	return p
}

func TestDelay(t *testing.T) {
	t.Parallel()
	const configured = 7 * time.Millisecond
	rep := func(d time.Duration, n int) []time.Duration { return slices.Repeat([]time.Duration{d}, n) }
	tests := []struct {
		name    string
		delay   time.Duration
		content string
		want    []time.Duration
	}{
		{"The configured delay comes before every token.", configured, "a b", rep(configured, 4)},
		{"A zero configured delay never pauses.", 0, "a b", nil},
		{"The delay directive overrides the configured delay.", configured, "[[delay:3ms]] a", rep(3*time.Millisecond, 3)},
		{"A zero delay directive turns the configured delay off.", configured, "[[delay:0s]] a", nil},
		{"The delay directive works without a configured delay.", 0, "a [[delay:1m]]", rep(time.Minute, 3)},
		{"An empty reply does not pause.", configured, "[[empty]]", nil},
		{"A failing reply pauses only before the tokens it streams.", configured, "a b [[fail-after:1]]", rep(configured, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			rec := &sleepRecorder{}
			m := newModel(t, echo.Config{Delay: tt.delay, Sleep: rec.sleep})

			sr, err := m.Stream(ctx, user(tt.content))
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			if _, err := drain(t, sr); err != nil && !errors.Is(err, echo.ErrInjectedFailure) {
				t.Fatalf("stream ended with %v", err)
			}
			if got := rec.take(); !slices.Equal(got, tt.want) {
				t.Fatalf("Stream paused %v, want %v", got, tt.want)
			}

			if _, err := m.Generate(ctx, user(tt.content)); err != nil && !errors.Is(err, echo.ErrInjectedFailure) {
				t.Fatalf("Generate: %v", err)
			}
			if got := rec.take(); !slices.Equal(got, tt.want) {
				t.Fatalf("Generate paused %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRealDelayPausesBeforeEachToken(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	m := newModel(t, echo.Config{Delay: time.Minute})
	start := time.Now()
	sr, err := m.Stream(ctx, user("a b [[delay:5ms]]"))
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	chunks, err := drain(t, sr)
	if err != nil || len(chunks) != 4 {
		t.Fatalf("stream = %d chunks, %v; want 4", len(chunks), err)
	}
	// Timers never fire early, so four pauses take at least 20ms. That the
	// directive replaced the one-minute default, the test's context proves:
	// four minutes of pauses would end it (20 s), and drain with it.
	if elapsed := time.Since(start); elapsed < 20*time.Millisecond {
		t.Fatalf("streaming 4 tokens at 5ms took %v", elapsed)
	}
}

// blockingSleep returns at once for the first free pauses, then blocks until
// ctx ends.
type blockingSleep struct {
	mu   sync.Mutex // guards free
	free int
}

func (s *blockingSleep) sleep(ctx context.Context, _ time.Duration) error {
	s.mu.Lock()
	free := s.free > 0
	s.free--
	s.mu.Unlock()
	if free {
		return ctx.Err()
	}
	<-ctx.Done()
	return ctx.Err()
}

// deadlineContext is a context whose deadline passes when the test says so
// (closing done), not by the clock: then Err is context.DeadlineExceeded.
type deadlineContext struct {
	context.Context
	done chan struct{}
}

func (c *deadlineContext) Done() <-chan struct{} { return c.done }

func (c *deadlineContext) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func TestContextEndStopsTheStream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		sleep    func(*blockingSleep) func(context.Context, time.Duration) error
		delay    time.Duration
		received int // chunks to receive before the cancellation
		deadline bool
	}{
		{
			name:     "Cancelling mid-stream ends Recv with context.Canceled.",
			sleep:    func(b *blockingSleep) func(context.Context, time.Duration) error { return b.sleep },
			delay:    time.Millisecond,
			received: 2,
		},
		{
			name:     "Cancelling during a real one-minute pause ends Recv at once.",
			delay:    time.Minute,
			received: 0,
		},
		{
			name:     "Cancelling a stream without pauses ends it within a token.",
			delay:    0,
			received: 3,
		},
		{
			name:     "A deadline mid-stream ends Recv with context.DeadlineExceeded.",
			sleep:    func(b *blockingSleep) func(context.Context, time.Duration) error { return b.sleep },
			delay:    time.Millisecond,
			received: 1,
			deadline: true, // passes once the chunks are received
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := echo.Config{Delay: tt.delay}
			if tt.sleep != nil {
				cfg.Sleep = tt.sleep(&blockingSleep{free: tt.received})
			}
			m := newModel(t, cfg)

			parent := testContext(t)
			ctx, cancel := context.WithCancel(parent)
			defer cancel()
			var asked <-chan struct{} // closed once the producer waits on ctx
			if tt.sleep == nil && tt.delay > 0 {
				ctx, asked = testenv.WatchDone(ctx)
			}
			wantErr := context.Canceled
			var expire func()
			if tt.deadline {
				d := &deadlineContext{Context: parent, done: make(chan struct{})}
				ctx, expire = d, func() { close(d.done) }
				wantErr = context.DeadlineExceeded
			}

			sr, err := m.Stream(ctx, user("[[tokens:1000]]"))
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			defer sr.Close()
			for i := range tt.received {
				if _, err := recvWithin(t, parent, sr); err != nil {
					t.Fatalf("Recv %d before the cancellation: %v", i, err)
				}
			}
			if asked != nil {
				// The producer reaches its real pause (it waits on ctx), so
				// the cancellation has to interrupt the timer.
				select {
				case <-asked:
				case <-parent.Done():
					t.Fatal("the producer never waited on its context")
				}
			}
			if tt.deadline {
				expire()
			} else {
				cancel()
			}
			// Without pauses one chunk may already be on its way.
			for stale := 0; ; stale++ {
				msg, err := recvWithin(t, parent, sr)
				if err == nil && stale == 0 && tt.delay == 0 {
					continue
				}
				if !errors.Is(err, wantErr) {
					t.Fatalf("Recv after the context ended = %v, %v; want %v", msg, err, wantErr)
				}
				break
			}
		})
	}
}

// Generate, paused before a token (a minute: the default Sleep, a timer),
// returns context.Canceled as soon as its context ends. The test cancels
// once the pause waits on the context (its Done is asked for), not after a
// guessed time, and gives Generate until the test's own deadline.
func TestContextEndStopsGenerate(t *testing.T) {
	t.Parallel()
	m := newModel(t, echo.Config{Delay: time.Minute})
	testCtx := testContext(t)
	inner, cancel := context.WithCancel(testCtx)
	ctx, asked := testenv.WatchDone(inner)
	done := make(chan error, 1)
	go func() {
		_, err := m.Generate(ctx, user("hi"))
		done <- err
	}()
	select {
	case <-asked: // the pause waits on ctx
	case err := <-done:
		t.Fatalf("Generate = %v before its pause", err)
	case <-testCtx.Done():
		t.Fatal("Generate never waited on its context")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Generate = %v, want context.Canceled", err)
		}
	case <-testCtx.Done():
		t.Fatal("Generate ignored the cancelled context")
	}
}

func TestEndedContextFailsStream(t *testing.T) {
	t.Parallel()
	m := newModel(t, echo.Config{})
	ctx, cancel := context.WithCancel(testContext(t))
	cancel()
	sr, err := m.Stream(ctx, user("hi"))
	if !errors.Is(err, context.Canceled) || sr != nil {
		t.Fatalf("Stream with an ended context = %v, %v; want context.Canceled", sr, err)
	}
	if _, err := m.Generate(ctx, user("hi")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Generate with an ended context = %v, want context.Canceled", err)
	}
}

// TestClosingTheReaderEndsTheProducer is not parallel: it counts every
// stream goroutine in the process, and parallel tests wait until it is done.
func TestClosingTheReaderEndsTheProducer(t *testing.T) {
	tests := []struct {
		name    string
		delay   time.Duration
		receive int
	}{
		{"Closing an unread stream without pauses ends its goroutine.", 0, 0},
		{"Closing a half-read stream without pauses ends its goroutine.", 0, 10},
		{"Closing a stream with pauses ends its goroutine after the pause.", 50 * time.Millisecond, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			if n := waitProducers(ctx, 0); n != 0 {
				t.Fatalf("%d stream goroutines still running before the test", n)
			}
			m := newModel(t, echo.Config{Delay: tt.delay})
			sr, err := m.Stream(ctx, user("[[tokens:1000]]"))
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			closed := false
			defer func() {
				if !closed {
					sr.Close()
				}
			}()
			for i := range tt.receive {
				if _, err := sr.Recv(); err != nil {
					t.Fatalf("Recv %d: %v", i, err)
				}
			}
			// A goroutine shows in stack dumps only once it has run.
			if n := waitProducers(ctx, 1); n != 1 {
				t.Fatalf("%d stream goroutines running, want 1", n)
			}
			sr.Close()
			closed = true
			if n := waitProducers(ctx, 0); n != 0 {
				t.Fatalf("the stream goroutine outlived Close")
			}
		})
	}
}

func TestWithToolsReturnsACopy(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	m := newModel(t, echo.Config{})
	tools := []*schema.ToolInfo{{Name: "search", Desc: "searches"}}
	withTools, err := m.WithTools(tools)
	if err != nil {
		t.Fatalf("WithTools: %v", err)
	}
	if got, ok := withTools.(*echo.Model); !ok || got == m {
		t.Fatalf("WithTools returned %T %p, want a new *echo.Model (original %p)", withTools, withTools, m)
	}
	msg, err := withTools.Generate(ctx, user("use a tool"))
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if msg.Content != "echo #1: use a tool" || len(msg.ToolCalls) != 0 {
		t.Fatalf("Generate with tools = %q %v, want the echo and no tool call", msg.Content, msg.ToolCalls)
	}
}

func TestConcurrentStreamsShareAModel(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	m := newModel(t, echo.Config{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			sr, err := m.Stream(ctx, user(fmt.Sprintf("stream %d [[tokens:%d]]", i, 50+i)))
			if err != nil {
				errs <- err
				return
			}
			msg, err := schema.ConcatMessageStream(sr)
			if err != nil {
				errs <- err
				return
			}
			if got := len(strings.Fields(msg.Content)); got != 50+i {
				errs <- fmt.Errorf("stream %d: %d words, want %d", i, got, 50+i)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func BenchmarkStream1000Tokens(b *testing.B) {
	m, err := echo.New(echo.Config{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	input := user("[[tokens:1000]]")
	b.ReportAllocs()
	for b.Loop() {
		sr, err := m.Stream(ctx, input)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			_, err := sr.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					b.Fatal(err)
				}
				break
			}
			n++
		}
		sr.Close()
		if n != 1000 {
			b.Fatalf("%d chunks, want 1000", n)
		}
	}
}

func BenchmarkGenerate1000Tokens(b *testing.B) {
	m, err := echo.New(echo.Config{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	input := user("[[tokens:1000]]")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Generate(ctx, input); err != nil {
			b.Fatal(err)
		}
	}
}
