package client_test

import (
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

func meta(req, run string, seq int64) events.Meta {
	return events.Meta{Conversation: "c1", RequestID: req, RunID: run, Seq: seq, TS: 1}
}

func TestTranscriptDropsThePartialTextOfAnOlderRun(t *testing.T) {
	t.Parallel()
	var tr client.Transcript
	for _, e := range []events.Event{
		&events.RunStartedEvent{Meta: meta("r1", "run-a", 1)},
		&events.TokenEvent{Meta: meta("r1", "run-a", 2), Delta: "half of ", Role: "assistant"},
		&events.NoticeEvent{Meta: meta("r1", "run-a", 3), Message: "worker lost"},
		// The request was re-run after a worker failure: a new run id.
		&events.RunStartedEvent{Meta: meta("r1", "run-b", 1)},
		&events.TokenEvent{Meta: meta("r1", "run-b", 2), Delta: "the whole ", Role: "assistant"},
		&events.TokenEvent{Meta: meta("r2", "run-c", 2), Delta: "other", Role: "assistant"},
		&events.TokenEvent{Meta: meta("r1", "run-b", 3), Delta: "answer", Role: "assistant"},
		&events.RunCompletedEvent{Meta: meta("r1", "run-b", 4), Status: events.StatusComplete},
	} {
		tr.Apply(e)
	}
	runs := tr.Runs()
	if len(runs) != 2 {
		t.Fatalf("%d runs", len(runs))
	}
	r1 := runs[0]
	if r1.RequestID != "r1" || r1.RunID != "run-b" || r1.Text != "the whole answer" || r1.Status != events.StatusComplete || len(r1.Notices) != 0 {
		t.Fatalf("r1 = %+v", r1)
	}
	if runs[1].Text != "other" || runs[1].Status != "" {
		t.Fatalf("r2 = %+v", runs[1])
	}
}

func TestTranscriptFollowsTheLastRunOfARequest(t *testing.T) {
	t.Parallel()
	started := func(req, run string, seq int64) events.Event {
		return &events.RunStartedEvent{Meta: meta(req, run, seq)}
	}
	token := func(req, run string, seq int64, d string) events.Event {
		return &events.TokenEvent{Meta: meta(req, run, seq), Delta: d, Role: "assistant"}
	}
	done := func(req, run string, seq int64) events.Event {
		return &events.RunCompletedEvent{Meta: meta(req, run, seq), Status: events.StatusComplete}
	}
	tests := []struct {
		name                 string
		evs                  []events.Event
		run, text            string
		status               events.Status
		started, needHistory bool
	}{
		{"A late event of a superseded run is ignored.",
			[]events.Event{started("r1", "a", 1), token("r1", "a", 2, "old "), started("r1", "b", 1), token("r1", "a", 3, "late "), token("r1", "b", 2, "new"), done("r1", "b", 3)},
			"b", "new", events.StatusComplete, true, false},
		{"An event written twice is applied once.",
			[]events.Event{started("r1", "a", 1), token("r1", "a", 2, "w1 "), token("r1", "a", 2, "w1 "), token("r1", "a", 3, "w2"), done("r1", "a", 4)},
			"a", "w1 w2", events.StatusComplete, true, false},
		{"A redelivery's lone run.completed re-announces the request: read its answer from history.",
			[]events.Event{started("r1", "a", 1), token("r1", "a", 2, "w1"), done("r1", "a", 3), done("r1", "b", 1)},
			"b", "", events.StatusComplete, false, true},
		{"A subscription that joined mid-run reads the answer from history.",
			[]events.Event{token("r1", "a", 4, "end"), done("r1", "a", 5)},
			"a", "end", events.StatusComplete, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tr client.Transcript
			var r *client.RunState
			for _, e := range tt.evs {
				r = tr.Apply(e)
			}
			if r.RunID != tt.run || r.Text != tt.text || r.Status != tt.status || r.Started != tt.started || r.NeedsHistory != tt.needHistory {
				t.Fatalf("state %+v", r)
			}
		})
	}
}
