package flagenv

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// ParseCommand is the flag handling of a command named name: bind
// registers its flags on a Set with defaults from lookup, args are parsed,
// and usage and errors go to stderr. ok false means the command must exit
// with code: 0 after -h, 2 for a bad flag or environment value.
func ParseCommand(name string, args []string, lookup func(string) (string, bool), stderr io.Writer, bind func(*Set)) (code int, ok bool) {
	set := New(flag.NewFlagSet(name, flag.ContinueOnError), lookup)
	set.FlagSet().SetOutput(stderr)
	bind(set)
	if err := set.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2, false
	}
	return 0, true
}
