package devstack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/auth"
)

func TestTheGeneratedSecretIsKeptPrivateAndReused(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	secret, created, err := loadOrCreateSecret(dir)
	if err != nil || !created || len(secret) < auth.MinSecretBytes {
		t.Fatalf("first start: %q, created %v, %v", secret, created, err)
	}
	path := filepath.Join(dir, secretFile)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v, %v; want mode 0600", fi.Mode(), err)
	}
	again, created, err := loadOrCreateSecret(dir)
	if err != nil || created || again != secret {
		t.Fatalf("second start: %q (created %v, %v), want the kept %q", again, created, err, secret)
	}

	// A file others can read is made private again and still used.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if again, _, err := loadOrCreateSecret(dir); err != nil || again != secret {
		t.Fatalf("after chmod 0644: %q, %v", again, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v after reading, want 0600", fi.Mode())
	}

	// A damaged file is an error naming it, and is not replaced.
	if err := os.WriteFile(path, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadOrCreateSecret(dir); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("short secret: %v, want an error naming %s", err, path)
	}
	if b, _ := os.ReadFile(path); string(b) != "short\n" {
		t.Fatalf("the damaged secret was replaced: %q", b)
	}
}

func TestTheBannerSaysWhereTheTokensSecretComesFrom(t *testing.T) {
	t.Parallel()
	st := Stack{IngestURL: "http://localhost:8080", IngestAddr: "[::]:8080", PushgwAddr: "[::]:8081", DevToken: "tok", secretFile: "data/auth-secret", devUser: "dev"}
	for source, want := range map[string]string{
		secretFromEnv:     "signed with TURNPIKE_AUTH_SECRET",
		secretGenerated:   "generated into data/auth-secret",
		secretFromDataDir: "kept in data/auth-secret, so earlier tokens still work",
	} {
		st.secretSource = source
		b := st.banner()
		if !strings.Contains(b, want) || !strings.Contains(b, "export TURNPIKE_TOKEN=tok\n") || !strings.Contains(b, "http://localhost:8080/") {
			t.Errorf("banner with secret %s:\n%s\nwant %q and the token", source, b, want)
		}
	}
}
