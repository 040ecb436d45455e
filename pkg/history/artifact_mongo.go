package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// ArtifactConfig configures MongoArtifacts. The zero value means the
// defaults.
type ArtifactConfig struct {
	// Artifacts is the collection of staged saves and versions. Default
	// "artifacts".
	Artifacts string
	// Chunks is the collection of their content. Default
	// "artifact_chunks".
	Chunks string
	// Limits bounds what a scope holds (zero fields: the defaults).
	Limits ArtifactLimits
	// Logger receives the repair NewMongoArtifacts makes when the
	// versions hold a token twice (see NewMongoArtifacts). Default
	// slog.Default().
	Logger *slog.Logger
}

// MongoArtifacts is an ArtifactService on MongoDB (and FerretDB: it uses
// no transaction, only inserts with unique _ids and conditional updates).
// Its documents (docs/api.md "Artifact documents"):
//
//   - a staged save: artifacts/_id="s#<token>", with the identity, the
//     name, MIME type, size, chunk count, time, and "pub": the version it
//     was published as (absent before);
//   - a version: artifacts/_id="<scope>#<name>#<version, 8 digits>", the
//     scope "tenant/user/conversation" or, for a "user:" name,
//     "tenant/user"; the _id's uniqueness is what keeps two saves from
//     taking one version, and the unique index on its "token" (sparse:
//     staged documents have none) what keeps one save from taking two
//     (concurrent publishes of one token);
//   - the content: artifact_chunks/_id="<token>#<index, 5 digits>", of
//     ArtifactChunkBytes each (the last one shorter), with the token and
//     the staged save's time ("at").
//
// Safe for concurrent use.
type MongoArtifacts struct {
	arts   *mongo.Collection
	chunks *mongo.Collection
	limits ArtifactLimits
	now    func() time.Time
}

var _ ArtifactService = (*MongoArtifacts)(nil)

