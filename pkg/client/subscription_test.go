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
