package devstack

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

func TestPageStreamURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, addr, want string
	}{
		{"A gateway on every interface is found on the page's host.", "[::]:8081", "ws://{host}:8081/v1/stream"},
		{"A gateway on every IPv4 interface is found on the page's host.", "0.0.0.0:9001", "ws://{host}:9001/v1/stream"},
		{"A gateway without a host is found on the page's host.", ":8081", "ws://{host}:8081/v1/stream"},
		{"A gateway on loopback is found on the page's host, so the Origin matches it.", "127.0.0.1:39001", "ws://{host}:39001/v1/stream"},
		{"A gateway on IPv6 loopback is found on the page's host.", "[::1]:8081", "ws://{host}:8081/v1/stream"},
		{"A gateway on localhost is found on the page's host.", "localhost:8081", "ws://{host}:8081/v1/stream"},
		{"A gateway on one interface is found there.", "192.0.2.7:8081", "ws://192.0.2.7:8081/v1/stream"},
		{"An IPv6 gateway address keeps its brackets.", "[2001:db8::1]:8081", "ws://[2001:db8::1]:8081/v1/stream"},
	}
	for _, tt := range tests {
		if got := pageStreamURL(tt.addr); got != tt.want {
			t.Errorf("%s pageStreamURL(%q) = %q, want %q", tt.name, tt.addr, got, tt.want)
		}
	}
}

func TestTheGeneratedSecretIsKeptPrivateAndReused(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	secret, created, err := loadOrCreateSecret(dir)
	if err != nil || !created || len(secret) < auth.MinSecretBytes {
		t.Fatalf("first start: %q, created %v, %v", secret, created, err)
	}
	path := filepath.Join(dir, SecretFile)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v, %v; want mode 0600", fi.Mode(), err)
	}
	again, created, err := loadOrCreateSecret(dir)
	if err != nil || created || again != secret {
		t.Fatalf("second start: %q (created %v, %v), want the kept %q", again, created, err, secret)
	}

	// A file others can read is made private again and still used.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if again, _, err := loadOrCreateSecret(dir); err != nil || again != secret {
		t.Fatalf("after chmod 0644: %q, %v", again, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v after reading, want 0600", fi.Mode())
	}

	// A damaged file is an error naming it, and is not replaced.
	if err := os.WriteFile(path, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadOrCreateSecret(dir); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("short secret: %v, want an error naming %s", err, path)
	}
	if b, _ := os.ReadFile(path); string(b) != "short\n" {
		t.Fatalf("the damaged secret was replaced: %q", b)
	}
}

func TestTheBannerSaysWhereTheTokensSecretComesFrom(t *testing.T) {
	t.Parallel()
	st := Stack{IngestAddr: "[::]:8080", PushgwAddr: "[::]:8081", DevToken: "tok", SecretFile: "data/auth-secret"}
	for source, want := range map[string]string{
		SecretFromEnv:     "signed with TURNPIKE_AUTH_SECRET",
		SecretGenerated:   "generated into data/auth-secret",
		SecretFromDataDir: "kept in data/auth-secret, so earlier tokens still work",
	} {
		st.SecretSource = source
		b := st.Banner("dev")
		if !strings.Contains(b, want) || !strings.Contains(b, "export TURNPIKE_TOKEN=tok\n") || !strings.Contains(b, "http://localhost:8080/") {
			t.Errorf("banner with secret %s:\n%s\nwant %q and the token", source, b, want)
		}
	}
}

func TestEveryPortInUseIsReportedAtOnceWithItsVariable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var busy []string
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		busy = append(busy, ln.Addr().String())
	}
	dir := t.TempDir()
	c := Config{KafkaAddr: busy[0], MongoAddr: "127.0.0.1:0", IngestAddr: busy[1], PushgwAddr: busy[2], DataDir: dir}
	err := Run(ctx, c, Listeners{}, slog.New(slog.DiscardHandler), func(Stack) { t.Error("ready despite busy ports") })
	if err == nil {
		t.Fatal("Run started on busy ports")
	}
	for i, env := range []string{"TURNPIKE_KAFKA_ADDR", "TURNPIKE_INGEST_ADDR", "TURNPIKE_PUSHGW_ADDR"} {
		if !strings.Contains(err.Error(), env+"="+busy[i]+" is already in use") {
			t.Errorf("error does not name %s=%s: %v", env, busy[i], err)
		}
	}
	if strings.Contains(err.Error(), "TURNPIKE_MONGO_ADDR") {
		t.Errorf("error names the free store port: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the data directory was touched before the ports were checked: %v", entries)
	}
}

func TestABadAgentFileIsTheOnlyErrorReported(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	file := filepath.Join(dir, "agents.json")
	if err := os.WriteFile(file, []byte(`{"agent":{"name":"x","tools":["rm_rf"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Config{KafkaAddr: "127.0.0.1:0", MongoAddr: "127.0.0.1:0", IngestAddr: "127.0.0.1:0", PushgwAddr: "127.0.0.1:0",
		DataDir: filepath.Join(dir, "data")}
	c.MongoDB = "turnpike"
	c.Worker = worker.DefaultConfig()
	c.Worker.AgentFile = file
	err := Run(ctx, c, Listeners{}, slog.New(slog.DiscardHandler), nil)
	if err == nil || !strings.Contains(err.Error(), `unknown tool "rm_rf"`) {
		t.Fatalf("Run = %v, want the agent file's problem", err)
	}
	if strings.Contains(err.Error(), "context canceled") || strings.Count(err.Error(), "\n") != 0 {
		t.Fatalf("Run reported more than the agent file's problem: %q", err)
	}
}

func TestTheDevstackListensOnLoopbackByDefault(t *testing.T) {
	t.Parallel()
	var c Config
	set := flagenv.New(flag.NewFlagSet("devstack", flag.ContinueOnError), func(string) (string, bool) { return "", false })
	c.Bind(set)
	if err := set.Parse(nil); err != nil {
		t.Fatal(err)
	}
	for name, addr := range map[string]string{"ingest": c.IngestAddr, "pushgw": c.PushgwAddr, "kafka": c.KafkaAddr, "mongo": c.MongoAddr} {
		if !loopbackOnly(addr) {
			t.Errorf("%s listens on %q by default, want loopback only", name, addr)
		}
	}
	if c.DevTokensRemote {
		t.Error("dev tokens are served beyond loopback by default")
	}
	st := Stack{IngestAddr: c.IngestAddr, PushgwAddr: c.PushgwAddr}
	if e := st.Exposure(); !strings.Contains(e, "loopback only") || !strings.Contains(e, "TURNPIKE_INGEST_ADDR=0.0.0.0") {
		t.Errorf("banner %q: want it to say the stack is on loopback and how to expose it", e)
	}
	st.IngestAddr = "0.0.0.0:8080"
	if e := st.Exposure(); !strings.Contains(e, "WARNING") {
		t.Errorf("banner %q for an exposed stack: want a warning", e)
	}
}

func TestPageOrigins(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr string
		want []string
	}{
		{"127.0.0.1:8080", []string{"http://localhost:8080", "http://127.0.0.1:8080", "http://[::1]:8080"}},
		{"0.0.0.0:8080", []string{"http://localhost:8080", "http://127.0.0.1:8080", "http://[::1]:8080"}},
		{"192.0.2.7:9000", []string{"http://192.0.2.7:9000"}},
	}
	for _, tt := range tests {
		if got := pageOrigins(tt.addr); !slices.Equal(got, tt.want) {
			t.Errorf("pageOrigins(%q) = %q, want %q", tt.addr, got, tt.want)
		}
	}
}
