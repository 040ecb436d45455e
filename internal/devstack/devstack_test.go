package devstack

import (
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
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
