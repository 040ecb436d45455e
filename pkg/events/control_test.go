package events_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// member is one member of a hand-written JSON object, value raw.
type member struct{ k, v string }

func object(ms []member) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%q:%s", m.k, m.v)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// The three control records of docs/api.md, "Control records".
var (
	cancelBelowMembers = []member{{"v", "1"}, {"type", `"cancel"`}, {"tenant", `"default"`}, {"user", `"dev"`},
		{"conversation", `"c1"`}, {"partition", "5"}, {"before", "42"}, {"at", `"2026-11-30T00:37:41.123Z"`}}
	cancelRequestMembers = []member{{"v", "1"}, {"type", `"cancel"`}, {"tenant", `"default"`}, {"user", `"dev"`},
		{"conversation", `"c1"`}, {"request_id", `"r-1"`}, {"at", `"2026-11-30T00:37:41.123Z"`}}
	completedMembers = []member{{"v", "1"}, {"type", `"completed"`}, {"tenant", `"default"`}, {"user", `"dev"`},
		{"conversation", `"c1"`}, {"request_id", `"r-1"`}, {"status", `"complete"`}, {"at", `"2026-11-30T00:37:41.123Z"`}}
)

// replaced returns ms with member k's value set to v ("" drops it).
func replaced(ms []member, k, v string) []member {
	var out []member
	for _, m := range ms {
		if m.k == k {
			if v == "" {
				continue
			}
			m.v = v
		}
		out = append(out, m)
	}
	return out
}

