package history

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Limits and defaults of artifacts (docs/api.md "Artifacts").
const (
	// MaxArtifactNameBytes bounds an artifact's name, its "user:" prefix
	// included.
	MaxArtifactNameBytes = 128
	// MaxArtifactMIMEBytes bounds a MIME type.
	MaxArtifactMIMEBytes = 128
	// MaxArtifactsPerTurn bounds the saves one run commits.
	MaxArtifactsPerTurn = 64
	// DefaultMaxArtifactBytes is ArtifactLimits.MaxBytes's default: 8 MiB.
	DefaultMaxArtifactBytes = 8 << 20
	// DefaultMaxArtifactNames is ArtifactLimits.MaxNames's default.
	DefaultMaxArtifactNames = 100
	// ArtifactChunkBytes is the size of the chunks MongoArtifacts stores
	// an artifact's content in (GridFS's default).
	ArtifactChunkBytes = 255 << 10
	// UserArtifactPrefix marks a name shared by every conversation of the
	// user (ADK's "user:" artifacts).
	UserArtifactPrefix = "user:"
)

// ErrArtifactLimit is wrapped by the error of a Stage whose content or
// name count passes ArtifactLimits: nothing is stored.
var ErrArtifactLimit = errors.New("artifact limit")

// ArtifactLimits bounds what a scope holds. The zero value means the
// defaults.
type ArtifactLimits struct {
	// MaxBytes bounds one version's content. Default
	// DefaultMaxArtifactBytes.
	MaxBytes int64
	// MaxNames bounds the names of one scope (a conversation's, or the
	// user's "user:" names). Default DefaultMaxArtifactNames.
	MaxNames int
}

func (l ArtifactLimits) withDefaults() ArtifactLimits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxArtifactBytes
	}
	if l.MaxNames <= 0 {
		l.MaxNames = DefaultMaxArtifactNames
	}
	return l
}

// Artifact is one committed version of an artifact.
type Artifact struct {
	// Name is the artifact's name, "user:" prefix included for a user
	// artifact.
	Name string
	// Version numbers the saves of Name in its scope, from 1. A deleted
	// name's numbers are not reused while any version of it is kept; after
	// a DELETE a new save starts again at 1, with a new ETag.
	Version int
	// MIME is the content's media type.
	MIME string
	// Size is the content's length in bytes.
	Size int64
	// Token identifies the staged save this version published: unique,
	// it is the version's ETag.
	Token string
	// Conversation is the conversation whose run saved it.
	Conversation string
	// SavedAt is when it was staged (millisecond UTC).
	SavedAt time.Time
}

// ArtifactSave is a save a run stages.
type ArtifactSave struct {
	Name string
	MIME string
	Data []byte
}

// ArtifactService keeps artifacts: named, versioned blobs scoped to
// (tenant, user, conversation), and to (tenant, user) for names with the
// "user:" prefix. A save is staged by a run (Stage: its content is
// written, under a token, and nothing is visible), committed with the
// run's turn (the token in Turn.Artifacts) and published after the
// commit (Publish: it becomes the name's next version). A staged save
// whose token no turn commits is never visible, and SweepArtifacts drops
// it. Every method is bound to the identity: no call reads, lists or
// deletes another identity's artifacts. MemoryArtifacts and
// MongoArtifacts implement it; historytest.Artifacts is its conformance
// suite. Implementations are safe for concurrent use.
type ArtifactService interface {
	// Stage writes a save's content under a new token and returns it. It
	// refuses a bad name or MIME type (events.ErrInvalid) and content or
	// a new name past the limits (ErrArtifactLimit).
	Stage(ctx context.Context, id events.Identity, s ArtifactSave) (token string, err error)
	// Publish makes the staged saves of tokens (a committed turn's
	// manifest, in order) the next versions of their names and returns
	// them. It is idempotent: a token already published returns its
	// version, so a repeated Publish (a redelivered request) makes no
	// second version. A token whose staged save is gone (deleted) is
	// skipped.
	Publish(ctx context.Context, id events.Identity, tokens []string) ([]Artifact, error)
	// ListArtifacts returns the newest version of each name the
	// conversation sees (its own and the user's), sorted by name.
	ListArtifacts(ctx context.Context, id events.Identity) ([]Artifact, error)
	// OpenArtifact returns a version of name (0: the newest) with its
	// content; ErrNotFound when there is none for id.
	OpenArtifact(ctx context.Context, id events.Identity, name string, version int) (Artifact, []byte, error)
	// DeleteArtifact removes every version of name; ErrNotFound when
	// there is none for id.
	DeleteArtifact(ctx context.Context, id events.Identity, name string) error
	// SweepArtifacts drops the staged saves older than before that were
	// never published, and the content older than before that no staged
	// save holds any more (left by a Stage that failed between writing
	// the content and staging the save, or by a delete or a sweep that
	// stopped half-way; younger content may be a Stage in flight and is
	// kept). It returns how many saves' content it dropped. Several
	// sweeps at once are harmless: each staged save is dropped, and
	// counted, by one of them (an orphaned content may be counted by
	// two). before must be older than the longest run: a run's staged
	// saves are not yet in a committed turn.
	SweepArtifacts(ctx context.Context, before time.Time) (int, error)
}

