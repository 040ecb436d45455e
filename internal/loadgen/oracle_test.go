package loadgen

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// script is a hand-made conversation: what the sender does and what the
// reader receives, in order.
type step struct {
	begin    string       // begin a turn with this content
	accepted string       // the 202 of the last begun turn, with this request id
	event    events.Event // an event received
}

func send(content string) step     { return step{begin: content} }
func accept(requestID string) step { return step{accepted: requestID} }
func recv(e events.Event) step     { return step{event: e} }
func meta(req, run string, seq int64) events.Meta {
	return events.Meta{Conversation: "c1", RequestID: req, RunID: run, Seq: seq, TS: 1, Cursor: "0-" + strconv.FormatInt(seq, 10)}
}
func started(req, run string, seq int64) step {
	return recv(&events.RunStartedEvent{Meta: meta(req, run, seq)})
}
func token(req, run string, seq int64, delta string) step {
	return recv(&events.TokenEvent{Meta: meta(req, run, seq), Delta: delta, Agent: "assistant", Role: "assistant"})
}
func completed(req, run string, seq int64, status events.Status) step {
	return recv(&events.RunCompletedEvent{Meta: meta(req, run, seq), Status: status})
}

// run is the events of one clean run of "w1 w2 w3" from seq 1.
func cleanRun(req, run string) []step {
	return []step{started(req, run, 1), token(req, run, 2, "w1 "), token(req, run, 3, "w2 "), token(req, run, 4, "w3"),
		completed(req, run, 5, events.StatusComplete)}
}

func concat(parts ...[]step) []step { return slices.Concat(parts...) }

func TestConvCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		steps     []step
		want      map[string]int64 // violations by kind
		wantWords int
		wantDone  int
	}{
		{
			name:      "A clean conversation reports no violation, even when events beat the 202.",
			steps:     concat([]step{send("m1"), accept("r1")}, cleanRun("r1", "u1"), []step{send("m2")}, cleanRun("r2", "u2"), []step{accept("r2")}),
			wantWords: 6, wantDone: 2,
		},
		{
			name:      "A word split over two deltas counts once.",
			steps:     []step{send("m1"), accept("r1"), started("r1", "u1", 1), token("r1", "u1", 2, "w1 w"), token("r1", "u1", 3, "2 w3"), completed("r1", "u1", 4, events.StatusComplete)},
			wantWords: 3, wantDone: 1,
		},
		{
			name: "A re-run replaces the partial text and a straggler of the old run is dropped.",
			steps: concat([]step{send("m1"), accept("r1"), started("r1", "u1", 1), token("r1", "u1", 2, "w1 ")},
				[]step{started("r1", "u2", 1), token("r1", "u1", 3, "w2 ")}, cleanRun("r1", "u2")[1:]),
			wantWords: 4, wantDone: 1,
		},
		{
			name:      "A run completing with another status than complete is a status violation.",
			steps:     concat([]step{send("m1"), accept("r1")}, cleanRun("r1", "u1")[:4], []step{completed("r1", "u1", 5, events.StatusIncomplete)}),
			want:      map[string]int64{KindStatus: 1},
			wantWords: 3, wantDone: 1,
		},
		{
			name:      "A reply missing a token is a text violation.",
			steps:     []step{send("m1"), accept("r1"), started("r1", "u1", 1), token("r1", "u1", 2, "w1 "), token("r1", "u1", 3, "w3"), completed("r1", "u1", 4, events.StatusComplete)},
			want:      map[string]int64{KindText: 1},
			wantWords: 2, wantDone: 1,
		},
		{
			name:      "A gap in the seqs of a run is a seq violation.",
			steps:     []step{send("m1"), accept("r1"), started("r1", "u1", 1), token("r1", "u1", 2, "w1 "), token("r1", "u1", 4, "w2 "), token("r1", "u1", 5, "w3"), completed("r1", "u1", 6, events.StatusComplete)},
			want:      map[string]int64{KindSeq: 1},
			wantWords: 3, wantDone: 1,
		},
		{
			name:      "A duplicated event is a seq violation (and its text a text one).",
			steps:     []step{send("m1"), accept("r1"), started("r1", "u1", 1), token("r1", "u1", 2, "w1 "), token("r1", "u1", 2, "w1 "), token("r1", "u1", 3, "w2 "), token("r1", "u1", 4, "w3"), completed("r1", "u1", 5, events.StatusComplete)},
			want:      map[string]int64{KindSeq: 1, KindText: 1},
			wantWords: 4, wantDone: 1,
		},
		{
			name:      "A run that begins with a token is a run.started-first violation.",
			steps:     concat([]step{send("m1"), accept("r1")}, cleanRun("r1", "u1")[1:]),
			want:      map[string]int64{KindFirstEvent: 1, KindSeq: 0},
			wantWords: 3, wantDone: 1,
		},
		{
			name:      "A run.started with a seq other than 1 is a run.started-first violation.",
			steps:     []step{send("m1"), accept("r1"), started("r1", "u1", 2), token("r1", "u1", 3, "w1 w2 w3"), completed("r1", "u1", 4, events.StatusComplete)},
			want:      map[string]int64{KindFirstEvent: 1},
			wantWords: 3, wantDone: 1,
		},
		{
			name:      "An event of a request never sent in the conversation is foreign.",
			steps:     concat([]step{send("m1"), accept("r1"), token("r9", "u9", 2, "x ")}, cleanRun("r1", "u1")),
			want:      map[string]int64{KindForeignEvent: 1},
			wantWords: 3, wantDone: 1,
		},
		{
			name:      "An event after its run.completed is unexpected.",
			steps:     concat([]step{send("m1"), accept("r1")}, cleanRun("r1", "u1"), []step{completed("r1", "u1", 6, events.StatusComplete)}),
			want:      map[string]int64{KindUnexpectedEvent: 1},
			wantWords: 3, wantDone: 1,
		},
		{
			name:  "An event before any message was sent is unexpected.",
			steps: []step{started("r1", "u1", 1)},
			want:  map[string]int64{KindUnexpectedEvent: 1},
		},
		{
			name:      "An event of an earlier request while a later one runs is an order violation.",
			steps:     concat([]step{send("m1"), accept("r1")}, cleanRun("r1", "u1"), []step{send("m2"), accept("r2"), token("r1", "u1", 6, "w4")}, cleanRun("r2", "u2")),
			want:      map[string]int64{KindOrder: 1},
			wantWords: 6, wantDone: 2,
		},
		{
			name:      "A 202 whose request id differs from the one its events carry is a request_id violation.",
			steps:     concat([]step{send("m1")}, cleanRun("r1", "u1"), []step{accept("r7")}),
			want:      map[string]int64{KindRequestID: 1},
			wantWords: 3, wantDone: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var vs tally
			c := newConvCheck("c1", "w1 w2 w3", &vs)
			words, done, last := 0, 0, -1
			var v client.FrameView
			for _, s := range tc.steps {
				switch {
				case s.begin != "":
					last = c.begin(s.begin)
				case s.accepted != "":
					c.accepted(last, s.accepted)
				default:
					if err := v.Decode(events.AppendEvent(nil, s.event)); err != nil {
						t.Fatal(err)
					}
					words += c.event(&v)
				}
				select {
				case <-c.done:
					done++
				default:
				}
			}
			got := vs.snapshot()
			want := maps.Clone(tc.want)
			maps.DeleteFunc(want, func(_ string, n int64) bool { return n == 0 })
			if want == nil {
				want = map[string]int64{}
			}
			if !maps.Equal(got.ByKind, want) {
				var details []string
				for _, p := range got.First {
					details = append(details, p.Kind+": "+p.Detail)
				}
				t.Errorf("violations %v, want %v\n%s", got.ByKind, want, strings.Join(details, "\n"))
			}
			if words != tc.wantWords {
				t.Errorf("words %d, want %d", words, tc.wantWords)
			}
			if done != tc.wantDone {
				t.Errorf("completions signalled %d, want %d", done, tc.wantDone)
			}
		})
	}
}

func TestConvCheckRecordsRequestIDsAndReruns(t *testing.T) {
	t.Parallel()
	var vs tally
	c := newConvCheck("c1", "w1 w2 w3", &vs)
	var v client.FrameView
	i := c.begin("m1")
	for _, s := range concat([]step{started("r1", "u0", 1)}, cleanRun("r1", "u1")) {
		if err := v.Decode(events.AppendEvent(nil, s.event)); err != nil {
			t.Fatal(err)
		}
		c.event(&v)
	}
	c.accepted(i, "r1")
	turns := c.sent()
	if len(turns) != 1 || turns[0].requestID != "r1" || !turns[0].fromEvent || !turns[0].completed || turns[0].runs != 2 || turns[0].content != "m1" {
		t.Errorf("turns %+v", turns)
	}
	if vs.total() != 0 {
		t.Errorf("violations %+v", vs.snapshot())
	}
}

func TestFillerTextIsTheEchoModelsReply(t *testing.T) {
	t.Parallel()
	if got := fillerText(3); got != "w1 w2 w3" {
		t.Errorf("fillerText(3) = %q", got)
	}
	if got := fillerText(1); got != "w1" {
		t.Errorf("fillerText(1) = %q", got)
	}
}