// NewMongoArtifacts returns the artifacts of db, and creates their
// indexes (one command each): the versions' unique index on the token
// ("token_unique": a staged save is published as one version only, even
// by concurrent publishes of its token), and the chunks' index on their
// time and token ("at_token", which the sweep of orphaned content reads).
// Versions written before the unique index existed may hold one token
// twice (concurrent publishes of it): the index's build then fails with a
// duplicate key, and NewMongoArtifacts repairs them, without deleting
// anything: it keeps each such token on its lowest version, removes it
// from the others (which stay readable, with no token, the content's
// token kept in their field "content"), logs each repair
// on cfg.Logger, and builds the index again.
func NewMongoArtifacts(ctx context.Context, db *mongo.Database, cfg ArtifactConfig) (*MongoArtifacts, error) {
	if db == nil {
		return nil, errors.New("new mongo artifacts: nil database")
	}
	if cfg.Artifacts == "" {
		cfg.Artifacts = "artifacts"
	}
	if cfg.Chunks == "" {
		cfg.Chunks = "artifact_chunks"
	}
	if cfg.Artifacts == cfg.Chunks {
		return nil, fmt.Errorf("new mongo artifacts: one collection %q for versions and chunks", cfg.Artifacts)
	}
	m := &MongoArtifacts{arts: db.Collection(cfg.Artifacts), chunks: db.Collection(cfg.Chunks),
		limits: cfg.Limits.withDefaults(), now: time.Now}
	indexes := []struct {
		coll  *mongo.Collection
		model mongo.IndexModel
	}{
		// Only versions have a token field: the index is sparse, so the
		// staged documents (and everything else) are not in it. FerretDB
		// ignores "sparse", but its SQLite unique index treats a missing
		// field as NULL, and NULLs as distinct: the same effect.
		{m.arts, mongo.IndexModel{Keys: bson.D{{Key: "token", Value: 1}}, Options: options.Index().SetName("token_unique").SetUnique(true).SetSparse(true)}},
		{m.chunks, mongo.IndexModel{Keys: bson.D{{Key: "at", Value: 1}, {Key: "token", Value: 1}}, Options: options.Index().SetName("at_token")}},
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	// One index per command (FerretDB 1.24 panics re-creating several).
	for i, ix := range indexes {
		_, err := ix.coll.Indexes().CreateOne(ctx, ix.model)
		// Versions written before the index existed may hold a token
		// twice (two concurrent publishes of it): the build then fails
		// with a duplicate key (MongoDB: code 11000; FerretDB: an
		// internal error from SQLite's UNIQUE constraint). On a failed
		// build, look for such tokens, repair them and build again, a
		// few times (a replica still running the old code may write
		// another pair); with none, the build's error stands.
		for range tokenRepairAttempts {
			if i != 0 || err == nil || ctx.Err() != nil {
				break
			}
			n, rerr := m.repairTokens(ctx, log)
			if rerr != nil {
				return nil, fmt.Errorf("new mongo artifacts: create index on %s: %w (repairing tokens held twice: %w)", ix.coll.Name(), err, rerr)
			}
			if n == 0 {
				break
			}
			_, err = ix.coll.Indexes().CreateOne(ctx, ix.model)
		}
		if err != nil {
			return nil, fmt.Errorf("new mongo artifacts: create index on %s: %w", ix.coll.Name(), err)
		}
	}
	return m, nil
}

// tokenRepairAttempts bounds the repairs of NewMongoArtifacts.
const tokenRepairAttempts = 3

// repairTokens keeps each token that several versions hold on the lowest
// of them and removes it ($unset) from the others, which stay readable
// (with no token; "content" keeps their content's token): one query (every version's _id, version and token),
// one update per version repaired. It logs each token repaired, and
// returns how many versions it repaired.
func (m *MongoArtifacts) repairTokens(ctx context.Context, log *slog.Logger) (int, error) {
	cur, err := m.arts.Find(ctx, bson.D{{Key: "token", Value: bson.D{{Key: "$exists", Value: true}}}},
		options.Find().SetProjection(bson.D{{Key: "token", Value: 1}, {Key: "version", Value: 1}}))
	if err != nil {
		return 0, err
	}
	var docs []struct {
		ID      string `bson:"_id"`
		Token   string `bson:"token"`
		Version int    `bson:"version"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return 0, err
	}
	byToken := map[string][]int{} // token -> indexes in docs
	for i, d := range docs {
		if d.Token != "" && !strings.HasPrefix(d.ID, "s#") {
			byToken[d.Token] = append(byToken[d.Token], i)
		}
	}
	repaired := 0
	for token, held := range byToken {
		if len(held) < 2 {
			continue
		}
		slices.SortFunc(held, func(a, b int) int { return docs[a].Version - docs[b].Version })
		var dropped []string
		for _, i := range held[1:] {
			_, err := m.arts.UpdateOne(ctx, bson.D{{Key: "_id", Value: docs[i].ID}, {Key: "token", Value: token}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "content", Value: token}}}, {Key: "$unset", Value: bson.D{{Key: "token", Value: ""}}}})
			if err != nil {
				return 0, err
			}
			dropped = append(dropped, docs[i].ID)
			repaired++
		}
		log.Warn("artifacts: a token held by several versions is kept on the lowest (the others stay readable, without it)",
			"token", token, "kept", docs[held[0]].ID, "unset", dropped)
	}
	return repaired, nil
}

type stagedDoc struct {
	ID           string    `bson:"_id"`
	Tenant       string    `bson:"tenant"`
	User         string    `bson:"user"`
	Conversation string    `bson:"conversation"`
	Scope        string    `bson:"scope"`
	Name         string    `bson:"name"`
	MIME         string    `bson:"mime"`
	Size         int64     `bson:"size"`
	Chunks       int       `bson:"chunks"`
	At           time.Time `bson:"at"`
	Pub          int       `bson:"pub,omitempty"`
}

type versionDoc struct {
	ID           string `bson:"_id"`
	Tenant       string `bson:"tenant"`
	User         string `bson:"user"`
	Conversation string `bson:"conversation"`
	Scope        string `bson:"scope"`
	Name         string `bson:"name"`
	Version      int    `bson:"version"`
	MIME         string `bson:"mime"`
	Size         int64  `bson:"size"`
	Chunks       int    `bson:"chunks"`
	Token        string `bson:"token"`
	// Content is the token of the content of a version that
	// NewMongoArtifacts repaired (its token removed, as another version
	// of the name holds it); empty otherwise.
	Content string    `bson:"content,omitempty"`
	At      time.Time `bson:"at"`
}

// contentToken is the token of d's content chunks.
func (d versionDoc) contentToken() string {
	if d.Token == "" {
		return d.Content
	}
	return d.Token
}

func (d versionDoc) artifact() Artifact {
	return Artifact{Name: d.Name, Version: d.Version, MIME: d.MIME, Size: d.Size, Token: d.Token,
		Conversation: d.Conversation, SavedAt: d.At.UTC()}
}

type chunkDoc struct {
	ID    string    `bson:"_id"`
	Token string    `bson:"token"`
	At    time.Time `bson:"at"`
	Data  []byte    `bson:"data"`
}

func stagedID(token string) string            { return "s#" + token }
func chunkID(token string, i int) string      { return fmt.Sprintf("%s#%05d", token, i) }
func versionPrefix(scope, name string) string { return scope + "#" + name + "#" }
func versionID(scope, name string, v int) string {
	return fmt.Sprintf("%s%08d", versionPrefix(scope, name), v)
}

// idRange is the filter of the _ids that start with prefix (prefix ends
// with '#'; '$' follows it, and names and identities hold neither).
func idRange(prefix string) bson.E {
	return bson.E{Key: "_id", Value: bson.D{{Key: "$gt", Value: prefix}, {Key: "$lt", Value: prefix[:len(prefix)-1] + "$"}}}
}

// scopeNames is the names of scope that have a version: one range query
// (projected on the name).
func (m *MongoArtifacts) scopeNames(ctx context.Context, scope string) (map[string]bool, error) {
	cur, err := m.arts.Find(ctx, bson.D{idRange(scope + "#")}, options.Find().SetProjection(bson.D{{Key: "name", Value: 1}}))
	if err != nil {
		return nil, err
	}
	var docs []struct {
		Name string `bson:"name"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	out := make(map[string]bool)
	for _, d := range docs {
		out[d.Name] = true
	}
	return out, nil
}

// Stage implements ArtifactService: the name count of the scope (one
// range query), the chunks (one insert), then the staged document (one
// insert), so a staged document implies its whole content.
func (m *MongoArtifacts) Stage(ctx context.Context, id events.Identity, s ArtifactSave) (string, error) {
	if err := validateStage(id, s, m.limits); err != nil {
		return "", err
	}
	scope := artifactScope(id, s.Name)
	names, err := m.scopeNames(ctx, scope)
	if err != nil {
		return "", fmt.Errorf("stage artifact %s: %w", s.Name, err)
	}
	if !names[s.Name] && len(names) >= m.limits.MaxNames {
		return "", fmt.Errorf("stage artifact %s: %w: %d names, at most %d", s.Name, ErrArtifactLimit, len(names), m.limits.MaxNames)
	}
	token, err := newArtifactToken()
	if err != nil {
		return "", err
	}
	at := m.now().UTC().Truncate(time.Millisecond)
	var docs []any
	for i := 0; i*ArtifactChunkBytes < len(s.Data); i++ {
		docs = append(docs, chunkDoc{ID: chunkID(token, i), Token: token, At: at, Data: s.Data[i*ArtifactChunkBytes : min(len(s.Data), (i+1)*ArtifactChunkBytes)]})
	}
	if len(docs) > 0 {
		if _, err := m.chunks.InsertMany(ctx, docs); err != nil {
			return "", fmt.Errorf("stage artifact %s: write content: %w", s.Name, err)
		}
	}
	doc := stagedDoc{ID: stagedID(token), Tenant: id.Tenant, User: id.User, Conversation: id.Conversation,
		Scope: scope, Name: s.Name, MIME: s.MIME, Size: int64(len(s.Data)), Chunks: len(docs), At: at}
	if _, err := m.arts.InsertOne(ctx, doc); err != nil {
		return "", fmt.Errorf("stage artifact %s: %w", s.Name, err)
	}
	return token, nil
}

// publishAttempts bounds the inserts of one version that find their
// number taken by a concurrent save of the same name.
const publishAttempts = 16

// Publish implements ArtifactService. Per token: the staged document;
// unless it is published, the version that holds the token, if any (a
// publish that stopped before marking it), and the name's newest version
// (one query each), the version's insert, and the staged document's mark.
func (m *MongoArtifacts) Publish(ctx context.Context, id events.Identity, tokens []string) ([]Artifact, error) {
	if err := id.Validate(); err != nil {
		return nil, fmt.Errorf("publish artifacts: %w", err)
	}
	if err := validateManifest(tokens); err != nil {
		return nil, fmt.Errorf("publish artifacts: %w", err)
	}
	var out []Artifact
	for _, t := range tokens {
		a, ok, err := m.publish(ctx, id, t)
		if err != nil {
			return nil, fmt.Errorf("publish artifact %s: %w", t, err)
		}
		if ok {
			out = append(out, a)
		}
	}
	return out, nil
}

func (m *MongoArtifacts) publish(ctx context.Context, id events.Identity, token string) (Artifact, bool, error) {
	st, found, err := findByID[stagedDoc](ctx, m.arts, stagedID(token))
	if err != nil || !found {
		return Artifact{}, false, err
	}
	if st.Tenant != id.Tenant || st.User != id.User || st.Conversation != id.Conversation {
		return Artifact{}, false, nil // not this identity's
	}
	vd := versionDoc{Tenant: st.Tenant, User: st.User, Conversation: st.Conversation, Scope: st.Scope, Name: st.Name,
		MIME: st.MIME, Size: st.Size, Chunks: st.Chunks, Token: token, At: st.At}
	prefix := versionPrefix(st.Scope, st.Name)
	if st.Pub == 0 {
		// A publish that inserted the version and stopped before marking
		// the staged document left the token in a version: reuse it.
		var have versionDoc
		err := m.arts.FindOne(ctx, bson.D{idRange(prefix), {Key: "token", Value: token}}).Decode(&have)
		switch {
		case err == nil:
			st.Pub = have.Version
		case !errors.Is(err, mongo.ErrNoDocuments):
			return Artifact{}, false, err
		}
	}
	if st.Pub > 0 {
		have, found, err := findByID[versionDoc](ctx, m.arts, versionID(st.Scope, st.Name, st.Pub))
		if err != nil || !found || have.Token != token {
			return Artifact{}, false, err // deleted since
		}
		return have.artifact(), true, m.markPublished(ctx, token, st.Pub)
	}
	var newest versionDoc
	err = m.arts.FindOne(ctx, bson.D{idRange(prefix)}, options.FindOne().SetSort(bson.D{{Key: "_id", Value: -1}})).Decode(&newest)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return Artifact{}, false, err
	}
	v := newest.Version + 1
	for range publishAttempts {
		vd.ID, vd.Version = versionID(st.Scope, st.Name, v), v
		_, err := m.arts.InsertOne(ctx, vd)
		if err == nil {
			return vd.artifact(), true, m.markPublished(ctx, token, v)
		}
		if !mongo.IsDuplicateKeyError(err) {
			return Artifact{}, false, err
		}
		// Either the number is taken (another save of the name) or the
		// token is (a concurrent publish of this token: the unique index
		// "token_unique" refuses a second version of it).
		var have versionDoc
		err = m.arts.FindOne(ctx, bson.D{idRange(prefix), {Key: "token", Value: token}}).Decode(&have)
		switch {
		case err == nil:
			return have.artifact(), true, m.markPublished(ctx, token, have.Version)
		case !errors.Is(err, mongo.ErrNoDocuments):
			return Artifact{}, false, err
		}
		v++ // a concurrent save of the name took it
	}
	return Artifact{}, false, fmt.Errorf("gave up after %d versions were taken", publishAttempts)
}

// markPublished records the version a staged save was published as.
func (m *MongoArtifacts) markPublished(ctx context.Context, token string, v int) error {
	_, err := m.arts.UpdateOne(ctx, bson.D{{Key: "_id", Value: stagedID(token)}}, bson.D{{Key: "$set", Value: bson.D{{Key: "pub", Value: v}}}})
	return err
}

// versions reads every version of scope (name == ""), or of one name.
func (m *MongoArtifacts) versions(ctx context.Context, scope, name string) ([]versionDoc, error) {
	prefix := scope + "#"
	if name != "" {
		prefix = versionPrefix(scope, name)
	}
	cur, err := m.arts.Find(ctx, bson.D{idRange(prefix)}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, err
	}
	var docs []versionDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	return docs, nil
}

// ListArtifacts implements ArtifactService: two range queries (the
// conversation's versions and the user's), every version's metadata.
func (m *MongoArtifacts) ListArtifacts(ctx context.Context, id events.Identity) ([]Artifact, error) {
	if err := id.Validate(); err != nil {
		return nil, fmt.Errorf("list artifacts: %w", err)
	}
	out := []Artifact{}
	for _, scope := range []string{id.Key(), artifactScope(id, UserArtifactPrefix)} {
		docs, err := m.versions(ctx, scope, "")
		if err != nil {
			return nil, fmt.Errorf("list artifacts: %w", err)
		}
		newest := make(map[string]versionDoc)
		for _, d := range docs {
			if d.Version > newest[d.Name].Version {
				newest[d.Name] = d
			}
		}
		for _, d := range newest {
			out = append(out, d.artifact())
		}
	}
	slices.SortFunc(out, func(a, b Artifact) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// OpenArtifact implements ArtifactService: the version (one query) and
// its chunks (one range query).
func (m *MongoArtifacts) OpenArtifact(ctx context.Context, id events.Identity, name string, version int) (Artifact, []byte, error) {
	if err := validateRead("open", id, name); err != nil {
		return Artifact{}, nil, err
	}
	if version < 0 {
		return Artifact{}, nil, fmt.Errorf("open artifact %s: %w version %d", name, events.ErrInvalid, version)
	}
	scope := artifactScope(id, name)
	var d versionDoc
	var err error
	if version == 0 {
		err = m.arts.FindOne(ctx, bson.D{idRange(versionPrefix(scope, name))}, options.FindOne().SetSort(bson.D{{Key: "_id", Value: -1}})).Decode(&d)
	} else {
		err = m.arts.FindOne(ctx, bson.D{{Key: "_id", Value: versionID(scope, name, version)}}).Decode(&d)
	}
	if errors.Is(err, mongo.ErrNoDocuments) {
		return Artifact{}, nil, fmt.Errorf("open artifact %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return Artifact{}, nil, fmt.Errorf("open artifact %s: %w", name, err)
	}
	cur, err := m.chunks.Find(ctx, bson.D{idRange(d.contentToken() + "#")}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return Artifact{}, nil, fmt.Errorf("open artifact %s: %w", name, err)
	}
	var chunks []chunkDoc
	if err := cur.All(ctx, &chunks); err != nil {
		return Artifact{}, nil, fmt.Errorf("open artifact %s: %w", name, err)
	}
	data := make([]byte, 0, d.Size)
	for _, c := range chunks {
		data = append(data, c.Data...)
	}
	if len(chunks) != d.Chunks || int64(len(data)) != d.Size {
		return Artifact{}, nil, fmt.Errorf("open artifact %s version %d: %d chunks of %d bytes, want %d of %d", name, d.Version, len(chunks), len(data), d.Chunks, d.Size)
	}
	return d.artifact(), data, nil
}

// DeleteArtifact implements ArtifactService: the name's versions (one
// range query) and its staged saves, published or not (one query), then
// those staged saves, their chunks and the versions. The staged saves go
// first, so a Publish of the name's tokens that comes later (a
// redelivered request, or a run that saved before the delete and commits
// after it) finds nothing to publish.
func (m *MongoArtifacts) DeleteArtifact(ctx context.Context, id events.Identity, name string) error {
	if err := validateRead("delete", id, name); err != nil {
		return err
	}
	scope := artifactScope(id, name)
	docs, err := m.versions(ctx, scope, name)
	if err != nil {
		return fmt.Errorf("delete artifact %s: %w", name, err)
	}
	if len(docs) == 0 {
		return fmt.Errorf("delete artifact %s: %w", name, ErrNotFound)
	}
	var staged, tokens bson.A
	for _, d := range docs {
		staged, tokens = append(staged, stagedID(d.contentToken())), append(tokens, d.contentToken())
	}
	// The staged saves not published yet: committed by a turn whose
	// publish has not run, or of a run still going.
	cur, err := m.arts.Find(ctx, bson.D{idRange("s#"), {Key: "scope", Value: scope}, {Key: "name", Value: name},
		{Key: "pub", Value: bson.D{{Key: "$exists", Value: false}}}}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return fmt.Errorf("delete artifact %s: %w", name, err)
	}
	var pending []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &pending); err != nil {
		return fmt.Errorf("delete artifact %s: %w", name, err)
	}
	for _, p := range pending {
		staged, tokens = append(staged, p.ID), append(tokens, strings.TrimPrefix(p.ID, "s#"))
	}
	if _, err := m.arts.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: staged}}}}); err != nil {
		return fmt.Errorf("delete artifact %s: %w", name, err)
	}
	if _, err := m.chunks.DeleteMany(ctx, bson.D{{Key: "token", Value: bson.D{{Key: "$in", Value: tokens}}}}); err != nil {
		return fmt.Errorf("delete artifact %s: %w", name, err)
	}
	if _, err := m.arts.DeleteMany(ctx, bson.D{idRange(versionPrefix(scope, name))}); err != nil {
		return fmt.Errorf("delete artifact %s: %w", name, err)
	}
	return nil
}

