package devstack

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/turnpike-dev/turnpike/pkg/auth"
)

// secretFile is the file in the data directory that keeps the auth secret
// the devstack generated, so that the tokens it minted stay valid across
// restarts.
const secretFile = "auth-secret"

// Where the auth secret came from (Stack.secretSource).
const (
	secretFromEnv       = "TURNPIKE_AUTH_SECRET"
	secretGenerated     = "generated"
	secretFromDataDir   = "kept"
	secretFileMode      = 0o600
	secretDirMode       = 0o700
	generatedSecretSize = 32
)

// loadOrCreateSecret returns the secret kept in dir/secretFile, creating it
// (mode 0600, the directory 0700 when it is new) with a random secret when
// there is none. It reports whether it created the file. A kept file that
// others may read is made private again; one too short to be a secret is an
// error naming the file, never silently replaced (tokens signed with it
// would die).
func loadOrCreateSecret(dir string) (secret string, created bool, err error) {
	path := filepath.Join(dir, secretFile)
	secret, err = readSecret(path)
	if err == nil {
		return secret, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", false, err
	}
	if err := os.MkdirAll(dir, secretDirMode); err != nil {
		return "", false, fmt.Errorf("auth secret: %w", err)
	}
	var b [generatedSecretSize]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", false, fmt.Errorf("auth secret: %w", err)
	}
	secret = hex.EncodeToString(b[:])
	// O_EXCL: when two devstacks share a data directory and start at once,
	// one creates the file and the other reads it.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, secretFileMode)
	if errors.Is(err, fs.ErrExist) {
		secret, err = readSecret(path)
		return secret, false, err
	}
	if err != nil {
		return "", false, fmt.Errorf("auth secret: %w", err)
	}
	_, werr := f.WriteString(secret + "\n")
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(path)
		return "", false, fmt.Errorf("auth secret %s: %w", path, err)
	}
	return secret, true, nil
}

// readSecret reads a kept secret and makes its file private (0600).
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		return "", fmt.Errorf("auth secret: %w", err)
	}
	secret := strings.TrimSpace(string(b))
	if len(secret) < auth.MinSecretBytes {
		return "", fmt.Errorf("auth secret %s: %d bytes, at least %d required: remove the file to generate a new secret (tokens signed with the old one stop working)",
			path, len(secret), auth.MinSecretBytes)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("auth secret: %w", err)
	}
	if fi.Mode().Perm() != secretFileMode {
		if err := os.Chmod(path, secretFileMode); err != nil {
			return "", fmt.Errorf("auth secret %s: make it private (0600): %w", path, err)
		}
	}
	return secret, nil
}

// banner is what the devstack prints once it is ready: where it serves, a
// dev token, and where the token's secret comes from.
func (s Stack) banner() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nTurnpike devstack\n  page    %s/\n  ingest  %s\n  stream  %s\n", s.IngestURL, s.IngestURL, s.StreamURL)
	fmt.Fprintf(&b, "  %s\n", s.exposure())
	fmt.Fprintf(&b, "  dev token (tenant default, user %s, valid %d days", s.devUser, int(devTokenTTL.Hours()/24))
	switch s.secretSource {
	case secretFromEnv:
		b.WriteString(", signed with TURNPIKE_AUTH_SECRET")
	case secretGenerated:
		fmt.Fprintf(&b, "; its secret was generated into %s and is kept for later starts", s.secretFile)
	case secretFromDataDir:
		fmt.Fprintf(&b, "; its secret is kept in %s, so earlier tokens still work", s.secretFile)
	}
	fmt.Fprintf(&b, "):\n\n    export TURNPIKE_TOKEN=%s\n\n", s.DevToken)
	return b.String()
}
