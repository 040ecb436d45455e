package auth_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/auth"
)

// Claims are decoded exactly: a token an attacker shaped to be read as
// someone else by a case-insensitive or last-duplicate-wins decoder is
// refused.
func TestVerifyDecodesClaimsExactly(t *testing.T) {
	t.Parallel()
	exp := now.Add(time.Hour).Unix()
	const hs256 = `{"alg":"HS256","typ":"JWT"}`
	tests := []struct {
		name    string
		header  string
		payload string
	}{
		{"An upper-case SUB without sub is refused.", hs256, fmt.Sprintf(`{"SUB":"mallory","exp":%d}`, exp)},
		{"A Sub beside sub is refused rather than read as either.", hs256, fmt.Sprintf(`{"sub":"alice","Sub":"mallory","exp":%d}`, exp)},
		{"A duplicated sub is refused.", hs256, fmt.Sprintf(`{"sub":"alice","sub":"mallory","exp":%d}`, exp)},
		{"A duplicated tenant is refused.", hs256, fmt.Sprintf(`{"sub":"alice","tenant":"acme","tenant":"evil","exp":%d}`, exp)},
		{"A duplicated exp is refused.", hs256, fmt.Sprintf(`{"sub":"alice","exp":%d,"exp":%d}`, exp, exp)},
		{"A duplicated unknown claim is refused.", hs256, fmt.Sprintf(`{"sub":"alice","exp":%d,"x":1,"x":2}`, exp)},
		{"An upper-case EXP without exp is refused.", hs256, fmt.Sprintf(`{"sub":"alice","EXP":%d}`, exp)},
		{"exp as a numeric string is refused.", hs256, fmt.Sprintf(`{"sub":"alice","exp":"%d"}`, exp)},
		{"exp as null is refused.", hs256, `{"sub":"alice","exp":null}`},
		{"nbf as a string is refused.", hs256, fmt.Sprintf(`{"sub":"alice","exp":%d,"nbf":"0"}`, exp)},
		{"nbf a minute from now is refused.", hs256, fmt.Sprintf(`{"sub":"alice","exp":%d,"nbf":%d}`, exp, now.Add(time.Minute).Unix())},
		{"iat a minute from now is refused.", hs256, fmt.Sprintf(`{"sub":"alice","exp":%d,"iat":%d}`, exp, now.Add(time.Minute).Unix())},
		{"A crit header is refused.", `{"alg":"HS256","crit":["exp"],"exp":1}`, fmt.Sprintf(`{"sub":"alice","exp":%d}`, exp)},
		{"A duplicated alg in the header is refused.", `{"alg":"none","alg":"HS256"}`, fmt.Sprintf(`{"sub":"alice","exp":%d}`, exp)},
		{"An upper-case ALG without alg is refused.", `{"ALG":"HS256"}`, fmt.Sprintf(`{"sub":"alice","exp":%d}`, exp)},
		{"Trailing data after the claims is refused.", hs256, fmt.Sprintf(`{"sub":"alice","exp":%d}{}`, exp)},
		{"Claims that are an array are refused.", hs256, `["sub","alice"]`},
	}
	v := newVerifier(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := v.Verify(handToken(tt.header, tt.payload, secret))
			if !errors.Is(err, auth.ErrUnauthenticated) {
				t.Fatalf("Verify(%s) = %+v, %v; want ErrUnauthenticated", tt.payload, got, err)
			}
		})
	}
}

func TestVerifyHonoursNbfAndIatWithinTheLeeway(t *testing.T) {
	t.Parallel()
	exp := now.Add(time.Hour).Unix()
	v := newVerifier(t)
	for _, payload := range []string{
		fmt.Sprintf(`{"sub":"alice","exp":%d,"nbf":%d,"iat":%d}`, exp, now.Unix(), now.Unix()),
		fmt.Sprintf(`{"sub":"alice","exp":%d,"nbf":%d,"iat":%d}`, exp, now.Add(auth.Leeway).Unix(), now.Add(auth.Leeway).Unix()),
		fmt.Sprintf(`{"sub":"alice","exp":%d.25}`, exp),
	} {
		if _, err := v.Verify(handToken(`{"alg":"HS256"}`, payload, secret)); err != nil {
			t.Errorf("Verify(%s): %v", payload, err)
		}
	}
}

