package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/auth"
)

const devTokenURL = "/v1/dev/token"

// devMinter mints real tokens with the test secret and clock.
func devMinter(user string) (string, error) {
	return auth.Mint(testSecret, auth.DefaultTenant, user, time.Hour, testNow)
}

func withMinter(mint func(string) (string, error)) func(*serviceDeps) {
	return func(d *serviceDeps) { d.MintToken = mint }
}

func TestDevTokensAreOffByDefault(t *testing.T) {
	t.Parallel()
	// Even with a minter at hand, only the config flag turns the route on.
	s := newTestServiceWith(t, Config{}, nil, nil, nil, withMinter(devMinter))
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		w := s.do(method, devTokenURL, "", `{"user":"alice"}`, nil)
		checkError(t, w, http.StatusNotFound, server.CodeNotFound)
	}
}

func TestNewRefusesDevTokensWithoutAMinter(t *testing.T) {
	t.Parallel()
	s := newTestService(t, Config{}, nil, nil, nil)
	_, err := newService(Config{DevTokens: true}, serviceDeps{Verifier: s.verifier, Producer: s.producer, History: s.history})
	if err == nil || !strings.Contains(err.Error(), "minter") {
		t.Fatalf("New: %v, want an error about the missing minter", err)
	}
}

func TestDevTokenMintsAWorkingTokenForTheDefaultTenant(t *testing.T) {
	t.Parallel()
	h := &fakeHistory{}
	s := newTestServiceWith(t, Config{DevTokens: true}, nil, h, nil, withMinter(devMinter))
	w := s.do(http.MethodPost, devTokenURL, "", `{"user":"alice.b@example"}`, map[string]string{"Content-Type": "application/json"})
	if w.Code != http.StatusOK {
		t.Fatalf("status %d; body %s", w.Code, w.Body)
	}
	var got devTokenJSON
	if err := decodeStrictJSON(w.Body.Bytes(), &got); err != nil {
		t.Fatalf("body %s: %v", w.Body, err)
	}
	if got.Tenant != "default" || got.User != "alice.b@example" || got.Token == "" {
		t.Fatalf("body %+v: want the token of default/alice.b@example", got)
	}
	p, err := s.verifier.Verify(got.Token)
	if err != nil || p != (auth.Principal{Tenant: "default", User: "alice.b@example"}) {
		t.Fatalf("Verify(minted) = %+v, %v", p, err)
	}
	// The token works on the API as that user.
	if w := s.do(http.MethodGet, conversationsURL, got.Token, "", nil); w.Code != http.StatusOK {
		t.Fatalf("GET /v1/conversations with the minted token: %d %s", w.Code, w.Body)
	}
	if c, _ := h.lastConvCall(t); c.tenant != "default" || c.user != "alice.b@example" {
		t.Errorf("Conversations(%+v): want the minted identity", c)
	}
}

func TestDevTokenRejectsBadRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		method      string
		body        string
		contentType string
		status      int
		code        string
	}{
		{"An empty body is rejected.", http.MethodPost, "", "", 400, server.CodeInvalidArgument},
		{"A body that is not an object is rejected.", http.MethodPost, `"alice"`, "", 400, server.CodeInvalidArgument},
		{"An unknown field is rejected.", http.MethodPost, `{"user":"alice","tenant":"acme"}`, "", 400, server.CodeInvalidArgument},
		{"Trailing data is rejected.", http.MethodPost, `{"user":"alice"} {}`, "", 400, server.CodeInvalidArgument},
		{"A duplicated user is rejected, not the last one taken.", http.MethodPost, `{"user":"alice","user":"bob"}`, "", 400, server.CodeInvalidArgument},
		{"Field names are case-sensitive.", http.MethodPost, `{"User":"alice"}`, "", 400, server.CodeInvalidArgument},
		{"Invalid UTF-8 is rejected.", http.MethodPost, "{\"user\":\"al\xffice\"}", "", 400, server.CodeInvalidArgument},
		{"A missing user is rejected.", http.MethodPost, `{}`, "", 400, server.CodeInvalidArgument},
		{"A user breaking the ID rule is rejected.", http.MethodPost, `{"user":"al ice"}`, "", 400, server.CodeInvalidArgument},
		{"A user over 128 bytes is rejected.", http.MethodPost, `{"user":"` + strings.Repeat("a", 129) + `"}`, "", 400, server.CodeInvalidArgument},
		{"A non-JSON Content-Type is rejected.", http.MethodPost, `{"user":"alice"}`, "text/plain", 400, server.CodeInvalidArgument},
		{"A form POST is rejected: only JSON needs a CORS preflight.", http.MethodPost, `{"user":"alice"}`, "application/x-www-form-urlencoded", 400, server.CodeInvalidArgument},
		{"A POST without Content-Type is rejected.", http.MethodPost, `{"user":"alice"}`, "-", 400, server.CodeInvalidArgument},
		{"A body over 1 KiB is too large.", http.MethodPost, `{"user":"` + strings.Repeat("a", 2000) + `"}`, "", 413, server.CodePayloadTooLarge},
		{"GET is a JSON 405.", http.MethodGet, "", "", 405, server.CodeMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			minted := 0
			s := newTestServiceWith(t, Config{DevTokens: true}, nil, nil, nil, withMinter(func(u string) (string, error) {
				minted++
				return devMinter(u)
			}))
			hdr := map[string]string{"Content-Type": "application/json"}
			switch tt.contentType {
			case "":
			case "-":
				delete(hdr, "Content-Type")
			default:
				hdr["Content-Type"] = tt.contentType
			}
			checkError(t, s.do(tt.method, devTokenURL, "", tt.body, hdr), tt.status, tt.code)
			if minted != 0 {
				t.Errorf("minted %d tokens for a rejected request", minted)
			}
		})
	}
}

