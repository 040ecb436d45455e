package auth_test

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/turnpike-dev/turnpike/pkg/auth"
)

const secret = "0123456789abcdef0123456789abcdef" // 32 bytes, the minimum

var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func b64(v string) string { return base64.RawURLEncoding.EncodeToString([]byte(v)) }

// handToken builds a compact JWT from raw header and payload JSON, signed
// with HMAC-SHA256 under key, without going through the JWT library.
func handToken(header, payload, key string) string {
	signing := b64(header) + "." + b64(payload)
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(signing))
	return signing + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func claims(kv map[string]any) string {
	b, err := json.Marshal(kv)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func libToken(t *testing.T, m jwt.SigningMethod, key any, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, c).SignedString(key)
	if err != nil {
		t.Fatalf("sign %s: %v", m.Alg(), err)
	}
	return s
}

func newVerifier(t testing.TB) *auth.Verifier {
	t.Helper()
	v, err := auth.NewVerifier(secret, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVerifyAcceptsGoodTokens(t *testing.T) {
	t.Parallel()
	exp := now.Add(time.Hour).Unix()
	const hs256 = `{"alg":"HS256","typ":"JWT"}`
	minted, err := auth.Mint(secret, "acme", "alice", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	mintedDefault, err := auth.Mint(secret, auth.DefaultTenant, "bob", time.Minute, now)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		token string
		want  auth.Principal
	}{
		{"A minted token yields its tenant and user.", minted, auth.Principal{Tenant: "acme", User: "alice"}},
		{"A minted token for the default tenant yields the default tenant.", mintedDefault, auth.Principal{Tenant: "default", User: "bob"}},
		{"A hand-signed HS256 token is accepted.", handToken(hs256, claims(map[string]any{"sub": "alice", "tenant": "acme", "exp": exp}), secret),
			auth.Principal{Tenant: "acme", User: "alice"}},
		{"A token without a tenant claim gets the default tenant.", handToken(hs256, claims(map[string]any{"sub": "alice", "exp": exp}), secret),
			auth.Principal{Tenant: auth.DefaultTenant, User: "alice"}},
		{"An empty tenant claim means the default tenant.", handToken(hs256, claims(map[string]any{"sub": "alice", "tenant": "", "exp": exp}), secret),
			auth.Principal{Tenant: auth.DefaultTenant, User: "alice"}},
		{"A header without typ is accepted.", handToken(`{"alg":"HS256"}`, claims(map[string]any{"sub": "alice", "exp": exp}), secret),
			auth.Principal{Tenant: auth.DefaultTenant, User: "alice"}},
		{"A token expiring in one second is accepted.", handToken(hs256, claims(map[string]any{"sub": "alice", "exp": now.Unix() + 1}), secret),
			auth.Principal{Tenant: auth.DefaultTenant, User: "alice"}},
		{"A sub using every allowed punctuation byte is accepted.", handToken(hs256, claims(map[string]any{"sub": "a.b_c:d@e-f", "exp": exp}), secret),
			auth.Principal{Tenant: auth.DefaultTenant, User: "a.b_c:d@e-f"}},
		{"Unrelated claims are ignored.", handToken(hs256, claims(map[string]any{"sub": "alice", "exp": exp, "iat": now.Unix(), "aud": "x", "name": "Alice"}), secret),
			auth.Principal{Tenant: auth.DefaultTenant, User: "alice"}},
	}
	v := newVerifier(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := v.Verify(tt.token)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if got != tt.want {
				t.Fatalf("Verify = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestVerifyRejectsBadTokens(t *testing.T) {
	t.Parallel()
	exp := now.Add(time.Hour).Unix()
	good := map[string]any{"sub": "alice", "tenant": "acme", "exp": exp}
	const hs256 = `{"alg":"HS256","typ":"JWT"}`
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	valid := handToken(hs256, claims(good), secret)
	parts := strings.Split(valid, ".")
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for kk, vv := range good {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name  string
		token string
	}{
		{"An empty token is rejected.", ""},
		{"Garbage is rejected.", "not-a-jwt"},
		{"Three empty segments are rejected.", ".."},
		{"Three garbage segments are rejected.", "a.b.c"},
		{"A token with the Bearer prefix still on is rejected.", "Bearer " + valid},
		{"A token with a fourth segment is rejected.", valid + ".x"},
		{"A token without its signature is rejected.", parts[0] + "." + parts[1] + "."},
		{"A header that is not JSON is rejected.", b64("{") + "." + parts[1] + "." + parts[2]},
		{"A missing sub is rejected.", handToken(hs256, claims(with("sub", nil)), secret)},
		{"An empty sub is rejected.", handToken(hs256, claims(with("sub", "")), secret)},
		{"A numeric sub is rejected.", handToken(hs256, claims(with("sub", 42)), secret)},
		{"A sub with a slash is rejected.", handToken(hs256, claims(with("sub", "alice/bob")), secret)},
		{"A sub with a space is rejected.", handToken(hs256, claims(with("sub", "alice smith")), secret)},
		{"A sub with unicode is rejected.", handToken(hs256, claims(with("sub", "alicé")), secret)},
		{"A sub of 129 bytes is rejected.", handToken(hs256, claims(with("sub", strings.Repeat("a", 129))), secret)},
		{"A tenant breaking the ID rule is rejected.", handToken(hs256, claims(with("tenant", "ac/me")), secret)},
		{"A numeric tenant is rejected.", handToken(hs256, claims(with("tenant", 7)), secret)},
		{"A token without exp is rejected.", handToken(hs256, claims(with("exp", nil)), secret)},
		{"A token that expired a second ago is rejected.", handToken(hs256, claims(with("exp", now.Unix()-1)), secret)},
		{"A token expiring right now is rejected.", handToken(hs256, claims(with("exp", now.Unix())), secret)},
		{"A token with exp as a string is rejected.", handToken(hs256, claims(with("exp", "tomorrow")), secret)},
		{"A token not valid before an hour from now is rejected.", handToken(hs256, claims(with("nbf", now.Add(time.Hour).Unix())), secret)},
		{"alg none without a signature is rejected.", b64(`{"alg":"none","typ":"JWT"}`) + "." + b64(claims(good)) + "."},
		{"alg None without a signature is rejected.", b64(`{"alg":"None","typ":"JWT"}`) + "." + b64(claims(good)) + "."},
		{"alg none with an HMAC signature is rejected.", handToken(`{"alg":"none","typ":"JWT"}`, claims(good), secret)},
		{"A header without alg is rejected.", handToken(`{"typ":"JWT"}`, claims(good), secret)},
		{"alg hs256 in lowercase is rejected.", handToken(`{"alg":"hs256","typ":"JWT"}`, claims(good), secret)},
		{"HS384 signed with the right secret is rejected.", libToken(t, jwt.SigningMethodHS384, []byte(secret), jwt.MapClaims(good))},
		{"HS512 signed with the right secret is rejected.", libToken(t, jwt.SigningMethodHS512, []byte(secret), jwt.MapClaims(good))},
		{"RS256 signed with an RSA key is rejected.", libToken(t, jwt.SigningMethodRS256, rsaKey, jwt.MapClaims(good))},
		{"An RS256 header over an HMAC signature with the secret is rejected.", handToken(`{"alg":"RS256","typ":"JWT"}`, claims(good), secret)},
		{"A token signed with another secret is rejected.", handToken(hs256, claims(good), strings.Repeat("x", 32))},
		{"A token signed with a prefix of the secret is rejected.", handToken(hs256, claims(good), secret[:31])},
		{"A payload changed after signing is rejected.", parts[0] + "." + b64(claims(with("sub", "mallory"))) + "." + parts[2]},
		{"A header changed after signing is rejected.", b64(`{"alg":"HS256"}`) + "." + parts[1] + "." + parts[2]},
		{"A signature with a flipped byte is rejected.", parts[0] + "." + parts[1] + "." + flipFirst(parts[2])},
	}
	v := newVerifier(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := v.Verify(tt.token)
			if err == nil {
				t.Fatalf("Verify(%q) = %+v, want an error", tt.token, got)
			}
			if !errors.Is(err, auth.ErrUnauthenticated) {
				t.Errorf("Verify error %v does not wrap ErrUnauthenticated", err)
			}
			if got != (auth.Principal{}) {
				t.Errorf("Verify returned %+v with an error, want the zero Principal", got)
			}
		})
	}
	// The table's valid base token really is valid: the rejections above
	// are caused by the changes, not by the base.
	if _, err := v.Verify(valid); err != nil {
		t.Fatalf("base token: %v", err)
	}
}

func flipFirst(s string) string {
	b := []byte(s)
	if b[0] == 'A' {
		b[0] = 'B'
	} else {
		b[0] = 'A'
	}
	return string(b)
}

func TestVerifyUsesTheInjectedClock(t *testing.T) {
	t.Parallel()
	token, err := auth.Mint(secret, "acme", "alice", time.Minute, now)
	if err != nil {
		t.Fatal(err)
	}
	clock := now
	v, err := auth.NewVerifier(secret, func() time.Time { return clock })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(token); err != nil {
		t.Fatalf("Verify before expiry: %v", err)
	}
	clock = now.Add(2 * time.Minute)
	if _, err := v.Verify(token); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("Verify after expiry = %v, want ErrUnauthenticated", err)
	}
}

func TestNewVerifier(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		secret string
		ok     bool
	}{
		{"An empty secret is rejected.", "", false},
		{"A 31-byte secret is rejected.", strings.Repeat("s", 31), false},
		{"A 32-byte secret is accepted.", strings.Repeat("s", 32), true},
		{"A 64-byte secret is accepted.", strings.Repeat("s", 64), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := auth.NewVerifier(tt.secret, nil)
			if tt.ok != (err == nil) {
				t.Fatalf("NewVerifier(%d bytes) error = %v, want ok=%v", len(tt.secret), err, tt.ok)
			}
			if tt.ok != (v != nil) {
				t.Fatalf("NewVerifier(%d bytes) verifier = %v, want ok=%v", len(tt.secret), v, tt.ok)
			}
			if err != nil && strings.Contains(err.Error(), tt.secret) && tt.secret != "" {
				t.Errorf("error %q leaks the secret", err)
			}
		})
	}
}

