package testenv

import (
	"fmt"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// OneRunAtATime checks that the stream events of one conversation, in
// stream order, show its runs strictly one after another: no event of
// another run between a request's run.started and its run.completed. A
// request completed without running (rejected, cancelled while queued, a
// duplicate) has only its run.completed, which may come at any time.
func OneRunAtATime(seen []events.Event) error {
	running := ""
	started := map[string]bool{}
	for _, e := range seen {
		h := e.Header()
		switch e.Type() {
		case events.TypeRunStarted:
			if running != "" {
				return fmt.Errorf("%s started while %s was running", h.RequestID, running)
			}
			running, started[h.RequestID] = h.RequestID, true
		case events.TypeRunCompleted:
			if running == h.RequestID {
				running = ""
			} else if started[h.RequestID] {
				return fmt.Errorf("%s completed while %s was running", h.RequestID, running)
			}
		default:
			if h.RequestID != running {
				return fmt.Errorf("%s event of %s while %s was running", e.Type(), h.RequestID, running)
			}
		}
	}
	return nil
}
