package worker

import (
	"sync"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// activeRuns indexes the runs in progress by conversation, so a cancel from
// the control topic or an interrupting request can reach them.
type activeRuns struct {
	mu   sync.Mutex // guards runs and every activeRun's handle and cancelled
	runs map[string]*activeRun
}

// activeRun is one request being run. It is registered before the run
// checks for a durable cancel, so a cancel that arrives at any point
// reaches it: before the bridge starts, it is remembered; after, the
// bridge's handle is cancelled.
type activeRun struct {
	requestID string
	src       history.Source
	origin    *history.Source // where src's record was first written, if it was moved home
	owner     *activeRuns

	handle    *bridge.Handle
	cancelled bool
}

func newActiveRuns() *activeRuns { return &activeRuns{runs: make(map[string]*activeRun)} }

// register records the run of requestID for conversation key, from the
// record at src (first written at origin when it was moved home, else nil).
func (a *activeRuns) register(key, requestID string, src history.Source, origin *history.Source) *activeRun {
	r := &activeRun{requestID: requestID, src: src, origin: origin, owner: a}
	a.mu.Lock()
	a.runs[key] = r
	a.mu.Unlock()
	return r
}

// unregister forgets r, if it is still key's run.
func (a *activeRuns) unregister(key string, r *activeRun) {
	a.mu.Lock()
	if a.runs[key] == r {
		delete(a.runs, key)
	}
	a.mu.Unlock()
}

// get returns key's run, or nil.
func (a *activeRuns) get(key string) *activeRun {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runs[key]
}

// cancel cancels key's run if match says so.
func (a *activeRuns) cancel(key string, match func(*activeRun) bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.runs[key]
	if r == nil || !match(r) {
		return false
	}
	return r.cancelLocked()
}

// cancel cancels r: its bridge at once if it started, else as it starts.
// It reports whether r was not cancelled before.
func (r *activeRun) cancel() bool {
	r.owner.mu.Lock()
	defer r.owner.mu.Unlock()
	return r.cancelLocked()
}

func (r *activeRun) cancelLocked() bool {
	if r.cancelled {
		return false
	}
	r.cancelled = true
	if r.handle != nil {
		r.handle.Cancel() // returns at once
	}
	return true
}

// started attaches the bridge's handle, cancelling it at once if a cancel
// came first.
func (r *activeRun) started(h *bridge.Handle) {
	r.owner.mu.Lock()
	defer r.owner.mu.Unlock()
	r.handle = h
	if r.cancelled {
		h.Cancel()
	}
}

func (r *activeRun) isCancelled() bool {
	r.owner.mu.Lock()
	defer r.owner.mu.Unlock()
	return r.cancelled
}
