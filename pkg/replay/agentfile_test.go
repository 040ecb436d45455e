package replay

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
)

func TestAShadowReplayRunsAnAgentConfigurationFile(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	e := newEnv(t)
	ids := e.conversations(t, ctx, "fay", 2, 2)
	file := filepath.Join(e.dir, "agents.json")
	// The persisted (and reported) agent is the file's, not the default
	// "assistant"; its tool makes it an agent built afresh for each run.
	if err := os.WriteFile(file, []byte(`{"agent":{"name":"concierge","instruction":"Be brief.","tools":["current_time"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := e.config(modeShadow, "file")
	cfg.EchoDelay, cfg.AgentFile = time.Millisecond, file

	direct := cfg
	direct.Agent = agentDirect
	if _, _, err := connect(ctx, direct, io.Discard, nil); err == nil || !strings.Contains(err.Error(), "use -agent adk") {
		t.Fatalf("-agent direct with a file: %v, want a refusal", err)
	}
	bad := cfg
	bad.AgentFile = filepath.Join(e.dir, "bad.json")
	if err := os.WriteFile(bad.AgentFile, []byte(`{"agent":{"name":"x","tools":["rm_rf"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := connect(ctx, bad, io.Discard, nil); err == nil || !strings.Contains(err.Error(), `unknown tool "rm_rf"`) {
		t.Fatalf("a bad file: %v, want its problem", err)
	}

	sum, _ := connectAndRun(t, ctx, cfg)
	if sum.Completed != int64(len(ids)*2) {
		t.Fatalf("completed %d, want %d", sum.Completed, len(ids)*2)
	}
	lines := readReport(t, cfg.Report)
	checkShadowAnswers(t, lines)
	for _, l := range lines {
		if l.Agent != "concierge" {
			t.Errorf("%s answered by %q, want the file's agent concierge", l.RequestID, l.Agent)
		}
	}
	// Another file is another replay: the checkpoint's fingerprint changes.
	before := cfg.fingerprint()
	if err := os.WriteFile(file, []byte(`{"agent":{"name":"other"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg.fingerprint() == before {
		t.Error("editing the agent file left the replay's fingerprint unchanged")
	}
}
