package bridge_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Config.Now is the clock of every event's ts and of the committed turn.
func TestEventsAndTheTurnUseTheConfiguredClock(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	at := time.Date(2024, 5, 6, 7, 8, 9, 10, time.UTC)
	sink := &recordingSink{}
	turn := &answerTurn{}
	iter, done := script(ctx, step{agent: "a", chunks: []*schema.Message{text("hi")}})
	b := newBridge(t, sink, func(c *bridge.Config) { c.Now = func() time.Time { return at } })
	if _, err := b.Run(ctx, bridge.Run{Identity: testID, RequestID: "req-1", RunID: "run-1", Turn: turn}, iter); err != nil {
		t.Fatal(err)
	}
	<-done
	evs := sink.snapshot()
	if len(evs) != 3 {
		t.Fatalf("%d events, want run.started, a token and run.completed", len(evs))
	}
	for _, e := range evs {
		if ts := e.Header().TS; ts != at.UnixNano() {
			t.Fatalf("%s has ts %d, want %d from Config.Now", e.Type(), ts, at.UnixNano())
		}
	}
	if len(turn.answers) != 1 || !turn.answers[0].At.Equal(at) {
		t.Fatalf("committed %+v, want it at %v from Config.Now", turn.answers, at)
	}
}

// NewEmitter's now may be nil: the events are then stamped with time.Now.
func TestAnEmitterWithoutAClockStampsEventsWithTheTimeNow(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	sink := &recordingSink{}
	e := bridge.NewEmitter(sink, testID, "req-1", "run-1", nil)
	if err := e.Completed(ctx, events.StatusRejected); err != nil {
		t.Fatal(err)
	}
	evs := sink.snapshot()
	if len(evs) != 1 || e.Seq() != 1 {
		t.Fatalf("%d events, seq %d; want one, seq 1", len(evs), e.Seq())
	}
	if ts := evs[0].Header().TS; ts <= 0 {
		t.Fatalf("ts %d, want a time", ts)
	}
}

// Texts the wire bounds (a notice's message, an interrupt's question,
// agent and tool, a transfer's agents) are kept whole up to their limit and
// cut at a rune boundary beyond it, so every event survives DecodeEvent.
func TestEmittedTextsAreKeptUpToTheirLimitAndCutAtARuneBoundaryBeyond(t *testing.T) {
	t.Parallel()
	// fill returns n bytes: a's, then a 3-byte rune straddling byte n when
	// over is set (n+2 bytes in all).
	fill := func(n int, over bool) string {
		if !over {
			return strings.Repeat("a", n)
		}
		return strings.Repeat("a", n-1) + "€"
	}
	type emitted struct{ notice, question, agent, tool, from, to string }
	tests := []struct {
		name string
		over bool
	}{
		{name: "Texts exactly at their limit are emitted whole."},
		{name: "Texts past their limit are cut before the rune that crosses it.", over: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			sink := &recordingSink{}
			e := bridge.NewEmitter(sink, testID, "req-1", "run-1", nil)
			in := emitted{
				notice:   fill(events.MaxNoticeBytes, tt.over),
				question: fill(events.MaxQuestionBytes, tt.over),
				agent:    fill(events.MaxAgentBytes, tt.over),
				tool:     fill(events.MaxAgentBytes, tt.over),
				from:     fill(events.MaxAgentBytes, tt.over),
				to:       fill(events.MaxAgentBytes, tt.over),
			}
			if err := e.Notice(ctx, in.notice); err != nil {
				t.Fatal(err)
			}
			if err := e.Interrupted(ctx, events.Interrupt{Agent: in.agent, Tool: in.tool, Question: in.question}); err != nil {
				t.Fatal(err)
			}
			if err := e.Transfer(ctx, in.from, in.to); err != nil {
				t.Fatal(err)
			}
			var got emitted
			for _, ev := range sink.snapshot() {
				if _, err := events.DecodeEvent(events.MarshalEvent(ev)); err != nil {
					t.Fatalf("%s does not survive the wire: %v", ev.Type(), err)
				}
				switch ev := ev.(type) {
				case *events.NoticeEvent:
					got.notice = ev.Message
				case *events.RunInterruptedEvent:
					got.question, got.agent, got.tool = ev.Interrupt.Question, ev.Interrupt.Agent, ev.Interrupt.Tool
				case *events.AgentTransferEvent:
					got.from, got.to = ev.From, ev.To
				}
			}
			want := in
			if tt.over {
				want = emitted{
					notice:   fill(events.MaxNoticeBytes-1, false),
					question: fill(events.MaxQuestionBytes-1, false),
					agent:    fill(events.MaxAgentBytes-1, false),
					tool:     fill(events.MaxAgentBytes-1, false),
					from:     fill(events.MaxAgentBytes-1, false),
					to:       fill(events.MaxAgentBytes-1, false),
				}
			}
			if got != want {
				t.Fatalf("emitted lengths notice %d question %d agent %d tool %d from %d to %d, want %d %d %d %d %d %d",
					len(got.notice), len(got.question), len(got.agent), len(got.tool), len(got.from), len(got.to),
					len(want.notice), len(want.question), len(want.agent), len(want.tool), len(want.from), len(want.to))
			}
		})
	}
}