func TestDevTokenMintFailureIsInternal(t *testing.T) {
	t.Parallel()
	s := newTestServiceWith(t, Config{DevTokens: true}, nil, nil, nil, withMinter(func(string) (string, error) {
		return "", errors.New("signer broke")
	}))
	checkError(t, s.do(http.MethodPost, devTokenURL, "", `{"user":"alice"}`, jsonType), http.StatusInternalServerError, server.CodeInternal)
	if !strings.Contains(s.logs.String(), "signer broke") {
		t.Errorf("log %q: want the mint error", s.logs.String())
	}
}

func TestThePageIsServedAtTheRootAndUnderUIOnly(t *testing.T) {
	t.Parallel()
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "page "+r.URL.Path)
	})
	withPage := newTestServiceWith(t, Config{}, nil, nil, nil, func(d *serviceDeps) { d.Page = page })
	without := newTestService(t, Config{}, nil, nil, nil)
	tests := []struct {
		name     string
		s        *testService
		method   string
		path     string
		wantPage bool
	}{
		{"GET / is the page.", withPage, http.MethodGet, "/", true},
		{"HEAD / is the page.", withPage, http.MethodHead, "/", true},
		{"An asset under /ui/ is the page's to serve.", withPage, http.MethodGet, "/ui/app.js", true},
		{"POST / is not the page.", withPage, http.MethodPost, "/", false},
		{"An unknown path next to the page is a JSON 404.", withPage, http.MethodGet, "/index.html", false},
		{"An unknown /v1/ path next to the page is a JSON 404.", withPage, http.MethodGet, "/v1/nope", false},
		{"Without a page, / is a JSON 404.", without, http.MethodGet, "/", false},
		{"Without a page, /ui/ is a JSON 404.", without, http.MethodGet, "/ui/app.js", false},
	}
	for _, tt := range tests {
		w := tt.s.do(tt.method, tt.path, "", "", nil)
		if tt.wantPage {
			if w.Code != http.StatusOK || (tt.method == http.MethodGet && w.Body.String() != "page "+tt.path) {
				t.Errorf("%s %d %q, want the page", tt.name, w.Code, w.Body)
			}
			continue
		}
		if w.Code != http.StatusNotFound {
			t.Errorf("%s %d %q, want a JSON 404", tt.name, w.Code, w.Body)
			continue
		}
		checkError(t, w, http.StatusNotFound, server.CodeNotFound)
	}
}

// decodeStrictJSON decodes b into v, refusing unknown fields.
func decodeStrictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

var jsonType = map[string]string{"Content-Type": "application/json"}

// Anyone who reaches the devstack must not mint tokens: only loopback
// peers, and only pages of the configured origins (DNS rebinding sends a
// foreign Origin with a Host of its choosing).
func TestDevTokensOnlyForLoopbackPeersAndConfiguredOrigins(t *testing.T) {
	t.Parallel()
	cfg := Config{DevTokens: true, DevTokenOrigins: []string{"http://localhost:8080"}}
	withOrigin := func(origin string) map[string]string {
		return map[string]string{"Content-Type": "application/json", "Origin": origin}
	}
	tests := []struct {
		name   string
		cfg    Config
		remote string
		header map[string]string
		host   string
		status int
	}{
		{"A loopback peer without Origin (curl) gets a token.", cfg, "127.0.0.1:5000", jsonType, "", 200},
		{"An IPv6 loopback peer gets a token.", cfg, "[::1]:5000", jsonType, "", 200},
		{"A page of a configured origin gets a token.", cfg, "127.0.0.1:5000", withOrigin("http://localhost:8080"), "", 200},
		{"A peer on another address is refused.", cfg, "192.0.2.7:5000", jsonType, "", 403},
		{"A foreign page is refused even from loopback.", cfg, "127.0.0.1:5000", withOrigin("http://evil.example"), "", 403},
		{"A rebound page whose Host matches its Origin is refused.", cfg, "127.0.0.1:5000", withOrigin("http://evil.example:8080"), "evil.example:8080", 403},
		{"The null origin is refused.", cfg, "127.0.0.1:5000", withOrigin("null"), "", 403},
		{"A remote peer is served when remote dev tokens are on.", Config{DevTokens: true, DevTokensRemote: true}, "192.0.2.7:5000", jsonType, "", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newTestServiceWith(t, tt.cfg, nil, nil, nil, withMinter(devMinter))
			hdr := tt.header
			if tt.host != "" {
				hdr = map[string]string{"Host": tt.host}
				for k, v := range tt.header {
					hdr[k] = v
				}
			}
			w := s.doFrom(tt.remote, http.MethodPost, devTokenURL, "", `{"user":"alice"}`, hdr)
			if tt.status == 200 {
				if w.Code != 200 {
					t.Fatalf("status %d %s, want a token", w.Code, w.Body)
				}
				return
			}
			checkError(t, w, tt.status, server.CodePermissionDenied)
		})
	}
}
