package bridge_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// step is one scripted agent event.
type step struct {
	agent   string
	role    schema.RoleType
	chunks  []*schema.Message // streamed when set
	whole   *schema.Message   // a non-streaming message
	recvErr error             // returned by Recv after the chunks
	err     error             // an event-level error
	action  *adk.AgentAction
	hold    <-chan struct{} // the stream waits for this before its chunks
	// afterFirst, if set, holds the stream after its first chunk until
	// it is closed (or the context ends).
	afterFirst <-chan struct{}
}

func text(s string) *schema.Message { return schema.AssistantMessage(s, nil) }

func toolCall() *schema.Message {
	return schema.AssistantMessage("", []schema.ToolCall{{ID: "call-1", Function: schema.FunctionCall{Name: "clock", Arguments: "{}"}}})
}

func finish(s, reason string) *schema.Message {
	m := schema.AssistantMessage(s, nil)
	m.ResponseMeta = &schema.ResponseMeta{FinishReason: reason, Usage: &schema.TokenUsage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5}}
	return m
}

// script plays steps as an agent would, from its own goroutine, and closes
// the iterator at the end. done is closed when the script goroutine exits.
func script(ctx context.Context, steps ...step) (*adk.AsyncIterator[*adk.AgentEvent], <-chan struct{}) {
	iter, gen := adk.NewAsyncIteratorPair[*adk.AgentEvent]()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer gen.Close()
		for _, s := range steps {
			ev := &adk.AgentEvent{AgentName: s.agent, Err: s.err, Action: s.action}
			role := s.role
			if role == "" {
				role = schema.Assistant
			}
			switch {
			case s.whole != nil:
				ev.Output = &adk.AgentOutput{MessageOutput: &adk.MessageVariant{Message: s.whole, Role: role}}
			case s.chunks != nil || s.recvErr != nil:
				sr, sw := schema.Pipe[*schema.Message](1)
				ev.Output = &adk.AgentOutput{MessageOutput: &adk.MessageVariant{IsStreaming: true, MessageStream: sr, Role: role}}
				gen.Send(ev)
				if s.hold != nil {
					select {
					case <-s.hold:
					case <-ctx.Done():
					}
				}
				for i, c := range s.chunks {
					if i == 1 && s.afterFirst != nil {
						select {
						case <-s.afterFirst:
						case <-ctx.Done():
						}
					}
					if ctx.Err() != nil {
						sw.Send(nil, ctx.Err())
						break
					}
					if closed := sw.Send(c, nil); closed {
						break
					}
				}
				if s.recvErr != nil {
					sw.Send(nil, s.recvErr)
				}
				sw.Close()
				continue
			}
			gen.Send(ev)
		}
	}()
	return iter, done
}

// recordingSink keeps every event. Like a Kafka producer, it refuses an
// event once the context it is given has ended. failAfter > 0 makes the
// n-th Emit and every later one fail; block, if set, holds every Emit until
// closed; onEmit, if set, sees every event kept, after it is kept, from the
// emitting goroutine.
type recordingSink struct {
	mu        sync.Mutex
	events    []events.Event
	keys      []events.Identity
	failAfter int
	block     chan struct{}
	onEmit    func(events.Event)
	grew      chan struct{} // closed and replaced whenever an event is kept
}

var errSink = errors.New("sink down")

func (s *recordingSink) Emit(ctx context.Context, id events.Identity, e events.Event) error {
	if s.block != nil {
		<-s.block
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.failAfter > 0 && len(s.events)+1 >= s.failAfter {
		s.mu.Unlock()
		return errSink
	}
	s.events = append(s.events, e)
	s.keys = append(s.keys, id)
	if s.grew != nil {
		close(s.grew)
		s.grew = nil
	}
	s.mu.Unlock()
	if s.onEmit != nil {
		s.onEmit(e)
	}
	return nil
}

// waitEvents waits until the sink has kept at least n events.
func (s *recordingSink) waitEvents(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	for {
		s.mu.Lock()
		if len(s.events) >= n {
			s.mu.Unlock()
			return
		}
		if s.grew == nil {
			s.grew = make(chan struct{})
		}
		grew := s.grew
		s.mu.Unlock()
		select {
		case <-grew:
		case <-ctx.Done():
			t.Fatalf("waiting for %d events: %v", n, ctx.Err())
		}
	}
}

func (s *recordingSink) snapshot() []events.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]events.Event(nil), s.events...)
}

// fakeTurn records what the bridge did with the pending turn. Like a
// store, it refuses a commit once the context it is given has ended.
type fakeTurn struct {
	mu        sync.Mutex
	committed []string
	statuses  []events.Status
	agents    []string
	discarded int
	err       error
}

func (t *fakeTurn) Commit(ctx context.Context, answer, agent string, status events.Status, _ time.Time) (history.Committed, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return history.Committed{}, t.err
	}
	if err := ctx.Err(); err != nil {
		return history.Committed{}, err
	}
	t.committed = append(t.committed, answer)
	t.statuses = append(t.statuses, status)
	t.agents = append(t.agents, agent)
	return history.Committed{N: int64(len(t.committed)), Status: status}, nil
}

func (t *fakeTurn) Discard() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.discarded++
}
