package loadgen

import (
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// turn is one user message of a conversation and what came back for it.
type turn struct {
	content   string
	requestID string // from its events or from the 202, whichever came first
	fromEvent bool   // requestID was learned from an event before the 202
	completed bool
	status    string
	runs      int // run ids seen (more than one: the request was re-run)
}

// convCheck is the oracle of one conversation, a closed loop of turns: it
// is told what is sent (begin, accepted) and checks every event received
// for the conversation against docs/api.md. It is safe for concurrent use: the
// conversation's sender and its connection's reader both call it.
type convCheck struct {
	name       string
	wantText   string // the reply every turn must stream
	violations *tally
	// done receives a value when the current turn's run.completed arrives.
	done chan struct{}

	mu sync.Mutex
	// Guarded by mu.
	turns  []turn
	runID  string   // current run of the last turn; "" before its run.started
	oldRun []string // earlier run ids of the last turn
	seq    int64    // last seq of the current run
	text   []byte   // streamed text of the current run
	inWord bool     // text ends inside a word
}

func newConvCheck(name, wantText string, violations *tally) *convCheck {
	return &convCheck{name: name, wantText: wantText, violations: violations, done: make(chan struct{}, 1)}
}

func (c *convCheck) violation(kind, format string, args ...any) {
	c.violations.add(kind, c.name, fmt.Sprintf(format, args...))
}

// begin records that the next user message, content, is about to be sent;
// it returns the turn's index.
func (c *convCheck) begin(content string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.turns = append(c.turns, turn{content: content})
	c.runID, c.oldRun, c.seq, c.text, c.inWord = "", c.oldRun[:0], 0, c.text[:0], false
	select { // a stale signal must not end the new turn
	case <-c.done:
	default:
	}
	return len(c.turns) - 1
}

// accepted records the request id the 202 gave for turn i.
func (c *convCheck) accepted(i int, requestID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &c.turns[i]
	switch {
	case t.requestID == "":
		t.requestID = requestID
	case t.requestID != requestID:
		c.violation(KindRequestID, "message %d: POST answered request_id %s, its events carry %s", i+1, requestID, t.requestID)
	}
}

// event checks one stream event of this conversation and returns the words
// its delta adds to the streamed text.
func (c *convCheck) event(v *client.FrameView) (words int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.turns) == 0 {
		c.violation(KindUnexpectedEvent, "%s seq %d of request %s before any message was sent", v.Type, v.Seq, v.RequestID)
		return 0
	}
	i := len(c.turns) - 1
	t := &c.turns[i]
	if t.requestID == "" && !t.completed {
		// The POST is still in flight: its request's events may come first.
		t.requestID, t.fromEvent = string(v.RequestID), true
	}
	if string(v.RequestID) != t.requestID {
		if j := slices.IndexFunc(c.turns[:i], func(t turn) bool { return t.requestID == string(v.RequestID) }); j >= 0 {
			c.violation(KindOrder, "%s seq %d of message %d (request %s) while message %d is in flight", v.Type, v.Seq, j+1, v.RequestID, i+1)
		} else {
			c.violation(KindForeignEvent, "%s seq %d of request %s, never sent in this conversation", v.Type, v.Seq, v.RequestID)
		}
		return 0
	}
	if t.completed {
		c.violation(KindUnexpectedEvent, "%s seq %d of message %d after its run.completed", v.Type, v.Seq, i+1)
		return 0
	}
	switch {
	case string(v.RunID) == c.runID:
		if v.Seq != c.seq+1 {
			c.violation(KindSeq, "message %d run %s: %s seq %d after seq %d", i+1, v.RunID, v.Type, v.Seq, c.seq)
		}
	case slices.Contains(c.oldRun, string(v.RunID)):
		return 0 // a straggler of a replaced run: clients drop it
	default:
		// A new run: the first or a re-run after a worker failure, whose
		// partial text replaces the old one's.
		if c.runID != "" {
			c.oldRun = append(c.oldRun, c.runID)
		}
		c.runID, c.text, c.inWord = string(v.RunID), c.text[:0], false
		t.runs++
		if v.Type != string(events.TypeRunStarted) || v.Seq != 1 {
			c.violation(KindFirstEvent, "message %d run %s begins with %s seq %d", i+1, v.RunID, v.Type, v.Seq)
		}
	}
	c.seq = v.Seq
	switch v.Type {
	case string(events.TypeToken):
		words = c.appendText(v.Delta)
	case string(events.TypeRunCompleted):
		t.completed, t.status = true, string(v.Status)
		if t.status != string(events.StatusComplete) {
			c.violation(KindStatus, "message %d completed %q", i+1, v.Status)
		}
		if string(c.text) != c.wantText {
			c.violation(KindText, "message %d streamed %s", i+1, describeDiff(string(c.text), c.wantText))
		}
		select {
		case c.done <- struct{}{}:
		default: // cannot happen: one completion per turn, begin drains
		}
	}
	return words
}

// appendText adds delta to the run's text and returns how many words start
// in it; a word split over two deltas counts once.
func (c *convCheck) appendText(delta []byte) int {
	c.text = append(c.text, delta...)
	n := 0
	for _, b := range delta {
		space := b == ' ' || b == '\n' || b == '\t' || b == '\r'
		if !space && !c.inWord {
			n++
		}
		c.inWord = !space
	}
	return n
}

// sent returns a copy of the turns so far.
func (c *convCheck) sent() []turn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.turns)
}

// describeDiff says where got first differs from want, briefly.
func describeDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	clip := func(s string) string {
		s = s[i:]
		if len(s) > 24 {
			s = s[:24] + "…"
		}
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%d bytes, want %d: first difference at byte %d: got %s, want %s", len(got), len(want), i, clip(got), clip(want))
}

// fillerText is the reply of the echo model to [[tokens:n]]: "w1 w2 … wn".
func fillerText(n int) string {
	b := make([]byte, 0, n*5)
	for i := 1; i <= n; i++ {
		if i > 1 {
			b = append(b, ' ')
		}
		b = append(b, 'w')
		b = strconv.AppendInt(b, int64(i), 10)
	}
	return string(b)
}
