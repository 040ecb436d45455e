package history

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Conversation summarizes one conversation of a user, for listings.
type Conversation struct {
	// Conversation is the conversation's name (the last part of its identity).
	Conversation string
	// UpdatedAt is when its newest turn was committed (UTC, milliseconds).
	UpdatedAt time.Time
	// Messages is how many messages it holds: two per committed turn.
	Messages int64
}

// ConversationCursor is a position in a user's conversation listing, which
// is ordered newest first by (UpdatedAt, Conversation), both descending: the
// name breaks ties between conversations updated in the same millisecond, so
// every conversation has exactly one place and pages never skip or repeat
// one. The zero cursor is the start of the listing.
type ConversationCursor struct {
	UpdatedAt    time.Time
	Conversation string
}

// IsZero reports whether c is the start of the listing.
func (c ConversationCursor) IsZero() bool { return c.UpdatedAt.IsZero() && c.Conversation == "" }

// ConversationPage is one page of a user's conversations, newest first.
type ConversationPage struct {
	Conversations []Conversation
	// Next is the cursor of the next (older) page: the position of the
	// page's last conversation. Zero when there is none.
	Next ConversationCursor
}

// cursorOf is the listing position of c.
func cursorOf(c Conversation) ConversationCursor {
	return ConversationCursor{UpdatedAt: c.UpdatedAt, Conversation: c.Conversation}
}

// compareListing orders conversations as the listing does: newest first,
// then by name, descending.
func compareListing(a, b ConversationCursor) int {
	if c := b.UpdatedAt.Compare(a.UpdatedAt); c != 0 {
		return c
	}
	return cmp.Compare(b.Conversation, a.Conversation)
}

// after reports whether c comes after cursor in the listing (every
// conversation does when cursor is zero).
func (cursor ConversationCursor) after(c Conversation) bool {
	return cursor.IsZero() || compareListing(cursorOf(c), cursor) > 0
}

// validateOwner checks the tenant and user of a listing, and its cursor.
func validateOwner(tenant, user string, before ConversationCursor) error {
	errs := []error{events.ValidateID("tenant", tenant), events.ValidateID("user", user)}
	if !before.IsZero() {
		if before.UpdatedAt.IsZero() {
			errs = append(errs, fmt.Errorf("%w cursor: no time", events.ErrInvalid))
		}
		if err := events.ValidateID("cursor conversation", before.Conversation); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// conversationPage sorts found (the conversations after the cursor, at
// least the first limit+1 of them in listing order, possibly more) into
// listing order and cuts the page of limit, which must be clamped already.
func conversationPage(found []Conversation, limit int) ConversationPage {
	slices.SortFunc(found, func(a, b Conversation) int { return compareListing(cursorOf(a), cursorOf(b)) })
	if len(found) <= limit {
		if found == nil {
			found = []Conversation{}
		}
		return ConversationPage{Conversations: found}
	}
	page := found[:limit:limit]
	return ConversationPage{Conversations: page, Next: cursorOf(page[limit-1])}
}
