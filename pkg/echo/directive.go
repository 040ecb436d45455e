package echo

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Limits on directive values (and on Config.Delay).
const (
	// MaxTokens bounds [[tokens:N]] and [[fail-after:N]].
	MaxTokens = 100_000
	// MaxDelay bounds [[delay:D]] and Config.Delay.
	MaxDelay = time.Minute
)

// ErrBadDirective is returned, wrapped with the offending directive, by
// Generate and Stream when a known directive has a bad value or is repeated.
var ErrBadDirective = errors.New("echo: bad directive")

// Directive names, as written between [[ and ]].
const (
	nameFailAfter = "fail-after"
	nameDelay     = "delay"
	nameTokens    = "tokens"
	nameEmpty     = "empty"
	nameCall      = "call"
)

// maxNameLen is the longest directive name; a name is looked for only this
// far after "[[", so scanning stays linear however many brackets there are.
const maxNameLen = len(nameFailAfter)

// directives are the settings a message's directives ask for.
type directives struct {
	failAfter int // -1 when absent
	tokens    int // -1 when absent
	delay     time.Duration
	hasDelay  bool
	empty     bool
	call      string // tool name; "" when absent
}

// parseDirectives removes the directives from s and returns the remaining
// text and what they ask for.
func parseDirectives(s string) (string, directives, error) {
	d := directives{failAfter: -1, tokens: -1}
	if !strings.Contains(s, "[[") {
		return s, d, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	rest := s
	for {
		i := strings.Index(rest, "[[")
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		body := rest[i+2:]
		name, ok := directiveName(body)
		if !ok {
			// Not a directive: keep one bracket and look again from the next
			// one, so "[[[empty]]" still finds [[empty]].
			b.WriteByte('[')
			rest = rest[i+1:]
			continue
		}
		end := strings.Index(body, "]]")
		if end < 0 {
			// Never closed: plain text, and nothing after it can close either.
			b.WriteString(rest[i:])
			break
		}
		raw := body[:end]
		if d.has(name) {
			return "", d, fmt.Errorf("%w [[%s]]: given twice", ErrBadDirective, raw)
		}
		if err := d.apply(name, raw); err != nil {
			return "", d, err
		}
		rest = body[end+2:]
	}
	if d.empty && d.tokens >= 0 {
		return "", d, fmt.Errorf("%w: [[empty]] and [[tokens:%d]] contradict each other", ErrBadDirective, d.tokens)
	}
	if d.call != "" && (d.empty || d.tokens >= 0 || d.failAfter >= 0) {
		return "", d, fmt.Errorf("%w: [[call:%s]] takes no [[empty]], [[tokens]] or [[fail-after]]", ErrBadDirective, d.call)
	}
	return b.String(), d, nil
}

// directiveName reports the known directive that body (the text after "[[")
// starts with: a known name followed by ':' or "]]".
func directiveName(body string) (string, bool) {
	head := body[:min(len(body), maxNameLen+1)]
	n := strings.IndexAny(head, ":]")
	if n < 0 {
		return "", false
	}
	name := head[:n]
	switch name {
	case nameFailAfter, nameDelay, nameTokens, nameEmpty, nameCall:
	default:
		return "", false
	}
	if body[n] == ']' && !strings.HasPrefix(body[n:], "]]") {
		return "", false
	}
	return name, true
}

// has reports whether the directive called name was already applied.
func (d *directives) has(name string) bool {
	switch name {
	case nameFailAfter:
		return d.failAfter >= 0
	case nameTokens:
		return d.tokens >= 0
	case nameDelay:
		return d.hasDelay
	case nameCall:
		return d.call != ""
	default:
		return d.empty
	}
}

// apply records the directive raw (its text between the brackets), whose
// name is known.
func (d *directives) apply(name, raw string) error {
	_, value, hasValue := strings.Cut(raw, ":")
	bad := func(want string) error {
		return fmt.Errorf("%w [[%s]]: want %s", ErrBadDirective, raw, want)
	}
	switch name {
	case nameEmpty:
		if hasValue {
			return bad("no value")
		}
		d.empty = true
	case nameCall:
		if !hasValue || value == "" || strings.ContainsAny(value, " \t\n") {
			return bad("a tool name")
		}
		d.call = value
	case nameDelay:
		v, err := time.ParseDuration(value)
		if !hasValue || err != nil || v < 0 || v > MaxDelay {
			return bad("a Go duration from 0 to " + MaxDelay.String())
		}
		d.delay, d.hasDelay = v, true
	case nameFailAfter, nameTokens:
		v, err := strconv.Atoi(value)
		if !hasValue || err != nil || v < 0 || v > MaxTokens {
			return bad("a count from 0 to " + strconv.Itoa(MaxTokens))
		}
		if name == nameTokens {
			d.tokens = v
		} else {
			d.failAfter = v
		}
	}
	return nil
}
