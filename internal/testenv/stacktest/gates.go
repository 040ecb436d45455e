package stacktest

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/cloudwego/eino/adk"

	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// Gates lets a test hold the echo model's answers mid-stream, so that what
// it does while an answer runs (a cancel, a reject, a dropped connection,
// a stopped gateway) lands while it runs, however slow the machine: the
// answer goes on only when the test says so, or ends when its run is
// cancelled. It is the clock of the answer, in the test's hands; neither
// the echo model's delay nor how the bridge coalesces tokens decides.
//
// A stack started with the option Agent runs the agent the worker builds
// without an agent file (Config.AgentName and Instruction, no tools) as a
// Go agent on an echo model whose pauses go through the gates. Only an
// answer that pauses ([[delay:D]] or Config.EchoDelay) passes a gate: each
// pause before a token passes it once.
type Gates struct {
	mu    sync.Mutex
	gates map[string]*Gate // by conversation
}

// NewGates returns gates that hold nothing yet.
func NewGates() *Gates { return &Gates{gates: map[string]*Gate{}} }

// Hold gates the answers of conversation: the next after tokens pass, then
// the answer waits for Allow or Release (or the end of its run). It
// replaces the conversation's gate, if any.
func (g *Gates) Hold(conversation string, after int) *Gate {
	gate := &Gate{free: after, change: make(chan struct{}), held: make(chan struct{})}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gates[conversation] = gate
	return gate
}

// Agent returns the worker option that runs c's agent on the echo model
// (c.EchoDelay), its pauses through g.
func (g *Gates) Agent(c worker.Config) worker.Option { return gatedAgent(c, g.sleep) }

// gatedAgent is the worker option that runs c's agent on the echo model
// (c.EchoDelay), pausing with sleep.
func gatedAgent(c worker.Config, sleep func(context.Context, time.Duration) error) worker.Option {
	m, err := echo.New(echo.Config{Delay: c.EchoDelay, Sleep: sleep})
	return worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		if err != nil {
			return nil, worker.Permanent(err)
		}
		return adk.NewChatModelAgent(ctx, worker.Durable(&adk.ChatModelAgentConfig{
			Name:        cmp.Or(c.AgentName, "assistant"),
			Description: "Turnpike conversation agent",
			Instruction: c.Instruction,
			Model:       m,
		}))
	})
}

// sleep is the echo model's Config.Sleep: the gate of the run's
// conversation, if any, then the pause itself.
func (g *Gates) sleep(ctx context.Context, d time.Duration) error {
	r, _ := worker.RequestFromContext(ctx)
	return g.pause(ctx, r.Conversation, d)
}

// pause is one pause of d of conversation's answer.
func (g *Gates) pause(ctx context.Context, conversation string, d time.Duration) error {
	if err := g.pass(ctx, conversation); err != nil {
		return err
	}
	return sleep(ctx, d)
}

// pass returns when a token of conversation's answer may pass its gate (at
// once without a gate), or ctx.Err() when ctx ends first.
func (g *Gates) pass(ctx context.Context, conversation string) error {
	_, err := g.take(ctx, conversation)
	return err
}

// take is pass, and returns the gate that let the token pass (nil: none),
// to which the pass goes back if the token does not take it after all
// (Gate.Allow(1)).
func (g *Gates) take(ctx context.Context, conversation string) (*Gate, error) {
	g.mu.Lock()
	gate := g.gates[conversation]
	g.mu.Unlock()
	if gate == nil {
		return nil, nil
	}
	return gate, gate.pass(ctx)
}

// sleep waits d, or returns ctx.Err() when ctx ends first.
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

// Gate holds one conversation's answers (Gates.Hold).
type Gate struct {
	mu     sync.Mutex
	free   int  // tokens that pass before the gate holds
	open   bool // Release: everything passes
	change chan struct{}
	held   chan struct{} // closed when a pause waits; renewed by Allow
	isHeld bool          // held is closed
}

// Held is closed once a pause waits at the gate (after the last Allow):
// the answer is held.
func (g *Gate) Held() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

// Allow lets n more tokens pass, then holds again.
func (g *Gate) Allow(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.free += n
	if g.isHeld {
		g.held, g.isHeld = make(chan struct{}), false
	}
	g.changed()
}

// Release lets everything pass from now on.
func (g *Gate) Release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = true
	g.changed()
}

// changed wakes the pauses waiting; g.mu is held.
func (g *Gate) changed() {
	close(g.change)
	g.change = make(chan struct{})
}

// pass returns when a token may pass the gate, or ctx.Err() when ctx ends
// first. A pause whose ctx has ended takes no pass, even one free.
func (g *Gate) pass(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		g.mu.Lock()
		if g.open || g.free > 0 {
			if !g.open {
				g.free--
			}
			g.mu.Unlock()
			return nil
		}
		if !g.isHeld {
			close(g.held)
			g.isHeld = true
		}
		ch := g.change
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
