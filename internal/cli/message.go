package cli

import "strings"

// message is err's text without the "turnpike: " its parts put in front,
// which the command's own prefix already says.
func message(err error) string {
	s := strings.ReplaceAll(err.Error(), ": turnpike: ", ": ")
	for strings.HasPrefix(s, "turnpike: ") {
		s = strings.TrimPrefix(s, "turnpike: ")
	}
	return s
}