func TestNewVerifierWithNilClockUsesWallTime(t *testing.T) {
	t.Parallel()
	v, err := auth.NewVerifier(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := auth.Mint(secret, "acme", "alice", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(fresh); err != nil {
		t.Errorf("a token valid for the next hour: %v", err)
	}
	stale, err := auth.Mint(secret, "acme", "alice", time.Hour, time.Now().Add(-2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(stale); err == nil {
		t.Error("a token that expired an hour ago was accepted")
	}
}

func TestMintOmitsTheDefaultTenant(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		tenant     string
		wantTenant bool
	}{{auth.DefaultTenant, false}, {"acme", true}} {
		token, err := auth.Mint(secret, tt.tenant, "alice", time.Hour, now)
		if err != nil {
			t.Fatal(err)
		}
		payload, err := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[1])
		if err != nil {
			t.Fatal(err)
		}
		var c map[string]any
		if err := json.Unmarshal(payload, &c); err != nil {
			t.Fatal(err)
		}
		if _, has := c["tenant"]; has != tt.wantTenant {
			t.Errorf("Mint(tenant %q) payload %s: tenant claim present = %v, want %v", tt.tenant, payload, has, tt.wantTenant)
		}
		if c["sub"] != "alice" || c["exp"] != float64(now.Add(time.Hour).Unix()) {
			t.Errorf("Mint payload %s: want sub alice and exp in an hour", payload)
		}
	}
}

func TestPrincipalIdentity(t *testing.T) {
	t.Parallel()
	id := auth.Principal{Tenant: "acme", User: "alice"}.Identity("c1")
	if id.Key() != "acme/alice/c1" {
		t.Fatalf("Identity(c1).Key() = %q", id.Key())
	}
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		header     string // Authorization; "" for none
		query      string
		allowQuery bool
		want       string
	}{
		{"A Bearer header yields its token.", "Bearer tok", "", false, "tok"},
		{"The scheme is case-insensitive in lowercase.", "bearer tok", "", false, "tok"},
		{"The scheme is case-insensitive in uppercase.", "BEARER tok", "", false, "tok"},
		{"Extra spaces around the token are trimmed.", "Bearer   tok  ", "", false, "tok"},
		{"A token without a scheme is refused.", "tok", "", false, ""},
		{"The scheme alone is refused.", "Bearer", "", false, ""},
		{"The scheme and a space alone yield nothing.", "Bearer ", "", false, ""},
		{"Another scheme is refused.", "Basic dXNlcjpwYXNz", "", false, ""},
		{"A scheme that merely starts with Bearer is refused.", "Bearerx tok", "", false, ""},
		{"A query token is ignored when not allowed.", "", "access_token=qtok", false, ""},
		{"A query token is used when allowed.", "", "access_token=qtok", true, "qtok"},
		{"A query token is URL-decoded.", "", "access_token=a%2Eb%2Ec", true, "a.b.c"},
		{"An empty query token yields nothing.", "", "access_token=", true, ""},
		{"Another query parameter is not a token.", "", "token=qtok", true, ""},
		{"The header wins over the query.", "Bearer htok", "access_token=qtok", true, "htok"},
		{"A non-Bearer header is not replaced by the query token.", "Basic x", "access_token=qtok", true, ""},
		{"No header and no query yield nothing.", "", "", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "/v1/stream?"+tt.query, nil)
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			if got := auth.BearerToken(r, tt.allowQuery); got != tt.want {
				t.Fatalf("BearerToken = %q, want %q", got, tt.want)
			}
		})
	}
}
