package pushgw

import (
	"net/http/httptest"
	"testing"

	"github.com/turnpike-dev/turnpike/internal/server"
)

func TestOriginPolicy(t *testing.T) {
	t.Parallel()
	list := []string{"https://app.example.com", "http://localhost:3000", "https://*.example.org"}
	tests := []struct {
		name   string
		list   []string
		host   string
		origin string
		ok     bool
	}{
		{"A client without Origin (not a browser) is allowed.", nil, "gw.example.com", "", true},
		{"A page of the Host header's name is refused: DNS rebinding controls Host.", nil, "evil.example", "http://evil.example", false},
		{"A page of the same host on another port is refused unless listed.", nil, "localhost:8081", "http://localhost:8080", false},
		{"Listed host names compare without case.", []string{"https://GW.example.com"}, "gw.example.com", "https://gw.EXAMPLE.com", true},
		{"A foreign page is refused by default.", nil, "gw.example.com", "https://evil.example.net", false},
		{"A listed origin is allowed.", list, "gw.example.com", "https://app.example.com", true},
		{"A listed origin's host with another scheme is refused.", list, "gw.example.com", "http://app.example.com", false},
		{"A listed origin's host with another port is refused.", list, "gw.example.com", "http://localhost:3001", false},
		{"A listed origin with its port is allowed.", list, "gw.example.com", "http://localhost:3000", true},
		{"A subdomain of a wildcard entry is allowed.", list, "gw.example.com", "https://a.b.example.org", true},
		{"The wildcard's domain itself is not a subdomain.", list, "gw.example.com", "https://example.org", false},
		{"A look-alike domain is refused.", list, "gw.example.com", "https://evilexample.org", false},
		{"The null origin of sandboxed pages is refused.", list, "gw.example.com", "null", false},
		{"A star allows every origin.", []string{"*"}, "gw.example.com", "https://anything.test", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := server.NewOriginPolicy(tt.list)
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/v1/stream", nil)
			r.Host = tt.host
			if tt.origin != "" {
				r.Header.Set("Origin", tt.origin)
			}
			if got := p.Allowed(r); got != tt.ok {
				t.Fatalf("allowed = %v, want %v", got, tt.ok)
			}
		})
	}
}

func TestOriginPolicyRefusesMalformedEntries(t *testing.T) {
	t.Parallel()
	for _, entry := range []string{"example.com", "https://", "https://a.example.com/path", "https://a.*.example.com", "https://*.", "https://example.com?x=1"} {
		if _, err := server.NewOriginPolicy([]string{entry}); err == nil {
			t.Errorf("entry %q was accepted", entry)
		}
	}
}
