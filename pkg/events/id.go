package events

import (
	"errors"
	"fmt"
	"strings"
)

// MaxIDLen is the longest identifier the ID rule allows, in bytes.
const MaxIDLen = 128

// ErrInvalid is wrapped by every validation error in this package, so callers
// can tell bad input (dead-letter it, answer 400) from other failures.
var ErrInvalid = errors.New("invalid")

// ValidateID checks the ID rule shared by tenants, users, conversations,
// idempotency keys and request ids: 1..128 bytes of [A-Za-z0-9._:@-].
// what names the field in the error message.
func ValidateID(what, s string) error {
	if s == "" {
		return fmt.Errorf("%w %s: empty", ErrInvalid, what)
	}
	if len(s) > MaxIDLen {
		return fmt.Errorf("%w %s: %d bytes, at most %d allowed", ErrInvalid, what, len(s), MaxIDLen)
	}
	for i := 0; i < len(s); i++ {
		if !idByte(s[i]) {
			return fmt.Errorf("%w %s: byte %q at %d is not in [A-Za-z0-9._:@-]", ErrInvalid, what, s[i], i)
		}
	}
	return nil
}

func idByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '.', c == '_', c == ':', c == '@', c == '-':
		return true
	}
	return false
}

// Identity is the triple every conversation belongs to. Tenant and User come
// from the verified bearer token, Conversation from the URL or subscribe
// frame. Two identities that differ in any part never share data.
type Identity struct {
	Tenant       string
	User         string
	Conversation string
}

// Validate checks each part against the ID rule.
func (id Identity) Validate() error {
	return errors.Join(
		ValidateID("tenant", id.Tenant),
		ValidateID("user", id.User),
		ValidateID("conversation", id.Conversation),
	)
}

// Key is the Kafka record key of the identity, "tenant/user/conversation".
// The ID rule excludes '/', so the key is unambiguous.
func (id Identity) Key() string {
	return id.Tenant + "/" + id.User + "/" + id.Conversation
}

// String returns Key.
func (id Identity) String() string { return id.Key() }

// ParseKey parses and validates a "tenant/user/conversation" record key.
func ParseKey(key string) (Identity, error) {
	t, rest, ok1 := strings.Cut(key, "/")
	u, c, ok2 := strings.Cut(rest, "/")
	if !ok1 || !ok2 {
		return Identity{}, fmt.Errorf("%w key %q: want tenant/user/conversation", ErrInvalid, truncate(key, 64))
	}
	id := Identity{Tenant: t, User: u, Conversation: c}
	if err := id.Validate(); err != nil {
		return Identity{}, fmt.Errorf("key: %w", err)
	}
	return id, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