// ManifestReader is a Store that reads the artifact manifest of a
// committed turn (MemoryStore and MongoStore are): the worker publishes
// it again when a redelivered request finds its turn committed. Such a
// store must report in Committed.Artifacts how many saves the turn holds,
// on every answer about a committed turn (Commit, its duplicate included,
// Lookup, and the Start of a decided request): the worker reads the
// manifest only when there are some, so a store that leaves it 0 loses
// the saves of a run that stopped between its commit and its publish.
// historytest.Artifacts (given a store) checks it.
type ManifestReader interface {
	// TurnArtifacts returns the manifest of the turn of requestID, and
	// whether that turn exists.
	TurnArtifacts(ctx context.Context, id events.Identity, requestID string) ([]string, bool, error)
}

// ValidateArtifactName checks a name: 1..MaxArtifactNameBytes bytes of
// ASCII letters, digits, '.', '_' and '-', not starting with '.', after an
// optional "user:" prefix. So a name is never a path ("../", "%2F"), and
// holds no NUL, '#' or '/'.
func ValidateArtifactName(name string) error {
	if len(name) == 0 || len(name) > MaxArtifactNameBytes {
		return fmt.Errorf("%w artifact name: want 1..%d bytes, got %d", events.ErrInvalid, MaxArtifactNameBytes, len(name))
	}
	base := strings.TrimPrefix(name, UserArtifactPrefix)
	if base == "" || base[0] == '.' {
		return fmt.Errorf("%w artifact name %q: empty or starting with '.'", events.ErrInvalid, truncate(name, 64))
	}
	for i := 0; i < len(base); i++ {
		c := base[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w artifact name %q: byte %#x: want letters, digits, '.', '_' or '-'", events.ErrInvalid, truncate(name, 64), c)
		}
	}
	return nil
}

// validateMIME checks a MIME type: type/subtype, printable ASCII without
// spaces before any parameters.
func validateMIME(mime string) error {
	if mime == "" || len(mime) > MaxArtifactMIMEBytes {
		return fmt.Errorf("%w artifact MIME type: want 1..%d bytes", events.ErrInvalid, MaxArtifactMIMEBytes)
	}
	typ, _, _ := strings.Cut(mime, ";")
	typ = strings.TrimSpace(typ)
	a, b, ok := strings.Cut(typ, "/")
	if !ok || a == "" || b == "" || strings.ContainsAny(typ, " \t") || strings.Contains(b, "/") {
		return fmt.Errorf("%w artifact MIME type %q: want type/subtype", events.ErrInvalid, truncate(mime, 64))
	}
	for i := 0; i < len(mime); i++ {
		if mime[i] < 0x20 || mime[i] > 0x7e {
			return fmt.Errorf("%w artifact MIME type: not printable ASCII", events.ErrInvalid)
		}
	}
	return nil
}

// validateToken checks a staged save's token: 32 lowercase hex digits.
func validateToken(t string) error {
	if len(t) != 32 {
		return fmt.Errorf("%w artifact token %q", events.ErrInvalid, truncate(t, 40))
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("%w artifact token %q", events.ErrInvalid, truncate(t, 40))
		}
	}
	return nil
}

// validateManifest checks a turn's manifest.
func validateManifest(tokens []string) error {
	if len(tokens) > MaxArtifactsPerTurn {
		return fmt.Errorf("%w turn: %d artifacts, at most %d", events.ErrInvalid, len(tokens), MaxArtifactsPerTurn)
	}
	seen := make(map[string]bool, len(tokens))
	for _, t := range tokens {
		if err := validateToken(t); err != nil {
			return err
		}
		if seen[t] {
			return fmt.Errorf("%w turn: artifact token %s twice", events.ErrInvalid, t)
		}
		seen[t] = true
	}
	return nil
}

// validateStage checks Stage's arguments against the limits.
func validateStage(id events.Identity, s ArtifactSave, l ArtifactLimits) error {
	if err := id.Validate(); err != nil {
		return fmt.Errorf("stage artifact: %w", err)
	}
	if err := ValidateArtifactName(s.Name); err != nil {
		return fmt.Errorf("stage artifact: %w", err)
	}
	if err := validateMIME(s.MIME); err != nil {
		return fmt.Errorf("stage artifact: %w", err)
	}
	if int64(len(s.Data)) > l.MaxBytes {
		return fmt.Errorf("stage artifact %s: %w: %d bytes, at most %d", s.Name, ErrArtifactLimit, len(s.Data), l.MaxBytes)
	}
	return nil
}

// validateRead checks the identity and name of a read or a delete.
func validateRead(op string, id events.Identity, name string) error {
	if err := id.Validate(); err != nil {
		return fmt.Errorf("%s artifact: %w", op, err)
	}
	if err := ValidateArtifactName(name); err != nil {
		return fmt.Errorf("%s artifact: %w", op, err)
	}
	return nil
}

// newArtifactToken is a new staged save's token: 128 random bits.
func newArtifactToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("artifact token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// artifactScope is the scope key of name for id: the conversation's
// ("tenant/user/conversation") or, for a "user:" name, the user's
// ("tenant/user"). Identity parts hold no '/' or '#'.
func artifactScope(id events.Identity, name string) string {
	if strings.HasPrefix(name, UserArtifactPrefix) {
		return id.Tenant + "/" + id.User
	}
	return id.Key()
}
