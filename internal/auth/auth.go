package auth

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// DefaultTenant is the tenant of a token without a tenant claim.
const DefaultTenant = "default"

// MinSecretBytes is the shortest secret accepted: HS256 wants at least 256 bits.
const MinSecretBytes = 32

// ErrUnauthenticated is wrapped by every verification failure.
var ErrUnauthenticated = errors.New("unauthenticated")

// Principal is the verified caller: the first two parts of every identity.
type Principal struct {
	Tenant string
	User   string
}

// Identity binds the principal to a conversation.
func (p Principal) Identity(conversation string) events.Identity {
	return events.Identity{Tenant: p.Tenant, User: p.User, Conversation: conversation}
}

// Verifier checks tokens signed with one shared secret.
type Verifier struct {
	secret []byte
	now    func() time.Time
}

// NewVerifier returns a verifier for secret. now may be nil (time.Now).
func NewVerifier(secret string, now func() time.Time) (*Verifier, error) {
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("auth secret: %d bytes, at least %d required", len(secret), MinSecretBytes)
	}
	if now == nil {
		now = time.Now
	}
	return &Verifier{secret: []byte(secret), now: now}, nil
}

type claims struct {
	Tenant string `json:"tenant,omitempty"`
	jwt.RegisteredClaims
}

// Verify checks the signature (HS256 only), expiry and claims of token.
func (v *Verifier) Verify(token string) (Principal, error) {
	if token == "" {
		return Principal{}, fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	var c claims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return v.secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(v.now),
	)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	p := Principal{Tenant: c.Tenant, User: c.Subject}
	if p.Tenant == "" {
		p.Tenant = DefaultTenant
	}
	if p.User == "" {
		return Principal{}, fmt.Errorf("%w: token has no sub", ErrUnauthenticated)
	}
	if err := errors.Join(events.ValidateID("sub", p.User), events.ValidateID("tenant", p.Tenant)); err != nil {
		return Principal{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	return p, nil
}

// Mint signs a token for tenant/user valid for ttl. The devstack uses it to
// print a ready dev token; tests use it too.
func Mint(secret, tenant, user string, ttl time.Duration, now time.Time) (string, error) {
	c := claims{RegisteredClaims: jwt.RegisteredClaims{
		Subject:   user,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	if tenant != DefaultTenant {
		c.Tenant = tenant
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(secret))
	if err != nil {
		return "", fmt.Errorf("mint token: %w", err)
	}
	return s, nil
}

// BearerToken returns the token of an "Authorization: Bearer <jwt>" header.
// With allowQuery, a browser's "?access_token=<jwt>" is accepted too (the
// WebSocket upgrade, where browsers cannot set headers).
func BearerToken(r *http.Request, allowQuery bool) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	if allowQuery {
		return r.URL.Query().Get("access_token")
	}
	return ""
}
