package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

func TestValidateID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		id   string
		ok   bool
	}{
		{"Lowercase letters are allowed.", "abcdefghijklmnopqrstuvwxyz", true},
		{"Uppercase letters are allowed.", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", true},
		{"Digits are allowed.", "0123456789", true},
		{"Each allowed punctuation byte is allowed.", "a.b_c:d@e-f", true},
		{"An ID made only of punctuation is allowed.", "._:@-", true},
		{"A single byte is allowed.", "x", true},
		{"An email-like ID is allowed.", "alice@example.com", true},
		{"128 bytes are allowed.", strings.Repeat("a", 128), true},
		{"129 bytes are rejected.", strings.Repeat("a", 129), false},
		{"The empty ID is rejected.", "", false},
		{"A slash is rejected because it separates key parts.", "a/b", false},
		{"A space is rejected.", "a b", false},
		{"A tab is rejected.", "a\tb", false},
		{"A newline is rejected.", "a\n", false},
		{"A NUL is rejected.", "a\x00", false},
		{"DEL is rejected.", "a\x7f", false},
		{"A plus sign is rejected.", "a+b", false},
		{"A comma is rejected.", "a,b", false},
		{"A backslash is rejected.", `a\b`, false},
		{"A double quote is rejected.", `a"b`, false},
		{"A percent sign is rejected.", "a%2Fb", false},
		{"A question mark is rejected.", "a?b", false},
		{"A hash is rejected.", "a#b", false},
		{"A tilde is rejected.", "a~b", false},
		{"A non-ASCII letter is rejected.", "café", false},
		{"An emoji is rejected.", "a😀", false},
		{"A fullwidth letter is rejected.", "ａ", false},
		{"Invalid UTF-8 is rejected.", "a\xff", false},
		{"128 allowed bytes with a bad last byte are rejected.", strings.Repeat("a", 127) + "/", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := events.ValidateID("conversation", tt.id)
			if tt.ok {
				if err != nil {
					t.Fatalf("ValidateID(%q) = %v, want nil", tt.id, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateID(%q) = nil, want an error", tt.id)
			}
			if !errors.Is(err, events.ErrInvalid) {
				t.Errorf("ValidateID(%q) = %v, want it to wrap ErrInvalid", tt.id, err)
			}
			if !strings.Contains(err.Error(), "conversation") {
				t.Errorf("ValidateID error %q does not name the field", err)
			}
		})
	}
}

func TestValidateIDAcceptsExactlyTheAllowedBytes(t *testing.T) {
	t.Parallel()
	const allowed = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:@-"
	for c := 0; c < 256; c++ {
		want := strings.IndexByte(allowed, byte(c)) >= 0
		got := events.ValidateID("id", "a"+string([]byte{byte(c)})+"z") == nil
		if got != want {
			t.Errorf("byte %#x: accepted = %v, want %v", c, got, want)
		}
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		key  string
		want events.Identity
		ok   bool
	}{
		{"A well-formed key parses into its three parts.", "acme/alice/c1",
			events.Identity{Tenant: "acme", User: "alice", Conversation: "c1"}, true},
		{"Parts may use every allowed punctuation byte.", "t.1/u_2@x.com/c:3-4",
			events.Identity{Tenant: "t.1", User: "u_2@x.com", Conversation: "c:3-4"}, true},
		{"Parts of 128 bytes are allowed.", strings.Repeat("t", 128) + "/" + strings.Repeat("u", 128) + "/" + strings.Repeat("c", 128),
			events.Identity{Tenant: strings.Repeat("t", 128), User: strings.Repeat("u", 128), Conversation: strings.Repeat("c", 128)}, true},
		{"The empty key is rejected.", "", events.Identity{}, false},
		{"A key without slashes is rejected.", "acme", events.Identity{}, false},
		{"A key with one slash is rejected.", "acme/alice", events.Identity{}, false},
		{"A key with four parts is rejected.", "acme/alice/c1/x", events.Identity{}, false},
		{"An empty tenant is rejected.", "/alice/c1", events.Identity{}, false},
		{"An empty user is rejected.", "acme//c1", events.Identity{}, false},
		{"An empty conversation is rejected.", "acme/alice/", events.Identity{}, false},
		{"Only slashes are rejected.", "//", events.Identity{}, false},
		{"A space in a part is rejected.", "acme/al ice/c1", events.Identity{}, false},
		{"A part of 129 bytes is rejected.", "acme/alice/" + strings.Repeat("c", 129), events.Identity{}, false},
		{"Unicode in a part is rejected.", "acmé/alice/c1", events.Identity{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := events.ParseKey(tt.key)
			if !tt.ok {
				if err == nil {
					t.Fatalf("ParseKey(%q) = %+v, want an error", tt.key, got)
				}
				if !errors.Is(err, events.ErrInvalid) {
					t.Errorf("ParseKey(%q) error %v does not wrap ErrInvalid", tt.key, err)
				}
				if got != (events.Identity{}) {
					t.Errorf("ParseKey(%q) returned %+v with an error, want the zero Identity", tt.key, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseKey(%q): %v", tt.key, err)
			}
			if got != tt.want {
				t.Fatalf("ParseKey(%q) = %+v, want %+v", tt.key, got, tt.want)
			}
			if got.Key() != tt.key {
				t.Errorf("Key() = %q, want %q", got.Key(), tt.key)
			}
			if got.String() != tt.key {
				t.Errorf("String() = %q, want %q", got.String(), tt.key)
			}
		})
	}
}

func TestIdentityValidateReportsEveryBadPart(t *testing.T) {
	t.Parallel()
	err := events.Identity{Tenant: "", User: "a b", Conversation: "c/1"}.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want an error")
	}
	for _, part := range []string{"tenant", "user", "conversation"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("Validate() error %q does not mention %s", err, part)
		}
	}
	if err := (events.Identity{Tenant: "t", User: "u", Conversation: "c"}).Validate(); err != nil {
		t.Errorf("Validate() of a good identity = %v", err)
	}
}
