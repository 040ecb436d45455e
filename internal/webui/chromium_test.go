package webui_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestFindChromiumHelper only runs inside TestAMissingChromiumFailsInCIAndSkipsLoudlyElsewhere.
func TestFindChromiumHelper(t *testing.T) {
	if os.Getenv("TURNPIKE_TEST_FIND_CHROMIUM") != "1" {
		t.Skip("helper process of TestAMissingChromiumFailsInCIAndSkipsLoudlyElsewhere")
	}
	findChromium(t)
}

func TestAMissingChromiumFailsInCIAndSkipsLoudlyElsewhere(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, ci string
		fails    bool
		want     string
	}{
		{"In CI a missing browser fails the run.", "true", true, "in CI a missing browser fails the run"},
		{"Outside CI a missing browser skips, saying so.", "", false, "!!! SKIPPING THE BROWSER TEST"},
		{"CI=false is not CI.", "false", false, "!!! SKIPPING THE BROWSER TEST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestFindChromiumHelper$", "-test.v")
			cmd.Env = append(os.Environ(), "TURNPIKE_TEST_FIND_CHROMIUM=1", "CI="+tt.ci,
				"TURNPIKE_CHROMIUM="+t.TempDir()+"/no-chromium")
			out, err := cmd.CombinedOutput()
			if failed := err != nil; failed != tt.fails || !strings.Contains(string(out), tt.want) {
				t.Fatalf("CI=%q: error %v, output:\n%s\nwant failed=%v and %q", tt.ci, err, out, tt.fails, tt.want)
			}
		})
	}
}
