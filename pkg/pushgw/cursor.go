package pushgw

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// cursorVersion prefixes every cursor, so the encoding can change later
// without old cursors being misread.
const cursorVersion = "1-"

// maxCursorDigits bounds each number of a cursor: an int64 has at most 19
// decimal digits.
const maxCursorDigits = 19

// FormatCursor returns the opaque cursor of the stream record at offset in
// partition: "1-<partition>-<offset>". Both must be >= 0; ParseCursor
// rejects anything else.
func FormatCursor(partition int, offset int64) string {
	return cursorVersion + strconv.Itoa(partition) + "-" + strconv.FormatInt(offset, 10)
}

// ParseCursor is the strict inverse of FormatCursor: it accepts exactly the
// strings FormatCursor returns for a partition in [0, 2^31) and an offset in
// [0, 2^63) — no signs, spaces or leading zeros. Errors wrap events.ErrInvalid.
func ParseCursor(s string) (partition int, offset int64, err error) {
	// No length check is needed: each number is bounded by its digits, so
	// nothing longer than the longest cursor (32 bytes, far under
	// events.MaxCursorBytes) gets through.
	rest, ok := strings.CutPrefix(s, cursorVersion)
	if !ok {
		return 0, 0, fmt.Errorf("%w cursor: not a cursor of this gateway", events.ErrInvalid)
	}
	ps, offs, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, 0, fmt.Errorf("%w cursor: not a cursor of this gateway", events.ErrInvalid)
	}
	p, err := parseCursorNumber(ps, 31)
	if err != nil {
		return 0, 0, fmt.Errorf("%w cursor partition: %w", events.ErrInvalid, err)
	}
	o, err := parseCursorNumber(offs, 63)
	if err != nil {
		return 0, 0, fmt.Errorf("%w cursor offset: %w", events.ErrInvalid, err)
	}
	return int(p), o, nil
}

// parseCursorNumber parses a canonical non-negative decimal below 2^bits.
func parseCursorNumber(s string, bits int) (int64, error) {
	switch {
	case s == "":
		return 0, fmt.Errorf("empty")
	case len(s) > maxCursorDigits:
		return 0, fmt.Errorf("too long")
	case len(s) > 1 && s[0] == '0':
		return 0, fmt.Errorf("leading zero")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("not a decimal number")
		}
	}
	n, err := strconv.ParseInt(s, 10, bits+1)
	if err != nil {
		return 0, fmt.Errorf("out of range")
	}
	return n, nil
}
