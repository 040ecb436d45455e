package worker

import (
	"log/slog"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// identityAttr is the whole identity of a request for a log line: tenant,
// user and conversation. Every line about a request carries it, so two
// users' conversations of the same name stay apart in the logs.
func identityAttr(id events.Identity) slog.Attr {
	return slog.Group("", slog.String("tenant", id.Tenant), slog.String("user", id.User), slog.String("conversation", id.Conversation))
}
