package logging

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseLevelTakesTheFourLevelsAndEmptyAsInfo(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"": "INFO", "debug": "DEBUG", "info": "INFO", "warn": "WARN", "error": "ERROR", "WARN": "WARN"} {
		l, err := ParseLevel(in)
		if err != nil || l.String() != want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %s", in, l, err, want)
		}
	}
	if _, err := ParseLevel("loud"); err == nil || !strings.Contains(err.Error(), "TURNPIKE_LOG_LEVEL") {
		t.Errorf("ParseLevel(loud) = %v, want an error naming TURNPIKE_LOG_LEVEL", err)
	}
}

func TestCheckReportsEveryBadSetting(t *testing.T) {
	t.Parallel()
	if err := Check("", ""); err != nil {
		t.Errorf("Check of the defaults: %v", err)
	}
	if err := Check("debug", "text"); err != nil {
		t.Errorf("Check(debug, text): %v", err)
	}
	err := Check("loud", "xml")
	if err == nil || !strings.Contains(err.Error(), "TURNPIKE_LOG_LEVEL") || !strings.Contains(err.Error(), "TURNPIKE_LOG_FORMAT") {
		t.Errorf("Check(loud, xml) = %v, want both settings named", err)
	}
}

func TestNewWritesTheFormatAtTheLevel(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ level, format, want string }{
		{"warn", "", `{"time":`},
		{"warn", "json", `{"time":`},
		{"warn", "text", `time=`},
		{"loud", "text", `time=`}, // a bad level is info
	} {
		var b bytes.Buffer
		log := New(&b, tt.level, tt.format)
		log.Debug("d")
		log.Info("i")
		log.Warn("w")
		out := b.String()
		if !strings.HasPrefix(out, tt.want) {
			t.Errorf("New(%q, %q) wrote %q, want it to start %s", tt.level, tt.format, out, tt.want)
		}
		lines := strings.Count(out, "\n")
		want := 1 // warn only
		if tt.level == "loud" {
			want = 2 // info and warn
		}
		if lines != want {
			t.Errorf("New(%q, %q) wrote %d lines, want %d: %s", tt.level, tt.format, lines, want, out)
		}
	}
}