// A text over its limit with no rune start to cut at (stray continuation
// bytes, as an error message or an interrupt's info may carry) is cut to
// nothing rather than past its start.
func TestEmittedTextsOfStrayContinuationBytesOverTheirLimitAreCutToNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	sink := &recordingSink{}
	e := bridge.NewEmitter(sink, testID, "req-1", "run-1", nil)
	stray := func(n int) string { return strings.Repeat("\x80", n+1) }
	if err := e.Notice(ctx, stray(events.MaxNoticeBytes)); err != nil {
		t.Fatal(err)
	}
	if err := e.Interrupted(ctx, events.Interrupt{Agent: stray(events.MaxAgentBytes), Question: stray(events.MaxQuestionBytes)}); err != nil {
		t.Fatal(err)
	}
	evs := sink.snapshot()
	if len(evs) != 2 {
		t.Fatalf("%d events, want a notice and run.interrupted", len(evs))
	}
	if n, in := evs[0].(*events.NoticeEvent), evs[1].(*events.RunInterruptedEvent); n.Message != "" || in.Interrupt.Question != "" || in.Interrupt.Agent != "" {
		t.Fatalf("notice of %d bytes, question of %d, agent of %d; want all cut to nothing", len(n.Message), len(in.Interrupt.Question), len(in.Interrupt.Agent))
	}
}

// keys returns n distinct keys of size bytes each, prefixed by p.
func keys(p string, n, size int) []string {
	out := make([]string, n)
	for i := range out {
		k := fmt.Sprintf("%s%d-", p, i)
		out[i] = k + strings.Repeat("k", size-len(k))
	}
	return out
}

func TestStateChangedListsTheKeysWithinTheEventsBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		conv, user    []string
		wantConv      []string
		wantUser      []string
		wantTruncated bool
	}{
		{name: "Keys within the bounds are all listed, in order.", conv: []string{"a", "b"}, user: []string{"lang"},
			wantConv: []string{"a", "b"}, wantUser: []string{"lang"}},
		{name: "The most keys a run can change in each scope (128 of 64 bytes) are all listed.", conv: keys("c", 128, 64), user: keys("u", 128, 64),
			wantConv: keys("c", 128, 64), wantUser: keys("u", 128, 64)},
		{name: "Keys past 16 KiB in all are left out and the event says truncated.", conv: keys("c", 128, 128), user: keys("u", 128, 128),
			wantConv: keys("c", 128, 128), wantTruncated: true},
		{name: "More than 128 keys of a scope are cut at 128 and the event says truncated.", conv: keys("c", 130, 8),
			wantConv: keys("c", 128, 8), wantTruncated: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sink := &recordingSink{}
			e := bridge.NewEmitter(sink, testID, "req-1", "run-1", nil)
			if err := e.StateChanged(testCtx(t), tt.conv, tt.user); err != nil {
				t.Fatal(err)
			}
			ev := sink.snapshot()[0].(*events.StateChangedEvent)
			if !slices.Equal(ev.Conversation, tt.wantConv) || !slices.Equal(ev.User, tt.wantUser) || ev.Truncated != tt.wantTruncated {
				t.Fatalf("listed %d conversation and %d user keys, truncated %v; want %d, %d, %v",
					len(ev.Conversation), len(ev.User), ev.Truncated, len(tt.wantConv), len(tt.wantUser), tt.wantTruncated)
			}
			// What the emitter writes, a client decodes.
			if _, err := events.DecodeEvent(events.MarshalEvent(ev)); err != nil {
				t.Fatalf("DecodeEvent of the emitted event: %v", err)
			}
		})
	}
}
