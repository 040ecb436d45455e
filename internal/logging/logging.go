package logging

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// ParseLevel parses a log level: debug, info, warn or error; "" is info.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if s == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("TURNPIKE_LOG_LEVEL %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// Check reports a bad level or format (json or text; "" is json).
func Check(level, format string) error {
	var errs []error
	if _, err := ParseLevel(level); err != nil {
		errs = append(errs, err)
	}
	if format != "" && format != "json" && format != "text" {
		errs = append(errs, fmt.Errorf("TURNPIKE_LOG_FORMAT %q: want json or text", format))
	}
	return errors.Join(errs...)
}

// New returns the logger of level and format writing to w: JSON unless
// format is "text"; a bad level is info (Check reports it).
func New(w io.Writer, level, format string) *slog.Logger {
	lvl, err := ParseLevel(level)
	if err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if strings.EqualFold(format, "text") {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