func TestVerifyTokenReportsTheExpiryToTheMillisecond(t *testing.T) {
	t.Parallel()
	tok, err := auth.Mint(secret, "acme", "alice", 1500*time.Millisecond, now)
	if err != nil {
		t.Fatal(err)
	}
	got, err := newVerifier(t).VerifyToken(tok)
	if err != nil {
		t.Fatal(err)
	}
	if want := now.Add(1500 * time.Millisecond); !got.Expires.Equal(want) || got.Principal != (auth.Principal{Tenant: "acme", User: "alice"}) {
		t.Fatalf("VerifyToken = %+v, want acme/alice expiring %v", got, want)
	}
}

// docs/api.md, Authentication: claim names are case-sensitive, a case
// variant of a claim the verifier reads is refused rather than ignored, and
// no claim may be duplicated. Checked for every claim the verifier reads,
// against a token that is valid without the change.
func TestVerifyRefusesCaseVariantsAndDuplicatesOfEveryClaimItReads(t *testing.T) {
	t.Parallel()
	read := []struct{ name, value string }{
		{"sub", `"alice"`},
		{"tenant", `"acme"`},
		{"exp", fmt.Sprint(now.Add(time.Hour).Unix())},
		{"nbf", fmt.Sprint(now.Unix())},
		{"iat", fmt.Sprint(now.Unix())},
	}
	payload := func(extra string, skip string) string {
		var parts []string
		for _, c := range read {
			if c.name != skip {
				parts = append(parts, fmt.Sprintf("%q:%s", c.name, c.value))
			}
		}
		if extra != "" {
			parts = append(parts, extra)
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	const hs256 = `{"alg":"HS256","typ":"JWT"}`
	v := newVerifier(t)
	// The base token is valid: each refusal below is the change's doing.
	if got, err := v.Verify(handToken(hs256, payload("", ""), secret)); err != nil || got != (auth.Principal{Tenant: "acme", User: "alice"}) {
		t.Fatalf("base token: %+v, %v", got, err)
	}
	type tc struct{ name, payload string }
	var tests []tc
	for _, c := range read {
		for _, variant := range []string{strings.ToUpper(c.name), strings.ToUpper(c.name[:1]) + c.name[1:], c.name[:len(c.name)-1] + strings.ToUpper(c.name[len(c.name)-1:])} {
			tests = append(tests,
				tc{fmt.Sprintf("A %s claim beside %s is refused.", variant, c.name), payload(fmt.Sprintf("%q:%s", variant, c.value), "")},
				tc{fmt.Sprintf("A %s claim instead of %s is refused.", variant, c.name), payload(fmt.Sprintf("%q:%s", variant, c.value), c.name)},
			)
		}
		tests = append(tests, tc{fmt.Sprintf("A %s claim duplicated with the same value is refused.", c.name), payload(fmt.Sprintf("%q:%s", c.name, c.value), "")})
	}
	tests = append(tests,
		tc{"A tenant duplicated with another tenant is refused.", payload(`"tenant":"evil"`, "")},
		tc{"A sub duplicated with another user is refused.", payload(`"sub":"mallory"`, "")},
		tc{"A TENANT claim naming another tenant is refused.", payload(`"TENANT":"evil"`, "tenant")},
		tc{"A tenant duplicated through an escaped name is refused.", payload(`"t\u0065nant":"evil"`, "")},
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := v.Verify(handToken(hs256, tt.payload, secret))
			if !errors.Is(err, auth.ErrUnauthenticated) || got != (auth.Principal{}) {
				t.Fatalf("Verify(%s) = %+v, %v; want ErrUnauthenticated", tt.payload, got, err)
			}
		})
	}
}

