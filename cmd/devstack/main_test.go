package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/client"
)

// TestMain lets the test binary stand in for the devstack binary, so the
// tests below run the real main (flags, signals, exit code) as a process.
func TestMain(m *testing.M) {
	if os.Getenv("TURNPIKE_TEST_RUN_DEVSTACK") == "1" {
		main() // exits
	}
	os.Exit(m.Run())
}

// proc is a devstack process.
type proc struct {
	cmd    *exec.Cmd
	token  string
	ingest string
	exited chan error
}

// startDevstack starts the devstack as a process on random ports with its
// data in dir and returns once it logged the ready line.
func startDevstack(t *testing.T, dir string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(),
		"TURNPIKE_TEST_RUN_DEVSTACK=1",
		"TURNPIKE_KAFKA_ADDR=127.0.0.1:0", "TURNPIKE_MONGO_ADDR=127.0.0.1:0",
		"TURNPIKE_INGEST_ADDR=127.0.0.1:0", "TURNPIKE_PUSHGW_ADDR=127.0.0.1:0",
		"TURNPIKE_DATA_DIR="+dir, "TURNPIKE_ECHO_DELAY=0", "TURNPIKE_LOG_FORMAT=json",
		"TURNPIKE_KAFKA_BROKERS=", "TURNPIKE_MONGO_URI=", "TURNPIKE_AUTH_SECRET=",
	)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, exited: make(chan error, 1)}
	tokenc := make(chan string, 1)
	readyc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if _, tok, ok := strings.Cut(sc.Text(), "export TURNPIKE_TOKEN="); ok {
				tokenc <- tok
			}
		}
	}()
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var line struct {
				Msg    string `json:"msg"`
				Ingest string `json:"ingest"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "turnpike devstack ready" {
				readyc <- line.Ingest
			} else if line.Msg != "" && strings.Contains(sc.Text(), `"level":"ERROR"`) {
				t.Logf("devstack: %s", sc.Text())
			}
		}
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	timeout := time.After(90 * time.Second)
	select {
	case p.token = <-tokenc:
	case err := <-p.exited:
		t.Fatalf("devstack exited before printing a token: %v", err)
	case <-timeout:
		t.Fatal("no dev token within 90s")
	}
	select {
	case p.ingest = <-readyc:
	case err := <-p.exited:
		t.Fatalf("devstack exited before ready: %v", err)
	case <-timeout:
		t.Fatal("not ready within 90s")
	}
	t.Logf("devstack ready after %v", time.Since(start).Round(time.Millisecond))
	return p
}

// stop sends SIGTERM and returns the exit code.
func (p *proc) stop(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(60 * time.Second):
		t.Fatal("devstack did not stop within 60s of SIGTERM")
		return -1
	}
}

func TestDevstackStopsCleanlyOnSIGTERMAndKeepsHistoryAndTokensAcrossRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the devstack twice")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()

	p := startDevstack(t, dir)
	c := &client.Client{BaseURL: p.ingest, Token: p.token}
	if _, err := c.Send(ctx, "survivor", "remember me", client.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHistory(t, ctx, c, "survivor", 2)
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}

	// The secret is kept in the data directory, private: the first token
	// still works after the restart.
	fi, err := os.Stat(filepath.Join(dir, "auth-secret"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kept secret: %v, %v; want a file of mode 0600", fi, err)
	}
	first := p.token
	p = startDevstack(t, dir)
	c = &client.Client{BaseURL: p.ingest, Token: first}
	h := waitHistory(t, ctx, c, "survivor", 2)
	if h[0].Content != "remember me" || h[1].Content != "echo #1: remember me" {
		t.Fatalf("history after restart: %+v", h)
	}
	// The pipeline still works after the restart, and sees the old turn.
	if _, err := c.Send(ctx, "survivor", "again", client.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	h = waitHistory(t, ctx, c, "survivor", 4)
	if h[3].Content != "echo #2: again" {
		t.Fatalf("after restart: %+v", h)
	}
	resp, err := http.Get(p.ingest + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz: %d %s", resp.StatusCode, b)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
}

// waitHistory polls until the conversation holds at least n messages.
func waitHistory(t *testing.T, ctx context.Context, c *client.Client, conv string, n int) []client.Message {
	t.Helper()
	for {
		p, err := c.History(ctx, conv, 50, 0)
		if err == nil && len(p.Messages) >= n {
			return p.Messages
		}
		if ctx.Err() != nil {
			t.Fatalf("history of %s never reached %d messages: %v %+v", conv, n, err, p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
