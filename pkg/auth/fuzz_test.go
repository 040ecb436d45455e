package auth_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/auth"
)

// FuzzVerify signs arbitrary headers and claims with the secret, so that
// they get past the signature, and checks what Verify makes of them: no
// panic; an accepted token names, exactly, the sub and tenant a standard
// decoder reads; its exp is a number in the future and its header says
// HS256.
func FuzzVerify(f *testing.F) {
	exp := now.Add(time.Hour).Unix()
	for _, seed := range []struct{ header, payload string }{
		{`{"alg":"HS256","typ":"JWT"}`, `{"sub":"alice","exp":` + itoa(exp) + `}`},
		{`{"alg":"HS256"}`, `{"sub":"alice","tenant":"acme","exp":` + itoa(exp) + `.5,"iat":1}`},
		{`{"alg":"HS256"}`, `{"SUB":"mallory","sub":"alice","exp":` + itoa(exp) + `}`},
		{`{"alg":"HS256"}`, `{"sub":"alice","sub":"mallory","exp":` + itoa(exp) + `}`},
		{`{"alg":"HS256","crit":["b64"]}`, `{"sub":"alice","exp":` + itoa(exp) + `}`},
		{`{"alg":"HS256"}`, `{"sub":"alice","exp":"` + itoa(exp) + `"}`},
		{`{"alg":"none"}`, `{"sub":"alice","exp":1e400}`},
	} {
		f.Add([]byte(seed.header), []byte(seed.payload))
	}
	v := newVerifier(f)
	f.Fuzz(func(t *testing.T, header, payload []byte) {
		p, err := v.Verify(handToken(string(header), string(payload), secret))
		if err != nil {
			return
		}
		var h map[string]any
		if json.Unmarshal(header, &h) != nil || h["alg"] != "HS256" || h["crit"] != nil {
			t.Fatalf("accepted header %q", header)
		}
		var c map[string]any
		if err := json.Unmarshal(payload, &c); err != nil {
			t.Fatalf("accepted claims %q, which encoding/json refuses: %v", payload, err)
		}
		tenant, _ := c["tenant"].(string)
		if tenant == "" {
			tenant = auth.DefaultTenant
		}
		if c["sub"] != p.User || tenant != p.Tenant {
			t.Fatalf("accepted %q as %+v; encoding/json reads sub %v tenant %v", payload, p, c["sub"], c["tenant"])
		}
		e, ok := c["exp"].(float64)
		if !ok || e <= float64(now.Unix()) {
			t.Fatalf("accepted %q with exp %v", payload, c["exp"])
		}
		for k := range c {
			if k != "sub" && strings.EqualFold(k, "sub") {
				t.Fatalf("accepted %q with a case variant of sub", payload)
			}
		}
	})
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