// SweepArtifacts implements ArtifactService: the unpublished staged
// documents older than before (one query), each (one conditional delete)
// and then their chunks (one delete); then the orphaned content (see
// sweepOrphans).
func (m *MongoArtifacts) SweepArtifacts(ctx context.Context, before time.Time) (int, error) {
	n, err := m.sweepStaged(ctx, before)
	if err != nil {
		return n, err
	}
	o, err := m.sweepOrphans(ctx, before)
	return n + o, err
}

// orphanBatch bounds the tokens of one query or delete of sweepOrphans.
const orphanBatch = 500

// sweepOrphans deletes the chunks older than before whose staged document
// is gone: left by a Stage that failed (or a process that died) between
// writing the content and the staged document, or by a sweep or a delete
// that stopped between a staged document and its chunks. Chunks without a
// staged document that are younger than before are a Stage in flight, and
// stay. It reads the tokens of every chunk older than before (one query,
// projected on the token; its cost grows with the content stored), then
// per orphanBatch tokens which of them have a staged document (one
// query) and deletes the chunks of those that have none (one delete). It
// returns how many tokens' chunks it deleted.
func (m *MongoArtifacts) sweepOrphans(ctx context.Context, before time.Time) (int, error) {
	cur, err := m.chunks.Find(ctx, bson.D{{Key: "at", Value: bson.D{{Key: "$lt", Value: before}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 0}, {Key: "token", Value: 1}}))
	if err != nil {
		return 0, fmt.Errorf("sweep orphaned artifact content: %w", err)
	}
	seen := make(map[string]bool)
	var tokens []string
	for cur.Next(ctx) {
		t, ok := cur.Current.Lookup("token").StringValueOK()
		if ok && !seen[t] {
			seen[t] = true
			tokens = append(tokens, t)
		}
	}
	if err := errors.Join(cur.Err(), cur.Close(ctx)); err != nil {
		return 0, fmt.Errorf("sweep orphaned artifact content: %w", err)
	}
	n := 0
	for batch := range slices.Chunk(tokens, orphanBatch) {
		ids := make(bson.A, len(batch))
		for i, t := range batch {
			ids[i] = stagedID(t)
		}
		cur, err := m.arts.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
		if err != nil {
			return n, fmt.Errorf("sweep orphaned artifact content: %w", err)
		}
		var live []struct {
			ID string `bson:"_id"`
		}
		if err := cur.All(ctx, &live); err != nil {
			return n, fmt.Errorf("sweep orphaned artifact content: %w", err)
		}
		alive := make(map[string]bool, len(live))
		for _, l := range live {
			alive[strings.TrimPrefix(l.ID, "s#")] = true
		}
		var orphans bson.A
		for _, t := range batch {
			if !alive[t] {
				orphans = append(orphans, t)
			}
		}
		if len(orphans) == 0 {
			continue
		}
		res, err := m.chunks.DeleteMany(ctx, bson.D{{Key: "token", Value: bson.D{{Key: "$in", Value: orphans}}},
			{Key: "at", Value: bson.D{{Key: "$lt", Value: before}}}})
		if err != nil {
			return n, fmt.Errorf("sweep orphaned artifact content: %w", err)
		}
		if res.DeletedCount > 0 {
			n += len(orphans) // several sweeps at once may count one twice
		}
	}
	return n, nil
}

