package turnpiketest_test

import (
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/turnpiketest"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// The helpers on the default agent (the echo model): a run followed from
// its first event, its text and status, and the persisted turn; two
// conversations of two users, each seeing only its own.
func TestStackSendFollowHistory(t *testing.T) {
	stack := turnpiketest.Start(t, worker.WithAgentFactory(newAgent))
	alice, bob := stack.Client("alice"), stack.Client("bob")
	fa, fb := alice.Follow("c"), bob.Follow("c")
	ra := fa.Run(alice.Send("c", "one two three"))
	rb := fb.Run(bob.Send("c", "four"))
	if ra.Status != events.StatusComplete || rb.Status != events.StatusComplete || ra.Text == rb.Text {
		t.Fatalf("runs %v and %v", ra, rb)
	}
	if first, last := ra.Events[0].Type(), ra.Events[len(ra.Events)-1].Type(); first != events.TypeRunStarted || last != events.TypeRunCompleted {
		t.Errorf("events from %s to %s", first, last)
	}
	ha, hb := alice.History("c"), bob.History("c")
	if len(ha) != 2 || ha[0].Content != "one two three" || ha[1].Content != ra.Text || len(hb) != 2 || hb[1].Content != rb.Text {
		t.Errorf("histories %+v and %+v", ha, hb)
	}
}
