package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// DefaultTenant is the tenant of a token without a tenant claim.
const DefaultTenant = "default"

// MinSecretBytes is the shortest secret accepted: HS256 wants at least 256 bits.
const MinSecretBytes = 32

// Leeway is the clock skew allowed on nbf and iat: a token issued (or valid
// from) up to this far in the future is accepted. exp gets none.
const Leeway = 30 * time.Second

// maxTokenBytes bounds a token before it is decoded.
const maxTokenBytes = 8 << 10

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

// Token is a verified token: its principal and when it expires.
type Token struct {
	Principal
	Expires time.Time
}

// Verifier checks tokens signed with one shared secret. It is safe for
// concurrent use.
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

// Verify checks token (see VerifyToken) and returns its principal.
func (v *Verifier) Verify(token string) (Principal, error) {
	t, err := v.VerifyToken(token)
	return t.Principal, err
}

// VerifyToken checks a compact JWS: the header exactly {"alg":"HS256"} and
// optionally "typ" (no "crit", no duplicate member); the HMAC-SHA256
// signature under the secret; and the claims, decoded exactly: names are
// case-sensitive, a duplicated name is refused, "sub" (required) and
// "tenant" (optional, default DefaultTenant) are strings under the ID rule,
// "exp" (required), "nbf" and "iat" (optional) are JSON numbers, and a
// case variant of one of these names ("SUB") is refused. exp must be
// in the future; nbf and iat no further in the future than Leeway. Other
// claims are ignored. Every failure wraps ErrUnauthenticated.
func (v *Verifier) VerifyToken(token string) (Token, error) {
	t, err := v.verify(token)
	if err != nil {
		return Token{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	return t, nil
}

func (v *Verifier) verify(token string) (Token, error) {
	if token == "" {
		return Token{}, errors.New("no bearer token")
	}
	if len(token) > maxTokenBytes {
		return Token{}, fmt.Errorf("token over %d bytes", maxTokenBytes)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return Token{}, errors.New("token is not three dot-separated segments")
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil {
		return Token{}, errors.New("signature is not base64url")
	}
	mac := hmac.New(sha256.New, v.secret)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	if !hmac.Equal(sig, mac.Sum(nil)) {
		return Token{}, errors.New("bad signature")
	}
	header, err := decodeSegment("header", parts[0])
	if err != nil {
		return Token{}, err
	}
	if err := checkHeader(header); err != nil {
		return Token{}, err
	}
	payload, err := decodeSegment("claims", parts[1])
	if err != nil {
		return Token{}, err
	}
	c, err := decodeClaims(payload)
	if err != nil {
		return Token{}, err
	}
	now := v.now()
	switch {
	case c.exp == nil:
		return Token{}, errors.New("token has no exp")
	case !now.Before(*c.exp):
		return Token{}, errors.New("token has expired")
	case c.nbf != nil && c.nbf.After(now.Add(Leeway)):
		return Token{}, errors.New("token is not valid yet (nbf)")
	case c.iat != nil && c.iat.After(now.Add(Leeway)):
		return Token{}, errors.New("token is issued in the future (iat)")
	case c.sub == nil || *c.sub == "":
		return Token{}, errors.New("token has no sub")
	}
	p := Principal{Tenant: DefaultTenant, User: *c.sub}
	if c.tenant != nil && *c.tenant != "" {
		p.Tenant = *c.tenant
	}
	if err := errors.Join(events.ValidateID("sub", p.User), events.ValidateID("tenant", p.Tenant)); err != nil {
		return Token{}, err
	}
	return Token{Principal: p, Expires: *c.exp}, nil
}

// b64 is the strict base64url of JWS: no padding, no stray bits.
var b64 = base64.RawURLEncoding.Strict()

func decodeSegment(name, s string) ([]byte, error) {
	b, err := b64.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%s is not base64url", name)
	}
	return b, nil
}

// members decodes a JSON object, calling member for each name with a
// decoder positioned at its value; member must consume the value. A
// duplicated name, data after the object or invalid JSON is an error.
func members(b []byte, member func(name string, dec *json.Decoder) error) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("not a JSON object")
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return errors.New("invalid JSON")
		}
		name, _ := tok.(string)
		if seen[name] {
			return fmt.Errorf("duplicate member %q", clip(name))
		}
		seen[name] = true
		if err := member(name, dec); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return errors.New("invalid JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON object")
	}
	return nil
}

