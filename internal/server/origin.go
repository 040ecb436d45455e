package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// OriginPolicy decides which browser origins may call an endpoint: only
// those configured, never by the request's Host header (which a DNS
// rebinding attack controls). It is read-only after NewOriginPolicy and safe
// for concurrent use.
type OriginPolicy struct {
	any      bool
	exact    map[string]bool // "scheme://host[:port]", lower case
	suffixes []originSuffix  // "scheme://*.domain"
}

type originSuffix struct {
	scheme   string
	domain   string // ".example.com", or ".example.com:8443" with a port
	withPort bool
}

// NewOriginPolicy parses a list of allowed origins:
// "https://app.example.com" (scheme, host and optional port, exactly),
// "https://*.example.com" (any subdomain, any port unless the entry names
// one), or "*" (any origin). It reports every malformed entry.
func NewOriginPolicy(list []string) (OriginPolicy, error) {
	p := OriginPolicy{exact: make(map[string]bool)}
	var errs []error
	for _, entry := range list {
		if entry == "*" {
			p.any = true
			continue
		}
		u, err := url.Parse(strings.ToLower(entry))
		if err != nil || u.Scheme == "" || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			errs = append(errs, fmt.Errorf("allowed origin %q: want scheme://host[:port], scheme://*.domain or *", entry))
			continue
		}
		if domain, ok := strings.CutPrefix(u.Host, "*."); ok {
			if domain == "" || strings.Contains(domain, "*") {
				errs = append(errs, fmt.Errorf("allowed origin %q: a wildcard must be followed by a domain", entry))
				continue
			}
			p.suffixes = append(p.suffixes, originSuffix{scheme: u.Scheme, domain: "." + domain, withPort: u.Port() != ""})
			continue
		}
		if strings.Contains(u.Host, "*") {
			errs = append(errs, fmt.Errorf("allowed origin %q: a wildcard may only start the host", entry))
			continue
		}
		p.exact[u.Scheme+"://"+u.Host] = true
	}
	return p, errors.Join(errs...)
}

// Allowed reports whether r may proceed: it has no Origin header (it is not
// from a browser), or the policy lists its origin.
func (p OriginPolicy) Allowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if p.any {
		return true
	}
	u, err := url.Parse(strings.ToLower(origin))
	if err != nil || u.Scheme == "" || u.Host == "" {
		return false // "null" (sandboxed or file: pages) included
	}
	if p.exact[u.Scheme+"://"+u.Host] {
		return true
	}
	for _, s := range p.suffixes {
		host := u.Hostname()
		if s.withPort {
			host = u.Host
		}
		if u.Scheme == s.scheme && strings.HasSuffix(host, s.domain) {
			return true
		}
	}
	return false
}