func TestDecodeControlAcceptsTheDocumentedRecords(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 0, 37, 41, 123000000, time.UTC)
	base := events.Control{V: 1, Tenant: "default", User: "dev", Conversation: "c1", At: at}
	with := func(f func(*events.Control)) events.Control { c := base; f(&c); return c }
	tests := []struct {
		name string
		in   string
		want events.Control
	}{
		{"A cancel of the requests below an offset decodes.", object(cancelBelowMembers), with(func(c *events.Control) {
			c.Type, c.Partition, c.Before = events.ControlCancel, 5, 42
		})},
		{"A cancel of one request decodes.", object(cancelRequestMembers), with(func(c *events.Control) {
			c.Type, c.RequestID = events.ControlCancel, "r-1"
		})},
		{"A completion decodes with its status.", object(completedMembers), with(func(c *events.Control) {
			c.Type, c.RequestID, c.Status = events.ControlCompleted, "r-1", events.StatusComplete
		})},
		{"A completion of every persisted status decodes.", object(replaced(completedMembers, "status", `"interrupted"`)), with(func(c *events.Control) {
			c.Type, c.RequestID, c.Status = events.ControlCompleted, "r-1", events.StatusInterrupted
		})},
		{"Members may come in any order.", `{"at":"2026-11-30T00:37:41.123Z","before":42,"partition":5,"conversation":"c1","user":"dev","tenant":"default","type":"cancel","v":1}`,
			with(func(c *events.Control) { c.Type, c.Partition, c.Before = events.ControlCancel, 5, 42 })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := events.DecodeControl([]byte(tt.in))
			if err != nil {
				t.Fatalf("DecodeControl(%s): %v", tt.in, err)
			}
			if !got.At.Equal(tt.want.At) {
				t.Fatalf("At = %v, want %v", got.At, tt.want.At)
			}
			got.At, tt.want.At = time.Time{}, time.Time{}
			if got != tt.want {
				t.Fatalf("DecodeControl = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// Control records are decoded as strictly as request records: a member
// name is matched exactly (encoding/json alone would read "Type" or "TYPE"
// as "type") and a duplicated member is refused (encoding/json alone keeps
// the last one).
func TestDecodeControlRefusesCaseVariantsAndDuplicates(t *testing.T) {
	t.Parallel()
	type tc struct{ name, in string }
	var tests []tc
	for _, base := range [][]member{cancelBelowMembers, completedMembers} {
		for i, m := range base {
			title := strings.ToUpper(m.k[:1]) + m.k[1:]
			upper := strings.ToUpper(m.k)
			variant := append([]member(nil), base...)
			variant[i].k = title
			tests = append(tests,
				tc{fmt.Sprintf("A %s member standing for %s of a %s record is refused.", title, m.k, base[1].v), object(variant)},
				tc{fmt.Sprintf("A %s member beside %s of a %s record is refused.", upper, m.k, base[1].v), object(append(append([]member(nil), base...), member{upper, m.v}))},
				tc{fmt.Sprintf("A duplicated %s of a %s record is refused.", m.k, base[1].v), object(append(append([]member(nil), base...), m))},
			)
		}
	}
	tests = append(tests,
		tc{"A type duplicated with another value is refused.", object(append(append([]member(nil), completedMembers...), member{"type", `"cancel"`}))},
		tc{"A tenant duplicated through an escaped name is refused.", strings.TrimSuffix(object(cancelRequestMembers), "}") + `,"t\u0065nant":"evil"}`},
		tc{"A name matching only under Unicode folding is refused.", object(append(replaced(cancelRequestMembers, "tenant", ""), member{"\u017fenant", `"default"`}))},
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := events.DecodeControl([]byte(tt.in))
			if err == nil || !errors.Is(err, events.ErrInvalid) {
				t.Fatalf("DecodeControl(%s) = %+v, %v; want ErrInvalid", tt.in, got, err)
			}
			if got != (events.Control{}) {
				t.Fatalf("DecodeControl returned %+v with an error, want the zero Control", got)
			}
		})
	}
}

func TestDecodeControlRejectsBadRecords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       string
		tooLarge bool
	}{
		{"An unknown member is refused.", object(append(append([]member(nil), cancelRequestMembers...), member{"reason", `"x"`})), false},
		{"An unknown null member is refused.", object(append(append([]member(nil), cancelRequestMembers...), member{"content", "null"})), false},
		{"A missing type is refused.", object(replaced(cancelRequestMembers, "type", "")), false},
		{"An unknown type is refused.", object(replaced(cancelRequestMembers, "type", `"pause"`)), false},
		{"A capitalised type value is refused.", object(replaced(cancelRequestMembers, "type", `"Cancel"`)), false},
		{"A version of 2 is refused.", object(replaced(cancelRequestMembers, "v", "2")), false},
		{"A missing version is refused.", object(replaced(cancelRequestMembers, "v", "")), false},
		{"A version given as a string is refused.", object(replaced(cancelRequestMembers, "v", `"1"`)), false},
		{"A missing tenant is refused.", object(replaced(cancelRequestMembers, "tenant", "")), false},
		{"A user breaking the ID rule is refused.", object(replaced(cancelRequestMembers, "user", `"d/ev"`)), false},
		{"A missing conversation is refused.", object(replaced(cancelRequestMembers, "conversation", "")), false},
		{"A request_id breaking the ID rule is refused.", object(replaced(cancelRequestMembers, "request_id", `"r 1"`)), false},
		{"A completion without request_id is refused.", object(replaced(completedMembers, "request_id", "")), false},
		{"A completion without status is refused.", object(replaced(completedMembers, "status", "")), false},
		{"A completion with an unknown status is refused.", object(replaced(completedMembers, "status", `"done"`)), false},
		{"A cancel below a negative offset is refused.", object(replaced(cancelBelowMembers, "before", "-1")), false},
		{"A cancel in a negative partition is refused.", object(replaced(cancelBelowMembers, "partition", "-1")), false},
		{"A partition given as a string is refused.", object(replaced(cancelBelowMembers, "partition", `"5"`)), false},
		{"An at that is not RFC 3339 is refused.", object(replaced(cancelRequestMembers, "at", `"now"`)), false},
		{"Trailing data after the record is refused.", object(cancelRequestMembers) + "{}", false},
		{"An array is refused.", "[" + object(cancelRequestMembers) + "]", false},
		{"A record over the event limit is refused as too large.", object(cancelRequestMembers) + strings.Repeat(" ", events.MaxEventBytes), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := events.DecodeControl([]byte(tt.in))
			if err == nil || !errors.Is(err, events.ErrInvalid) {
				t.Fatalf("DecodeControl(%s) = %+v, %v; want ErrInvalid", truncateForLog(tt.in), got, err)
			}
			if errors.Is(err, events.ErrTooLarge) != tt.tooLarge {
				t.Errorf("errors.Is(%v, ErrTooLarge) = %v, want %v", err, !tt.tooLarge, tt.tooLarge)
			}
			if got != (events.Control{}) {
				t.Fatalf("DecodeControl returned %+v with an error, want the zero Control", got)
			}
		})
	}
}
