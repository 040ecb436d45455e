package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// ErrNoArtifacts is returned by the methods of a nil *Artifacts: the
// context is not a worker run's, or the worker has no artifact service
// (WithArtifacts).
var ErrNoArtifacts = errors.New("no artifact service in this context: not a worker run, or none configured")

// Artifacts is the artifact store of one run: what the agent's tools
// save and load through ArtifactsFromContext. A name with the "user:"
// prefix (history.UserArtifactPrefix) is shared by every conversation of
// the user; any other name is the conversation's.
//
// A Save stages the content at once (it is written to the artifact
// service, invisible) and adds it to the run's manifest; the manifest is
// committed with the run's turn, in its one document, and the saves are
// published (each becomes its name's next version, readable) right after
// the commit, and each published version is announced on the stream by
// an artifact.saved event (docs/api.md). A run that
// persists nothing (discarded, cancelled before content, fenced, aborted,
// failed) publishes nothing: its staged content is never visible, and
// the worker's sweep drops it: every Config.ArtifactSweepInterval (1h),
// what is older than Config.ArtifactSweepAge (24h, past the longest run),
// through the service's SweepArtifacts. A redelivered request whose turn
// is committed publishes the committed turn's manifest again, which makes
// no second version (it reads the manifest only when the turn holds saves,
// history.Committed.Artifacts); in a durable run a tool call answered from the
// journal adds the saves it made in its first run to the manifest again,
// without saving them again.
//
// Load and List read committed versions only: a save of this run is
// readable once the run's turn is committed.
//
// An Artifacts is safe for concurrent use: the tools of one model round
// run at once.
type Artifacts struct {
	*artifactsCore
	// rec, when set, records the saves made through this view: a durable
	// run's tool call, whose saves are journaled with its result.
	rec *artifactRecord
}

// artifactsCore is a run's artifacts, shared by the views of its tool
// calls.
type artifactsCore struct {
	id  events.Identity
	svc history.ArtifactService

	mu      sync.Mutex // guards tokens and staging
	tokens  []string   // the run's manifest, in save order
	staging int        // Saves between their check of the limit and their add
}

// artifactRecord is the tokens of the saves one tool call made.
type artifactRecord struct {
	mu     sync.Mutex
	tokens []string
}

type artifactsKey struct{}

// ArtifactsFromContext is the artifact store of the worker run ctx
// belongs to (the agent's and its tools' contexts): nil outside a run or
// when the worker has no artifact service. The methods of a nil
// *Artifacts return ErrNoArtifacts.
func ArtifactsFromContext(ctx context.Context) *Artifacts {
	a, _ := ctx.Value(artifactsKey{}).(*Artifacts)
	return a
}

func withArtifacts(ctx context.Context, a *Artifacts) context.Context {
	return context.WithValue(ctx, artifactsKey{}, a)
}

// newArtifacts is the artifact store of a run of id on svc (nil: none).
func newArtifacts(id events.Identity, svc history.ArtifactService) *Artifacts {
	if svc == nil {
		return nil
	}
	return &Artifacts{artifactsCore: &artifactsCore{id: id, svc: svc}}
}

// Save stages a new version of name with its MIME type: it is published
// when the run's turn commits. It refuses a bad name or MIME type
// (events.ErrInvalid), content or a name past the service's limits
// (history.ErrArtifactLimit), and more than history.MaxArtifactsPerTurn
// saves in one run.
func (a *Artifacts) Save(ctx context.Context, name, mime string, data []byte) error {
	if a == nil {
		return ErrNoArtifacts
	}
	// The slot is taken before the Stage, so that saves made in
	// parallel (tool calls run concurrently) cannot pass the limit
	// together: a manifest over it would make the turn's commit refused.
	a.mu.Lock()
	full := len(a.tokens)+a.staging >= history.MaxArtifactsPerTurn
	if !full {
		a.staging++
	}
	a.mu.Unlock()
	if full {
		return fmt.Errorf("save artifact %s: %w: %d saves in one run", name, history.ErrArtifactLimit, history.MaxArtifactsPerTurn)
	}
	token, err := a.svc.Stage(ctx, a.id, history.ArtifactSave{Name: name, MIME: mime, Data: data})
	a.mu.Lock()
	a.staging--
	a.mu.Unlock()
	if err != nil {
		return err
	}
	a.add(token)
	if a.rec != nil {
		a.rec.mu.Lock()
		a.rec.tokens = append(a.rec.tokens, token)
		a.rec.mu.Unlock()
	}
	return nil
}

