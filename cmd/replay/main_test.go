package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// TestMain lets the test binary stand in for the command.
func TestMain(m *testing.M) {
	if os.Getenv("TURNPIKE_TEST_RUN_REPLAY") == "1" {
		os.Args = append([]string{"replay"}, strings.Fields(os.Getenv("TURNPIKE_TEST_REPLAY_ARGS"))...)
		main()
	}
	os.Exit(m.Run())
}

// command runs the replay command as a process with args.
func command(env []string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), env...), "TURNPIKE_TEST_RUN_REPLAY=1", "TURNPIKE_TEST_REPLAY_ARGS="+strings.Join(args, " "))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cmd, &stdout, &stderr
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestTheCommandStopsOnSIGINTAndResumesWhereItStopped(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	brokers := testenv.Kafka(t)
	prefix := testenv.Name(t, "cmd") + "."
	names := topic.NewNames(prefix)
	if err := topic.Ensure(ctx, brokers, 2, names.All()...); err != nil {
		t.Fatal(err)
	}
	var msgs []kafka.Message
	for i := range 120 {
		id := events.Identity{Tenant: "acme", User: "kim", Conversation: fmt.Sprintf("c%d", i%6)}
		msgs = append(msgs, testenv.Request(id, fmt.Sprintf("r%d", i), fmt.Sprintf("m%d", i)))
	}
	testenv.Produce(t, ctx, brokers, names.Requests, msgs...)
	report := filepath.Join(t.TempDir(), "report.jsonl")
	env := []string{"TURNPIKE_KAFKA_BROKERS=" + strings.Join(brokers, ","), "TURNPIKE_TOPIC_PREFIX=" + prefix, "TURNPIKE_LOG_LEVEL=error"}

	// Bad flags: exit 2 with the reason.
	cmd, _, stderr := command(env, "-mode", "shadow", "-start-offset", "9", "-end-offset", "3", "-report", report)
	if code := exitCode(cmd.Run()); code != 2 || !strings.Contains(stderr.String(), "start 9 is after end 3") {
		t.Fatalf("bad range: exit %d, stderr %q; want 2 and the reason", code, stderr.String())
	}

	// Each request takes about 20 ms (2 words, 10 ms apart), two
	// conversations at a time: interrupt after the first lines.
	args := []string{"-mode", "shadow", "-echo-delay", "10ms", "-concurrency", "2", "-report", report, "-checkpoint-interval", "50ms"}
	cmd, stdout, stderr := command(env, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for {
		b, err := os.ReadFile(report)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		if bytes.Count(b, []byte("\n")) >= 10 {
			break
		}
		if ctx.Err() != nil {
			_ = cmd.Process.Kill()
			t.Fatalf("no progress: %s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(cmd.Wait()); code != 130 || !strings.Contains(stdout.String(), "INTERRUPTED") {
		t.Fatalf("after SIGINT: exit %d, stdout %q, stderr %q; want 130 and INTERRUPTED", code, stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("the interrupted run left no report: %v", err)
	}
	if n := bytes.Count(b, []byte("\n")); n >= 120 {
		t.Fatalf("the interrupted run reported all %d records", n)
	}

	cmd, stdout, stderr = command(env, append(args, "-resume", "-echo-delay", "0")...)
	if code := exitCode(cmd.Run()); code == 0 {
		t.Fatalf("resuming with another echo delay: exit 0, want a refusal (stdout %q)", stdout.String())
	}
	cmd, stdout, stderr = command(env, append(args, "-resume")...)
	if code := exitCode(cmd.Run()); code != 0 || !strings.Contains(stdout.String(), ": done") {
		t.Fatalf("resume: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	if b, err = os.ReadFile(report); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	seen := map[string]bool{}
	for _, l := range lines {
		i := strings.Index(l, `"request_id":"`)
		if i < 0 {
			t.Fatalf("report line without request id: %s", l)
		}
		id := l[i+len(`"request_id":"`):]
		id = id[:strings.IndexByte(id, '"')]
		if seen[id] {
			t.Errorf("%s reported twice", id)
		}
		seen[id] = true
	}
	if len(seen) != 120 {
		t.Errorf("report holds %d requests, want 120", len(seen))
	}
}
