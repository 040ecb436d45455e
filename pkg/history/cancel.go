package history

import (
	"errors"
	"fmt"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Cancel is a durable cancellation of requests of one conversation,
// written by ingest before the cancel travels over the control topic, and
// checked by a worker before it starts a run, so a cancel wins even over a
// request re-delivered after a worker crash.
type Cancel struct {
	// Topic and Partition locate the conversation in the requests topic.
	Topic     string
	Partition int
	// RequestID cancels one request. When empty, the cancel covers every
	// request of the conversation whose record is below offset Before:
	// everything posted before the cancel, running or queued.
	RequestID string
	Before    int64
	// At is when the cancel was made.
	At time.Time
}

// Validate checks that c names what it cancels.
func (c Cancel) Validate() error {
	var errs []error
	if c.Topic == "" || c.Partition < 0 {
		errs = append(errs, fmt.Errorf("%w cancel: bad topic %q or partition %d", events.ErrInvalid, c.Topic, c.Partition))
	}
	if c.RequestID != "" {
		errs = append(errs, events.ValidateID("request_id", c.RequestID))
	} else if c.Before < 0 {
		errs = append(errs, fmt.Errorf("%w cancel: offset %d < 0", events.ErrInvalid, c.Before))
	}
	return errors.Join(errs...)
}

// MaxCancelledRequests bounds the request ids cancelled one by one that a
// conversation remembers (per partition); the oldest are forgotten first.
// MemoryStore keeps a request cancelled twice once; MongoStore appends each
// cancel (one update, no read), so a repeated cancel of one request takes
// a second place and forgets an older request's one sooner.
const MaxCancelledRequests = 256

// validateCancel checks RecordCancel's arguments.
func validateCancel(id events.Identity, c Cancel) error {
	if err := errors.Join(id.Validate(), c.Validate()); err != nil {
		return fmt.Errorf("record cancel: %w", err)
	}
	return nil
}

// cancelState is what a conversation's cancels amount to in one partition.
type cancelState struct {
	topic    string
	before   int64
	requests []string
}

func (st cancelState) covers(requestID string, src Source) bool {
	if st.topic != src.Topic {
		return false
	}
	if src.Offset < st.before {
		return true
	}
	for _, r := range st.requests {
		if r == requestID {
			return true
		}
	}
	return false
}

// apply folds c into st.
func (st cancelState) apply(c Cancel) cancelState {
	st.topic = c.Topic
	if c.RequestID == "" {
		st.before = max(st.before, c.Before)
		return st
	}
	for _, r := range st.requests {
		if r == c.RequestID {
			return st
		}
	}
	st.requests = append(st.requests, c.RequestID)
	if len(st.requests) > MaxCancelledRequests {
		st.requests = st.requests[len(st.requests)-MaxCancelledRequests:]
	}
	return st
}
