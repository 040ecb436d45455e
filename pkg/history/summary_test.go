package history

import (
	"errors"
	"strings"
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// A summary of exactly MaxSummaryBytes and a checkpoint of exactly
// MaxCheckpointBytes are accepted, one byte more is not. (Checked on the
// validation itself: a 15 MiB checkpoint through the embedded store would
// cost the suite seconds for one comparison.)
func TestTheSummaryAndCheckpointLimitsIncludeTheirBound(t *testing.T) {
	t.Parallel()
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "c1"}
	for _, tc := range []struct {
		n    int
		want bool
	}{{MaxSummaryBytes, true}, {MaxSummaryBytes + 1, false}} {
		err := validateSummary(id, Summary{Through: 4, Text: strings.Repeat("s", tc.n)})
		if (err == nil) != tc.want || (err != nil && !errors.Is(err, events.ErrInvalid)) {
			t.Errorf("a summary of %d bytes: %v; want accepted %v", tc.n, err, tc.want)
		}
	}
	for _, tc := range []struct {
		n    int
		want bool
	}{{MaxCheckpointBytes, true}, {MaxCheckpointBytes + 1, false}} {
		err := validateCheckpoint(id, "r1", make([]byte, tc.n))
		if (err == nil) != tc.want || (err != nil && !errors.Is(err, events.ErrInvalid)) {
			t.Errorf("a checkpoint of %d bytes: %v; want accepted %v", tc.n, err, tc.want)
		}
	}
}
