package client_test

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
)

// lifetime is exp - iat of a token, in seconds. iat is in whole seconds,
// exp to the millisecond: a token minted at now for ttl has a lifetime in
// [ttl, ttl+1s).
func lifetime(t *testing.T, token string) float64 {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q: want three segments", token)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("token payload: %v", err)
	}
	var c struct {
		Iat, Exp *float64
	}
	if err := json.Unmarshal(payload, &c); err != nil || c.Iat == nil || c.Exp == nil {
		t.Fatalf("token claims %s (%v): want iat and exp", payload, err)
	}
	return *c.Exp - *c.Iat
}

// docs/api.md, "POST /v1/dev/token" and "The devstack": a dev token, the
// one the devstack prints as the one POST /v1/dev/token mints, is valid 7
// days.
func TestDevTokensAreValidSevenDays(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	const week = 7 * 24 * 60 * 60
	if got := lifetime(t, stack.DevToken); got < week || got >= week+1 {
		t.Errorf("the devstack's printed token lives %.3f s, want %d (7 days)", got, week)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, stack.IngestURL+"/v1/dev/token", strings.NewReader(`{"user":"alice"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	var minted struct{ Token string }
	if res.StatusCode != http.StatusOK || json.Unmarshal(body, &minted) != nil {
		t.Fatalf("POST /v1/dev/token: %d %s", res.StatusCode, body)
	}
	if got := lifetime(t, minted.Token); got < week || got >= week+1 {
		t.Errorf("a token of POST /v1/dev/token lives %.3f s, want %d (7 days)", got, week)
	}
}
