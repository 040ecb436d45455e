package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// The edges of what the decoders accept, each on both sides: the cases
// gremlins (.ci/gremlins) showed no other test held.

// Usage counts may be zero: a model that reports no prompt tokens (a cached
// prompt) or an empty answer is not an invalid event.
func TestUsageCountsOfZeroAreAccepted(t *testing.T) {
	t.Parallel()
	for _, counts := range []string{
		`"prompt_tokens":0,"completion_tokens":5,"total_tokens":5`,
		`"prompt_tokens":12,"completion_tokens":0,"total_tokens":12`,
		`"prompt_tokens":0,"completion_tokens":0,"total_tokens":0`,
	} {
		in := splice(usageJSON, `"prompt_tokens":12,"completion_tokens":5,"total_tokens":17`, counts)
		ev, err := events.DecodeEvent([]byte(in))
		if err != nil {
			t.Errorf("DecodeEvent(%s): %v", counts, err)
			continue
		}
		if u := ev.(*events.RunCompletedEvent).Usage; u == nil {
			t.Errorf("DecodeEvent(%s): no usage", counts)
		}
	}
}

// A control record of exactly MaxEventBytes is accepted; one byte more is
// too large.
func TestAControlRecordOfExactlyTheEventLimitIsAccepted(t *testing.T) {
	t.Parallel()
	rec := object(cancelRequestMembers)
	exact := rec + strings.Repeat(" ", events.MaxEventBytes-len(rec))
	if _, err := events.DecodeControl([]byte(exact)); err != nil {
		t.Fatalf("a control record of exactly %d bytes: %v", len(exact), err)
	}
	if _, err := events.DecodeControl([]byte(exact + " ")); !errors.Is(err, events.ErrTooLarge) {
		t.Fatalf("a control record of %d bytes: %v, want ErrTooLarge", len(exact)+1, err)
	}
}

// A value an error quotes is clipped after 32 bytes: one of exactly 32 is
// quoted whole.
func TestErrorsQuoteAValueClippedAfter32Bytes(t *testing.T) {
	t.Parallel()
	for _, n := range []int{32, 33} {
		s := events.Status(strings.Repeat("s", n))
		err := s.Validate()
		want := `"` + string(s[:min(n, 32)])
		if n > 32 {
			want += "…"
		}
		want += `"`
		if !errors.Is(err, events.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("a status of %d bytes: %v, want it quoted as %s", n, err, want)
		}
	}
}

// Surrogate escapes: every high-low pair is a character, the first and the
// last included; anything else is refused, named by its own escape.
func TestSurrogateEscapesArePairedExactly(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		content string // raw JSON string body
		want    string // decoded content, or "" when refused
		refusal string
	}{
		{`\ud800\udc00`, "\U00010000", ""},
		{`\udbff\udfff`, "\U0010ffff", ""},
		{`\ud83d\ude00`, "😀", ""},
		{`a\udc00\udc00`, "", `unpaired surrogate \udc00`},
		{`\udbff\ue000`, "", `unpaired surrogate \udbff`},
		{`\ud800\udbff`, "", `unpaired surrogate \ud800`},
	} {
		r, err := events.DecodeRequest([]byte(record(map[string]string{"content": `"` + tt.content + `"`})), 0)
		switch {
		case tt.want != "" && (err != nil || r.Content != tt.want):
			t.Errorf("content %s: %q, %v; want %q", tt.content, r.Content, err, tt.want)
		case tt.want == "" && (!errors.Is(err, events.ErrInvalid) || !strings.HasSuffix(err.Error(), tt.refusal)):
			t.Errorf("content %s: %v; want it refused ending with %s", tt.content, err, tt.refusal)
		}
	}
}