// sweepStaged drops the unpublished staged saves older than before.
func (m *MongoArtifacts) sweepStaged(ctx context.Context, before time.Time) (int, error) {
	cur, err := m.arts.Find(ctx, bson.D{idRange("s#"), {Key: "pub", Value: bson.D{{Key: "$exists", Value: false}}},
		{Key: "at", Value: bson.D{{Key: "$lt", Value: before}}}}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return 0, fmt.Errorf("sweep artifacts: %w", err)
	}
	var docs []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return 0, fmt.Errorf("sweep artifacts: %w", err)
	}
	if len(docs) == 0 {
		return 0, nil
	}
	// Each staged document goes first, on the condition that it is still
	// unpublished, and only then its chunks: a save published meanwhile
	// keeps its content. (A Publish that read the staged document before
	// its delete can still publish a version whose content is gone: the
	// cut must be far older than any redelivery, hours, not seconds.)
	var tokens bson.A
	for _, d := range docs {
		res, err := m.arts.DeleteOne(ctx, bson.D{{Key: "_id", Value: d.ID}, {Key: "pub", Value: bson.D{{Key: "$exists", Value: false}}}})
		if err != nil {
			return 0, fmt.Errorf("sweep artifacts: %w", err)
		}
		if res.DeletedCount == 1 {
			tokens = append(tokens, strings.TrimPrefix(d.ID, "s#"))
		}
	}
	if len(tokens) > 0 {
		if _, err := m.chunks.DeleteMany(ctx, bson.D{{Key: "token", Value: bson.D{{Key: "$in", Value: tokens}}}}); err != nil {
			return 0, fmt.Errorf("sweep artifacts: %w", err)
		}
	}
	return len(tokens), nil
}

var _ ManifestReader = (*MongoStore)(nil)

// TurnArtifacts implements ManifestReader: the turn of the request (one
// query).
func (s *MongoStore) TurnArtifacts(ctx context.Context, id events.Identity, requestID string) ([]string, bool, error) {
	if err := id.Validate(); err != nil {
		return nil, false, fmt.Errorf("turn artifacts: %w", err)
	}
	d, found, err := s.turnOfRequest(ctx, id, requestID)
	if err != nil {
		return nil, false, fmt.Errorf("turn artifacts: %w", err)
	}
	return d.Artifacts, found, nil
}