// sign signs the two raw segments given as they are (handToken encodes
// its header and payload itself).
func sign(header, payload string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(header + "." + payload))
	return header + "." + payload + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// docs/api.md, Authentication: at most 8 KiB; three segments in strict
// base64url (no padding); typ, if present, is a string.
func TestVerifyChecksTheTokensFormExactly(t *testing.T) {
	t.Parallel()
	exp := now.Add(time.Hour).Unix()
	const hs256 = `{"alg":"HS256","typ":"JWT"}`
	good := fmt.Sprintf(`{"sub":"alice","exp":%d}`, exp)
	// sized is the longest token of at most n bytes (over: the shortest
	// over n), padded with an ignored claim.
	sized := func(n int, over bool) string {
		fixed := len(b64(hs256)) + 1 + 1 + base64.RawURLEncoding.EncodedLen(sha256.Size)
		pad := 0
		claims := func() string {
			return fmt.Sprintf(`{"sub":"alice","exp":%d,"pad":"%s"}`, exp, strings.Repeat("x", pad))
		}
		for fixed+base64.RawURLEncoding.EncodedLen(len(claims())) <= n {
			pad++
		}
		if !over {
			pad--
		}
		return handToken(hs256, claims(), secret)
	}
	largest, over := sized(8<<10, false), sized(8<<10, true)
	valid := handToken(hs256, good, secret)
	parts := strings.Split(valid, ".")
	// The signature is 32 bytes: 43 characters whose last carries 4 bits
	// of it and 2 unused bits, which strict base64url wants zero.
	sig := []byte(parts[2])
	last := strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", sig[len(sig)-1])
	sig[len(sig)-1] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[last|1]
	strayBits := parts[0] + "." + parts[1] + "." + string(sig)
	if last&3 != 0 {
		t.Fatalf("the signature's last character %q already has stray bits", parts[2][len(parts[2])-1])
	}

	if len(largest) > 8<<10 || len(largest) < 8<<10-1 || len(over) <= 8<<10 || len(over) > 8<<10+2 {
		t.Fatalf("padding went wrong: %d and %d bytes", len(largest), len(over))
	}
	xHeader := b64(`{"alg":"HS256","typ":"JWT","x":"??>"}`)
	stdHeader := strings.NewReplacer("-", "+", "_", "/").Replace(xHeader)
	if stdHeader == xHeader {
		t.Fatal("the header has no character that standard base64 spells differently")
	}
	v := newVerifier(t)
	for _, ok := range []struct{ name, token string }{
		{"A token of at most 8 KiB is accepted.", largest},
		{"The base of the malformed tokens below is accepted.", valid},
		{"A typ that is not JWT but a string is accepted.", handToken(`{"alg":"HS256","typ":"at+jwt"}`, good, secret)},
		{"A header member that is ignored is accepted.", sign(xHeader, b64(good))},
	} {
		if _, err := v.Verify(ok.token); err != nil {
			t.Fatalf("%s Verify: %v", ok.name, err)
		}
	}
	tests := []struct{ name, token string }{
		{"A token one byte over 8 KiB is refused.", over},
		{"A signature with its unused bits set is refused.", strayBits},
		{"A header segment with base64 padding is refused.", sign(b64(hs256+" ")+"=", b64(good))},
		{"A claims segment with base64 padding is refused.", sign(b64(hs256), b64(good+" ")+"=")},
		{"A header segment in standard base64 is refused.", sign(stdHeader, b64(good))},
		{"A typ that is a number is refused.", handToken(`{"alg":"HS256","typ":1}`, good, secret)},
		{"A typ that is null is refused.", handToken(`{"alg":"HS256","typ":null}`, good, secret)},
		{"A typ that is an object is refused.", handToken(`{"alg":"HS256","typ":{"t":"JWT"}}`, good, secret)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := v.Verify(tt.token)
			if !errors.Is(err, auth.ErrUnauthenticated) || got != (auth.Principal{}) {
				t.Fatalf("Verify = %+v, %v; want ErrUnauthenticated", got, err)
			}
		})
	}
}

