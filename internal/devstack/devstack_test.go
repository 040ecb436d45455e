package devstack

import "testing"

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
