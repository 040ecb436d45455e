package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// Journal keeps the step journals of durable runs: while a request runs,
// each completed step of its agent (a model output that asked for tools, a
// tool's result) is recorded under the request, so that a re-run of the
// request (a redelivery after a crash, a moved partition, a retry) replays
// the steps instead of doing them again. A journal lives until the
// request's durable end, when the worker deletes it.
//
// Every write is conditional on the owner token of the run that makes it:
// an int64 that orders the runs of one request (a later run has a higher
// token). A write of a run older than the journal's owner is refused with
// ErrFenced, so a worker that lost its partition (a zombie) cannot add
// steps the new owner would trust. Each write is one single-document
// atomic update: no transaction is needed.
//
// MongoStore and MemoryStore implement it; historytest.Run runs its
// conformance tests against a store that does. Every method is safe for
// concurrent use.
type Journal interface {
	// Steps returns the journal of request requestID, if it has one.
	Steps(ctx context.Context, id events.Identity, requestID string) (Steps, bool, error)
	// ClaimSteps makes owner the owner of the request's journal and counts
	// its run (Steps.Runs), returning the count; a journal owned by a
	// newer run is ErrFenced. A missing journal is not created: it
	// returns 0.
	ClaimSteps(ctx context.Context, id events.Identity, requestID string, owner int64) (runs int, err error)
	// RecordStep appends s to the request's journal (creating it) and
	// makes owner its owner, in one atomic write. It returns the step as
	// recorded: s, or the step recorded under s.Key before (the first
	// write of a key wins; its Owner tells whose it is). A journal owned
	// by a newer run is ErrFenced; a journal whose size would pass
	// limits.MaxBytes is ErrJournalFull; in both cases nothing is
	// written.
	RecordStep(ctx context.Context, id events.Identity, requestID string, owner int64, s Step, limits JournalLimits) (Step, error)
	// TruncateSteps keeps the first n steps of the request's journal and
	// makes owner its owner (ErrFenced if a newer run owns it). A missing
	// journal stays missing.
	TruncateSteps(ctx context.Context, id events.Identity, requestID string, owner int64, n int) error
	// DeleteSteps deletes the request's journal, unless a newer run than
	// owner's owns it (ErrFenced: a zombie cannot delete the new owner's
	// journal). Deleting a missing one is harmless.
	DeleteSteps(ctx context.Context, id events.Identity, requestID string, owner int64) error
}

// Step is one recorded step of a run.
type Step struct {
	// Key names the step among the request's steps (at most
	// MaxStepKeyBytes): the same step of another run of the request has
	// the same key.
	Key string
	// Hash fingerprints the step's input (a model's messages and tools, a
	// tool's arguments): a replay whose input hashes differently has
	// diverged.
	Hash string
	// Data is the step's output, opaque to the store.
	Data []byte
	// State is what the step changed of the run's session state, opaque
	// to the store (a replay of the step applies it again); nil when
	// nothing.
	State []byte
	// Artifacts is the tokens of the artifact saves the step staged (a
	// replay of the step adds them to the run's manifest again, without
	// staging them again); nil when none.
	Artifacts []string
	// Owner is the owner token of the run that recorded it (set by
	// RecordStep).
	Owner int64
	// At is when it was recorded (set by RecordStep; milliseconds, UTC).
	At time.Time
}

// Steps is a request's journal.
type Steps struct {
	// Owner is the token of the newest run that wrote or claimed it.
	Owner int64
	// Runs counts the runs that created or claimed it: 1 for the run that
	// created it.
	Runs int
	// Bytes is the size of its steps (keys, hashes and data).
	Bytes int
	// Steps are in the order they were recorded.
	Steps []Step
}

// size is what a step adds to a journal's Bytes.
func (s Step) size() int {
	return len(s.Key) + len(s.Hash) + len(s.Data) + len(s.State) + 32*len(s.Artifacts)
}

// JournalLimits bound a journal. Zero fields take their defaults.
type JournalLimits struct {
	// MaxBytes bounds the size of a journal's steps (Steps.Bytes). Default
	// DefaultJournalBytes; at most MaxJournalBytes (a MongoDB document
	// holds 16 MiB).
	MaxBytes int
	// TTL is how long a journal is kept after its last write when its
	// request never ends (the backstop of DeleteSteps). Default
	// DefaultJournalTTL.
	TTL time.Duration
}

// Journal limits.
const (
	DefaultJournalBytes = 4 << 20
	MaxJournalBytes     = 12 << 20
	DefaultJournalTTL   = 24 * time.Hour
	// MaxStepKeyBytes bounds Step.Key, and MaxStepHashBytes Step.Hash.
	MaxStepKeyBytes  = 1 << 10
	MaxStepHashBytes = 128
)

func (l JournalLimits) withDefaults() JournalLimits {
	if l.MaxBytes == 0 {
		l.MaxBytes = DefaultJournalBytes
	}
	if l.TTL == 0 {
		l.TTL = DefaultJournalTTL
	}
	return l
}

// ErrJournalFull is returned by RecordStep for a step that would take its
// journal past JournalLimits.MaxBytes: it is not recorded.
var ErrJournalFull = errors.New("journal full: the step would pass the journal's size limit")

// validateStep checks RecordStep's arguments.
func validateStep(id events.Identity, requestID string, owner int64, s Step, l JournalLimits) error {
	var errs []error
	if err := validateJournal(id, requestID, owner); err != nil {
		errs = append(errs, err)
	}
	if s.Key == "" || len(s.Key) > MaxStepKeyBytes {
		errs = append(errs, fmt.Errorf("%w step: key of %d bytes, want 1..%d", events.ErrInvalid, len(s.Key), MaxStepKeyBytes))
	}
	if len(s.Hash) > MaxStepHashBytes {
		errs = append(errs, fmt.Errorf("%w step: hash of %d bytes, at most %d", events.ErrInvalid, len(s.Hash), MaxStepHashBytes))
	}
	if l.MaxBytes < 1 || l.MaxBytes > MaxJournalBytes {
		errs = append(errs, fmt.Errorf("%w step: journal limit %d, want 1..%d", events.ErrInvalid, l.MaxBytes, MaxJournalBytes))
	}
	if l.TTL < 0 {
		errs = append(errs, fmt.Errorf("%w step: negative journal TTL", events.ErrInvalid))
	}
	if len(errs) > 0 {
		return fmt.Errorf("record step: %w", errors.Join(errs...))
	}
	return nil
}

// validateJournal checks the arguments every Journal write takes.
func validateJournal(id events.Identity, requestID string, owner int64) error {
	var errs []error
	if err := id.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := events.ValidateID("request_id", requestID); err != nil {
		errs = append(errs, err)
	}
	if owner <= 0 {
		errs = append(errs, fmt.Errorf("%w journal: owner %d, must be positive", events.ErrInvalid, owner))
	}
	return errors.Join(errs...)
}