// docs/api.md, Authentication: exp, nbf and iat are seconds since the
// epoch, from the epoch itself (0) to 2^40 (about the year 36812); a date
// outside that range is refused, one at either end accepted.
func TestVerifyTakesDatesFromTheEpochTo2Pow40(t *testing.T) {
	t.Parallel()
	const hs256 = `{"alg":"HS256","typ":"JWT"}`
	exp := now.Add(time.Hour).Unix()
	v := newVerifier(t)
	for _, tt := range []struct {
		name    string
		payload string
		ok      bool
	}{
		{"nbf and iat at the epoch are accepted.", fmt.Sprintf(`{"sub":"alice","exp":%d,"nbf":0,"iat":0}`, exp), true},
		{"exp at 2^40 is accepted.", `{"sub":"alice","exp":1099511627776}`, true},
		{"exp past 2^40 is refused.", `{"sub":"alice","exp":1099511627776.5}`, false},
		{"nbf before the epoch is refused.", fmt.Sprintf(`{"sub":"alice","exp":%d,"nbf":-0.5}`, exp), false},
		{"iat before the epoch is refused.", fmt.Sprintf(`{"sub":"alice","exp":%d,"iat":-1}`, exp), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := v.Verify(handToken(hs256, tt.payload, secret))
			if tt.ok && (err != nil || got.User != "alice") {
				t.Fatalf("Verify(%s) = %+v, %v; want alice", tt.payload, got, err)
			}
			if !tt.ok && !errors.Is(err, auth.ErrUnauthenticated) {
				t.Fatalf("Verify(%s) = %+v, %v; want ErrUnauthenticated", tt.payload, got, err)
			}
		})
	}
}

// A refusal names the member it refuses, clipped after 32 bytes so that an
// attacker's long name does not fill the logs: a name of 32 bytes whole, a
// longer one as its first 32 and an ellipsis.
func TestRefusalsNameTheMemberClippedAfter32Bytes(t *testing.T) {
	t.Parallel()
	const hs256 = `{"alg":"HS256","typ":"JWT"}`
	exp := now.Add(time.Hour).Unix()
	v := newVerifier(t)
	for _, name := range []string{strings.Repeat("x", 32), strings.Repeat("y", 33)} {
		payload := fmt.Sprintf(`{"sub":"alice","exp":%d,%q:1,%q:2}`, exp, name, name)
		_, err := v.Verify(handToken(hs256, payload, secret))
		want := fmt.Sprintf("duplicate member %q", name)
		if len(name) > 32 {
			want = fmt.Sprintf("duplicate member %q", name[:32]+"…")
		}
		if !errors.Is(err, auth.ErrUnauthenticated) || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("a duplicated %d-byte member: %v, want it to end with %s", len(name), err, want)
		}
	}
}

// Mint writes exp as an integer when it falls on a whole second, and with
// milliseconds only when it does not.
func TestMintWritesExpAsAnIntegerOnAWholeSecond(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		ttl  time.Duration
		want string
	}{
		{time.Hour, fmt.Sprintf(`"exp":%d,`, now.Add(time.Hour).Unix())},
		{1500 * time.Millisecond, fmt.Sprintf(`"exp":%d.500,`, now.Unix()+1)},
	} {
		tok, err := auth.Mint(secret, auth.DefaultTenant, "alice", tt.ttl, now)
		if err != nil {
			t.Fatal(err)
		}
		payload, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(payload), tt.want) {
			t.Errorf("Mint(ttl %v) payload %s, want it to hold %s", tt.ttl, payload, tt.want)
		}
	}
}