// add adds a staged save to the run's manifest (once).
func (a *artifactsCore) add(tokens ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range tokens {
		if !slices.Contains(a.tokens, t) {
			a.tokens = append(a.tokens, t)
		}
	}
}

// Load returns a committed version of name (0: the newest) and its
// content; history.ErrNotFound when there is none.
func (a *Artifacts) Load(ctx context.Context, name string, version int) (history.Artifact, []byte, error) {
	if a == nil {
		return history.Artifact{}, nil, ErrNoArtifacts
	}
	return a.svc.OpenArtifact(ctx, a.id, name, version)
}

// List returns the newest committed version of each name the
// conversation sees (its own and the user's), sorted by name.
func (a *Artifacts) List(ctx context.Context) ([]history.Artifact, error) {
	if a == nil {
		return nil, ErrNoArtifacts
	}
	return a.svc.ListArtifacts(ctx, a.id)
}

// manifest is the run's staged saves, for its turn (nil: none).
func (a *Artifacts) manifest() []string {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.tokens)
}

// recording is a view of a whose saves are also recorded (a may be nil:
// then both are nil).
func (a *Artifacts) recording() (*Artifacts, *artifactRecord) {
	if a == nil {
		return nil, nil
	}
	r := &artifactRecord{}
	return &Artifacts{artifactsCore: a.artifactsCore, rec: r}, r
}

// recorded is the tokens r recorded (nil: none).
func (r *artifactRecord) recorded() []string {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.tokens)
}

// replay adds the saves a journaled step made in its first run to the
// manifest again.
func (a *Artifacts) replay(tokens []string) {
	if a != nil && len(tokens) > 0 {
		a.add(tokens...)
	}
}

// publishArtifacts publishes the manifest of the committed turn of
// requestID: tokens when this run committed it, else the manifest the
// store kept (a duplicate: the request's first commit). It returns the
// published versions. The committed tokens the publish skipped (their
// staged save is gone: swept before the publish, or deleted since) are
// passed to lost, when it is set.
func publishArtifacts(ctx context.Context, svc history.ArtifactService, store history.Store, id events.Identity, requestID string, tokens []string, duplicate bool, lost func([]string)) ([]history.Artifact, error) {
	if svc == nil {
		return nil, nil
	}
	if duplicate {
		r, ok := store.(history.ManifestReader)
		if !ok {
			return nil, nil
		}
		kept, found, err := r.TurnArtifacts(ctx, id, requestID)
		if err != nil || !found {
			return nil, err
		}
		tokens = kept
	}
	if len(tokens) == 0 {
		return nil, nil
	}
	out, err := svc.Publish(ctx, id, tokens)
	if err != nil {
		return nil, fmt.Errorf("publish artifacts: %w", err)
	}
	if lost != nil && len(out) < len(tokens) {
		got := make(map[string]bool, len(out))
		for _, a := range out {
			got[a.Token] = true
		}
		var missing []string
		for _, t := range tokens {
			if !got[t] {
				missing = append(missing, t)
			}
		}
		if len(missing) > 0 {
			lost(missing)
		}
	}
	return out, nil
}

// lostArtifacts is the lost of publishArtifacts for a request's run: a
// committed save whose staged save is gone at publish is logged at error
// and counted (turnpike_worker_artifacts_lost_total): it never becomes a
// version.
func (s *Step) lostArtifacts(log *slog.Logger) func([]string) {
	return func(tokens []string) {
		log.Error("committed artifact saves not published: their staged saves are gone (swept before the publish: -artifact-sweep-age too short for the runs and their re-runs; or deleted since)",
			slog.Any("tokens", tokens))
		s.metrics.artifactsLost.Add(float64(len(tokens)))
	}
}

// WithArtifacts gives the runs' tools svc for their artifacts
// (ArtifactsFromContext). Default: the MongoDB of Config.MongoURI
// (history.MongoArtifacts) when the worker opens it itself; none with
// WithStore (ArtifactsFromContext is then nil), unless this option is
// given too (a history.MemoryArtifacts in tests).
func WithArtifacts(svc history.ArtifactService) Option {
	return func(o *options) { o.artifacts = svc }
}
