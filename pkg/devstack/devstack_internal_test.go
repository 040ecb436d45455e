package devstack

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
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
	c := Config{KafkaAddr: busy[0], MongoAddr: "127.0.0.1:0", IngestAddr: busy[1], PushgwAddr: busy[2], DataDir: dir,
		Logger: slog.New(slog.DiscardHandler), Ready: func(Stack) { t.Error("ready despite busy ports") }}
	err := Run(ctx, c)
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
		DataDir: filepath.Join(dir, "data"), Logger: slog.New(slog.DiscardHandler)}
	c.Worker = worker.DefaultConfig()
	c.Worker.AgentFile = file
	err := Run(ctx, c)
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
	c.bind(set, nil)
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
	if e := st.exposure(); !strings.Contains(e, "loopback only") || !strings.Contains(e, "TURNPIKE_INGEST_ADDR=0.0.0.0") {
		t.Errorf("banner %q: want it to say the stack is on loopback and how to expose it", e)
	}
	st.IngestAddr = "0.0.0.0:8080"
	if e := st.exposure(); !strings.Contains(e, "WARNING") {
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

// The defaults are cmd/devstack's: every listener on loopback.
func TestDefaultConfigIsCmdDevstacks(t *testing.T) {
	var cmd Config
	if _, ok := flagenv.ParseCommand("devstack", nil, func(string) (string, bool) { return "", false }, io.Discard, func(set *flagenv.Set) { cmd.bind(set, nil) }); !ok {
		t.Fatal("parse")
	}
	c := DefaultConfig()
	got := []string{c.IngestAddr, c.PushgwAddr, c.KafkaAddr, c.MongoAddr, c.DataDir, c.DevUser}
	want := []string{cmd.IngestAddr, cmd.PushgwAddr, cmd.KafkaAddr, cmd.MongoAddr, cmd.DataDir, cmd.DevUser}
	if !slices.Equal(got, want) {
		t.Errorf("DefaultConfig: %q, cmd/devstack: %q", got, want)
	}
	for _, a := range got[:4] {
		if host, _, err := net.SplitHostPort(a); err != nil || !net.ParseIP(host).IsLoopback() {
			t.Errorf("default address %q is not on loopback", a)
		}
	}
}

// The banner's "To expose it" line names the ports the stack listens on,
// not cmd/devstack's default ones: a user who moved them (ingest on 39180,
// the gateway on 39181) is told to expose those.
func TestTheBannerTellsHowToExposeThePortsInUse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, ingest, pushgw string
		want                 []string
	}{
		{"Moved ports are the ones to expose.", "127.0.0.1:39180", "127.0.0.1:39181",
			[]string{"TURNPIKE_INGEST_ADDR=0.0.0.0:39180 ", "TURNPIKE_PUSHGW_ADDR=0.0.0.0:39181 ", "TURNPIKE_PUSHGW_ALLOWED_ORIGINS=http://<host>:39180,"}},
		{"The default ports are the ones to expose when they are in use.", "127.0.0.1:8080", "[::1]:8081",
			[]string{"TURNPIKE_INGEST_ADDR=0.0.0.0:8080 ", "TURNPIKE_PUSHGW_ADDR=0.0.0.0:8081 ", "TURNPIKE_PUSHGW_ALLOWED_ORIGINS=http://<host>:8080,"}},
	}
	for _, tt := range tests {
		st := Stack{IngestAddr: tt.ingest, PushgwAddr: tt.pushgw, IngestURL: "http://" + tt.ingest, StreamURL: "ws://" + tt.pushgw + "/v1/stream"}
		b := st.banner()
		for _, w := range tt.want {
			if !strings.Contains(b, w) {
				t.Errorf("%s banner:\n%s\nwant %q", tt.name, b, w)
			}
		}
	}
}
