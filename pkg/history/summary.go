package history

import (
	"errors"
	"fmt"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Summary is a model-written condensation of a conversation's oldest
// messages (context compaction). The messages themselves stay stored;
// the summary only replaces them in the model's window.
type Summary struct {
	// Through is the seq of the last message the summary covers: it
	// condenses messages 1..Through. It ends a turn (the turn's last
	// assistant message), so it is at least 2.
	Through int64
	// Text is the summary.
	Text string
	// CreatedAt is when it was written.
	CreatedAt time.Time
}

// MaxSummaryBytes bounds a summary's text.
const MaxSummaryBytes = 256 << 10

// MaxCheckpointBytes bounds an agent checkpoint (a MongoDB document holds
// at most 16 MiB).
const MaxCheckpointBytes = 15 << 20

func validateSummary(id events.Identity, s Summary) error {
	errs := []error{id.Validate()}
	if s.Through < 2 {
		errs = append(errs, fmt.Errorf("%w summary: through %d: want the seq of a turn's last assistant message (>= 2)", events.ErrInvalid, s.Through))
	}
	if s.Text == "" || len(s.Text) > MaxSummaryBytes {
		errs = append(errs, fmt.Errorf("%w summary: %d bytes, want 1..%d", events.ErrInvalid, len(s.Text), MaxSummaryBytes))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("save summary: %w", err)
	}
	return nil
}

func validateCheckpoint(id events.Identity, name string, data []byte) error {
	errs := []error{id.Validate(), events.ValidateID("checkpoint", name)}
	if len(data) > MaxCheckpointBytes {
		errs = append(errs, fmt.Errorf("%w checkpoint: %d bytes, at most %d", events.ErrInvalid, len(data), MaxCheckpointBytes))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}
