package pushgw

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// originPolicy decides which browser origins may open a WebSocket (see
// Config.AllowedOrigins). It is read-only after newOriginPolicy.
//
// Tokens, not cookies, authenticate, so a foreign page gains nothing it
// does not already hold a token for; the policy is defence in depth that
// keeps other sites from using a visitor's browser as a client.
type originPolicy struct {
	any      bool
	exact    map[string]bool // "scheme://host[:port]", lower case
	suffixes []originSuffix  // "scheme://*.domain"
}

type originSuffix struct {
	scheme   string
	domain   string // ".example.com", or ".example.com:8443" with a port
	withPort bool
}

// newOriginPolicy parses Config.AllowedOrigins.
func newOriginPolicy(list []string) (originPolicy, error) {
	p := originPolicy{exact: make(map[string]bool)}
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

// allowed reports whether r may upgrade: it has no Origin header, or its
// origin has r's host name, or the policy lists it.
func (p originPolicy) allowed(r *http.Request) bool {
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
	if u.Hostname() == hostName(r.Host) {
		return true
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

// hostName returns the lower-case host of a Host header, without its port.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.ToLower(strings.Trim(host, "[]"))
}
