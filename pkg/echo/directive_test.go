package echo

import (
	"errors"
	"strings"
	"testing"
)

func FuzzParseDirectives(f *testing.F) {
	for _, seed := range []string{
		"", "hello", "hi [[delay:1ms]] there", "[[tokens:3]]", "[[empty]]", "[[fail-after:2]]",
		"[[tokens:-1]]", "[[[empty]]]", "[[tokens:[[empty]]", "[[delay:1h]]", "[[emptyish]]",
		"[[", "]]", "[[]]", "[[empty]", "[[fail-after:1]][[fail-after:1]]", "a\x00[[empty]]\xff",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		text, d, err := parseDirectives(s)
		if err != nil {
			if !errors.Is(err, ErrBadDirective) {
				t.Fatalf("parseDirectives(%q) error %v is not ErrBadDirective", s, err)
			}
			return
		}
		if !strings.Contains(s, "[[") && text != s {
			t.Fatalf("parseDirectives(%q) changed text without directives to %q", s, text)
		}
		if len(text) > len(s) {
			t.Fatalf("parseDirectives(%q) grew the text to %q", s, text)
		}
		if d.failAfter > MaxTokens || d.tokens > MaxTokens || d.delay < 0 || d.delay > MaxDelay {
			t.Fatalf("parseDirectives(%q) accepted out-of-range values %+v", s, d)
		}
		if d.empty && d.tokens >= 0 {
			t.Fatalf("parseDirectives(%q) accepted both empty and tokens", s)
		}
		// Every byte kept is in order from s: removing directives only deletes.
		rest := s
		for i := 0; i < len(text); i++ {
			j := strings.IndexByte(rest, text[i])
			if j < 0 {
				t.Fatalf("parseDirectives(%q) = %q, which is not a subsequence of the input", s, text)
			}
			rest = rest[j+1:]
		}
	})
}

func TestParseDirectivesKeepsLongBracketRuns(t *testing.T) {
	t.Parallel()
	// Long runs of brackets that never form a directive are kept verbatim
	// (the scan looks for a name only a few bytes past each "[[").
	for _, s := range []string{
		strings.Repeat("[[", 1<<15) + "]]",
		strings.Repeat("[[tokens:", 1<<13),
		strings.Repeat("[[x]]", 1<<14),
	} {
		text, _, err := parseDirectives(s)
		if err != nil || text != s {
			t.Fatalf("parseDirectives(%.20q…) = %.20q…, %v; want it unchanged", s, text, err)
		}
	}
}