// checkHeader accepts {"alg":"HS256"} with an optional string "typ" and
// nothing else that matters: "crit" (extensions we do not implement) is
// refused, and so are other algorithms.
func checkHeader(b []byte) error {
	var alg *string
	err := members(b, func(name string, dec *json.Decoder) error {
		switch name {
		case "alg":
			s, err := stringValue(dec, name)
			alg = &s
			return err
		case "typ":
			_, err := stringValue(dec, name)
			return err
		case "crit":
			return errors.New("header has crit: no extension is supported")
		}
		return skipValue(dec)
	})
	if err != nil {
		return fmt.Errorf("header: %w", err)
	}
	if alg == nil || *alg != "HS256" {
		return errors.New("header: alg must be HS256")
	}
	return nil
}

type tokenClaims struct {
	sub, tenant   *string
	exp, nbf, iat *time.Time
}

func decodeClaims(b []byte) (tokenClaims, error) {
	var c tokenClaims
	err := members(b, func(name string, dec *json.Decoder) error {
		var err error
		switch name {
		case "sub":
			c.sub, err = stringPtr(dec, name)
		case "tenant":
			c.tenant, err = stringPtr(dec, name)
		case "exp":
			c.exp, err = numericDate(dec, name)
		case "nbf":
			c.nbf, err = numericDate(dec, name)
		case "iat":
			c.iat, err = numericDate(dec, name)
		default:
			for _, known := range []string{"sub", "tenant", "exp", "nbf", "iat"} {
				if strings.EqualFold(name, known) {
					return fmt.Errorf("claim %q is not %q: claim names are case-sensitive", clip(name), known)
				}
			}
			err = skipValue(dec)
		}
		return err
	})
	if err != nil {
		return c, fmt.Errorf("claims: %w", err)
	}
	return c, nil
}

func stringValue(dec *json.Decoder, name string) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", errors.New("invalid JSON")
	}
	s, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("%s must be a string", name)
	}
	return s, nil
}

func stringPtr(dec *json.Decoder, name string) (*string, error) {
	s, err := stringValue(dec, name)
	return &s, err
}

// numericDate reads a NumericDate: a JSON number of seconds since the epoch,
// fractions allowed.
func numericDate(dec *json.Decoder, name string) (*time.Time, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, errors.New("invalid JSON")
	}
	n, ok := tok.(json.Number)
	if !ok {
		return nil, fmt.Errorf("%s must be a number", name)
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) || f < 0 || f > 1<<40 {
		return nil, fmt.Errorf("%s is out of range", name)
	}
	sec, frac := math.Modf(f)
	t := time.Unix(int64(sec), int64(frac*1e9))
	return &t, nil
}

// skipValue consumes one JSON value of any kind.
func skipValue(dec *json.Decoder) error {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return errors.New("invalid JSON")
	}
	return nil
}

func clip(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// Mint signs a token for tenant/user valid for ttl from now: claims sub,
// tenant (omitted for DefaultTenant), iat and exp. exp keeps sub-second
// precision when ttl has it. The devstack uses it to print a ready dev
// token; a team's sign-in service mints its users' tokens with it.
func Mint(secret, tenant, user string, ttl time.Duration, now time.Time) (string, error) {
	if len(secret) < MinSecretBytes {
		return "", fmt.Errorf("mint token: secret of %d bytes, at least %d required", len(secret), MinSecretBytes)
	}
	exp := now.Add(ttl)
	c := map[string]any{"sub": user, "iat": now.Unix(), "exp": numericDateValue(exp)}
	if tenant != DefaultTenant {
		c["tenant"] = tenant
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("mint token: %w", err)
	}
	signing := b64.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + b64.EncodeToString(payload)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(signing))
	return signing + "." + b64.EncodeToString(mac.Sum(nil)), nil
}

// numericDateValue is t in whole seconds when it has no fraction, else in
// seconds with millisecond precision.
func numericDateValue(t time.Time) any {
	if t.UnixMilli()%1000 == 0 {
		return t.Unix()
	}
	return json.Number(strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64))
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
