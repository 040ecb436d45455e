package auth_test

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/auth"
)

// A sign-in service mints a user's token with the deployment's
// TURNPIKE_AUTH_SECRET; ingest and the push gateway verify it.
func Example() {
	secret := strings.Repeat("k", auth.MinSecretBytes) // TURNPIKE_AUTH_SECRET
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tok, err := auth.Mint(secret, "acme", "alice", time.Hour, now)
	if err != nil {
		fmt.Println(err)
		return
	}

	r := httptest.NewRequest("POST", "/v1/conversations/c1/messages", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	v, err := auth.NewVerifier(secret, func() time.Time { return now.Add(time.Minute) })
	if err != nil {
		fmt.Println(err)
		return
	}
	t, err := v.VerifyToken(auth.BearerToken(r, false))
	fmt.Println(t.Tenant, t.User, t.Expires.Sub(now), err)

	// An hour later the token has expired.
	late, _ := auth.NewVerifier(secret, func() time.Time { return now.Add(2 * time.Hour) })
	_, err = late.Verify(tok)
	fmt.Println(err != nil)
	// Output:
	// acme alice 1h0m0s <nil>
	// true
}
