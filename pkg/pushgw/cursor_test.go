package pushgw

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

func TestParseCursor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		in        string
		partition int
		offset    int64
		ok        bool
	}{
		{"A cursor of partition 0 at offset 0 parses.", "1-0-0", 0, 0, true},
		{"A cursor with several digits parses.", "1-11-123456", 11, 123456, true},
		{"The largest partition and offset parse.", "1-2147483647-9223372036854775807", math.MaxInt32, math.MaxInt64, true},
		{"An empty string is refused.", "", 0, 0, false},
		{"Another version is refused.", "2-0-0", 0, 0, false},
		{"A missing offset is refused.", "1-3", 0, 0, false},
		{"An empty offset is refused.", "1-3-", 0, 0, false},
		{"An empty partition is refused.", "1--3", 0, 0, false},
		{"A negative offset is refused.", "1-3--1", 0, 0, false},
		{"A plus sign is refused.", "1-+3-1", 0, 0, false},
		{"A leading zero is refused.", "1-03-1", 0, 0, false},
		{"A leading zero in the offset is refused.", "1-3-01", 0, 0, false},
		{"A third number is refused.", "1-3-1-4", 0, 0, false},
		{"A partition beyond int32 is refused.", "1-2147483648-0", 0, 0, false},
		{"An offset beyond int64 is refused.", "1-0-9223372036854775808", 0, 0, false},
		{"Spaces are refused.", "1-0-1 ", 0, 0, false},
		{"A leading space is refused.", " 1-0-1", 0, 0, false},
		{"A space inside is refused.", "1- 0-1", 0, 0, false},
		{"A trailing line break is refused.", "1-0-1\n", 0, 0, false},
		{"A plus sign on the offset is refused.", "1-0-+1", 0, 0, false},
		{"A zero written twice is refused.", "1-0-00", 0, 0, false},
		{"Digits outside ASCII are refused.", "1-0-١", 0, 0, false},
		{"An offset of 20 digits is refused.", "1-0-10000000000000000000", 0, 0, false},
		{"Two dashes between the numbers are refused.", "1-3--4", 0, 0, false},
		{"A trailing dash is refused.", "1-3-4-", 0, 0, false},
		{"Hex digits are refused.", "1-0-1f", 0, 0, false},
		{"The word earliest is not a cursor.", "earliest", 0, 0, false},
		{"A cursor one byte longer than the longest is refused.", "1-2147483647-92233720368547758070", 0, 0, false},
		{"A cursor of exactly the wire's limit is refused.", "1-" + strings.Repeat("1", events.MaxCursorBytes-4) + "-0", 0, 0, false},
		{"A cursor beyond the wire's limit is refused.", "1-0-" + strings.Repeat("1", events.MaxCursorBytes), 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, o, err := ParseCursor(tt.in)
			if !tt.ok {
				if err == nil {
					t.Fatalf("ParseCursor(%q) = %d, %d; want an error", tt.in, p, o)
				}
				if !errors.Is(err, events.ErrInvalid) {
					t.Fatalf("ParseCursor(%q) error %v does not wrap events.ErrInvalid", tt.in, err)
				}
				return
			}
			if err != nil || p != tt.partition || o != tt.offset {
				t.Fatalf("ParseCursor(%q) = %d, %d, %v; want %d, %d", tt.in, p, o, err, tt.partition, tt.offset)
			}
			if got := FormatCursor(p, o); got != tt.in {
				t.Fatalf("FormatCursor(%d, %d) = %q, want %q", p, o, got, tt.in)
			}
		})
	}
}

func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"1-0-0", "1-7-42", "1-2147483647-9223372036854775807", "1-01-1", "x", "1--1", "1-0-1-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, o, err := ParseCursor(s)
		if err != nil {
			return
		}
		if p < 0 || o < 0 {
			t.Fatalf("ParseCursor(%q) = %d, %d: negative", s, p, o)
		}
		if got := FormatCursor(p, o); got != s {
			t.Fatalf("ParseCursor accepted the non-canonical %q (canonical %q)", s, got)
		}
		if len(s) > events.MaxCursorBytes {
			t.Fatalf("ParseCursor accepted %d bytes", len(s))
		}
	})
}

func FuzzCursorRoundTrip(f *testing.F) {
	f.Add(int32(0), int64(0))
	f.Add(int32(math.MaxInt32), int64(math.MaxInt64))
	f.Add(int32(5), int64(1234))
	f.Fuzz(func(t *testing.T, p int32, o int64) {
		if p < 0 || o < 0 {
			if _, _, err := ParseCursor(FormatCursor(int(p), o)); err == nil {
				t.Fatalf("ParseCursor accepted a negative position %d, %d", p, o)
			}
			return
		}
		gp, gotOff, err := ParseCursor(FormatCursor(int(p), o))
		if err != nil || gp != int(p) || gotOff != o {
			t.Fatalf("round trip of %d, %d = %d, %d, %v", p, o, gp, gotOff, err)
		}
	})
}

func TestFormatCursorIsDecimal(t *testing.T) {
	t.Parallel()
	if got, want := FormatCursor(3, 99), "1-3-"+strconv.Itoa(99); got != want {
		t.Fatalf("FormatCursor(3, 99) = %q, want %q", got, want)
	}
}

// Every cursor the gateway hands out fits the wire schema's limit, so that
// an event carrying it (Meta.Cursor) decodes again.
func TestFormatCursorFitsTheWireLimit(t *testing.T) {
	t.Parallel()
	longest := FormatCursor(math.MaxInt32, math.MaxInt64)
	if len(longest) != 32 || len(longest) > events.MaxCursorBytes {
		t.Fatalf("the longest cursor %q is %d bytes; want 32, within events.MaxCursorBytes (%d)", longest, len(longest), events.MaxCursorBytes)
	}
}
