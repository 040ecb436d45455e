package history

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// MongoConfig configures a MongoStore. The zero value is ready to use.
type MongoConfig struct {
	// Conversations is the collection of conversation documents (one per
	// identity, holding the committed turn count). Default "conversations".
	Conversations string
	// Turns is the collection of turn documents (one per turn: the atomic
	// commit point). Default "turns".
	Turns string
	// Requests is the collection of request documents (one per committed
	// request id: the idempotency record). Default "requests".
	Requests string
	// Summaries is the collection of conversation summaries (one per
	// conversation). Default "summaries".
	Summaries string
	// Checkpoints is the collection of agent checkpoints (one per
	// interrupted run). Default "checkpoints".
	Checkpoints string
	// ReadConcurrency bounds the point reads one Window or List call has in
	// flight. Default 8.
	ReadConcurrency int
	// CommitAttempts bounds the turn inserts of one Commit: each after the
	// first follows a concurrent commit of the same conversation taking the
	// turn it tried. Turns of one conversation are normally committed one
	// at a time; with k racing committers one wins each round, so a commit
	// may lose about k-1 times per turn it waits for. Default 64.
	CommitAttempts int
	// Now stamps turns whose UserAt or CommittedAt is zero. Default time.Now.
	Now func() time.Time
}

func (c MongoConfig) withDefaults() MongoConfig {
	if c.Conversations == "" {
		c.Conversations = "conversations"
	}
	if c.Turns == "" {
		c.Turns = "turns"
	}
	if c.Requests == "" {
		c.Requests = "requests"
	}
	if c.Summaries == "" {
		c.Summaries = "summaries"
	}
	if c.Checkpoints == "" {
		c.Checkpoints = "checkpoints"
	}
	if c.ReadConcurrency == 0 {
		c.ReadConcurrency = 8
	}
	if c.CommitAttempts == 0 {
		c.CommitAttempts = 64
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports every problem of the configuration (after defaults).
func (c MongoConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.ReadConcurrency < 1 {
		errs = append(errs, fmt.Errorf("read concurrency %d: must be at least 1", c.ReadConcurrency))
	}
	if c.CommitAttempts < 1 {
		errs = append(errs, fmt.Errorf("commit attempts %d: must be at least 1", c.CommitAttempts))
	}
	names := []string{c.Conversations, c.Turns, c.Requests, c.Summaries, c.Checkpoints}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if seen[n] {
			errs = append(errs, fmt.Errorf("collections %q: must be distinct", names))
			break
		}
		seen[n] = true
	}
	return errors.Join(errs...)
}

// MongoStore is the Store on MongoDB or FerretDB.
//
// Every hot read is a point lookup by _id (FerretDB's SQLite backend pushes
// down nothing else) and every write relies only on single-document
// atomicity and unique _ids (FerretDB has no transactions):
//
//   - turns/<key>#<n, 12 digits> is the commit point: one document holds
//     both messages of turn n, so a turn is stored whole or not at all.
//   - requests/<key>#r#<request id> records which turn a request id landed
//     on, for idempotency and Lookup.
//   - conversations/<key> holds turns, the highest turn number known
//     committed. It is rolled forward monotonically after each commit and
//     may lag behind the turns collection (a crash between the commit point
//     and the roll-forward; FerretDB's non-atomic read-modify-write updates
//     under concurrent commits). Readers therefore also probe the turns
//     after it, which costs one extra point read done concurrently with the
//     others.
//
// FerretDB 1.24's SQLite backend does not use its _id index for the _id
// filter it pushes down (the WHERE expression differs from the index
// expression), so there a point read scans the table up to the document,
// or all of it when the document is missing.
type MongoStore struct {
	cfg       MongoConfig
	convs     *mongo.Collection
	turns     *mongo.Collection
	reqs      *mongo.Collection
	summaries *mongo.Collection
	cps       *mongo.Collection
}

var _ Store = (*MongoStore)(nil)

// NewMongoStore returns a store on db and creates its secondary indexes
// (idempotent). They serve real MongoDB and the rare query by request id;
// the hot paths read by _id only. The request id's unique index also
// enforces, on both backends, that a request id lands on one turn.
func NewMongoStore(ctx context.Context, db *mongo.Database, cfg MongoConfig) (*MongoStore, error) {
	if db == nil {
		return nil, errors.New("new mongo store: nil database")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new mongo store: %w", err)
	}
	cfg = cfg.withDefaults()
	s := &MongoStore{
		cfg:   cfg,
		convs: db.Collection(cfg.Conversations),
		turns: db.Collection(cfg.Turns),
		reqs:  db.Collection(cfg.Requests),

		summaries: db.Collection(cfg.Summaries),
		cps:       db.Collection(cfg.Checkpoints),
	}
	if err := s.createIndexes(ctx); err != nil {
		return nil, fmt.Errorf("new mongo store: %w", err)
	}
	return s, nil
}

func (s *MongoStore) createIndexes(ctx context.Context) error {
	identity := func(last string) bson.D {
		return bson.D{{Key: "tenant", Value: 1}, {Key: "user", Value: 1}, {Key: "conversation", Value: 1}, {Key: last, Value: 1}}
	}
	indexes := []struct {
		coll  *mongo.Collection
		model mongo.IndexModel
	}{
		{s.turns, mongo.IndexModel{Keys: identity("n"), Options: options.Index().SetName("identity_n").SetUnique(true)}},
		// A request id lands on one turn only, even when two commits of it
		// race with a third commit that moves the conversation on.
		{s.turns, mongo.IndexModel{Keys: identity("request_id"), Options: options.Index().SetName("identity_request_id").SetUnique(true)}},
		{s.convs, mongo.IndexModel{
			Keys:    bson.D{{Key: "tenant", Value: 1}, {Key: "user", Value: 1}, {Key: "updated_at", Value: -1}},
			Options: options.Index().SetName("tenant_user_updated_at"),
		}},
	}
	// One index per command: FerretDB 1.24 panics when a createIndexes
	// command re-creates more than one existing index.
	for _, ix := range indexes {
		if _, err := ix.coll.Indexes().CreateOne(ctx, ix.model); err != nil {
			return fmt.Errorf("create index on %s: %w", ix.coll.Name(), err)
		}
	}
	return nil
}

// Documents. Field names are part of the stored format.

type convDoc struct {
	ID           string    `bson:"_id"`
	Tenant       string    `bson:"tenant"`
	User         string    `bson:"user"`
	Conversation string    `bson:"conversation"`
	Turns        int64     `bson:"turns"`
	CreatedAt    time.Time `bson:"created_at"`
	UpdatedAt    time.Time `bson:"updated_at"`
}

type turnDoc struct {
	ID           string `bson:"_id"`
	Tenant       string `bson:"tenant"`
	User         string `bson:"user"`
	Conversation string `bson:"conversation"`
	N            int64  `bson:"n"`
	RequestID    string `bson:"request_id"`
	// UserMessage is stored as "user_message": "user" is the identity field.
	UserMessage userDoc      `bson:"user_message"`
	Assistant   assistantDoc `bson:"assistant"`
	// Source is the request's record (absent for turns committed without).
	Source *sourceDoc `bson:"source,omitempty"`
}

type sourceDoc struct {
	Topic     string    `bson:"topic"`
	Partition int       `bson:"partition"`
	Offset    int64     `bson:"offset"`
	Time      time.Time `bson:"time"`
}

type userDoc struct {
	Content   string    `bson:"content"`
	CreatedAt time.Time `bson:"created_at"`
}

type assistantDoc struct {
	Content   string        `bson:"content"`
	Agent     string        `bson:"agent"`
	Status    events.Status `bson:"status"`
	CreatedAt time.Time     `bson:"created_at"`
	// Usage and Interrupt are absent when unknown or not interrupted.
	Usage     *usageDoc     `bson:"usage,omitempty"`
	Interrupt *interruptDoc `bson:"interrupt,omitempty"`
}

type usageDoc struct {
	Prompt     int64 `bson:"prompt"`
	Completion int64 `bson:"completion"`
	Total      int64 `bson:"total"`
}

type interruptDoc struct {
	Agent    string   `bson:"agent"`
	Tool     string   `bson:"tool"`
	Question string   `bson:"question"`
	Targets  []string `bson:"targets"`
}

func toUsageDoc(u *events.Usage) *usageDoc {
	if u == nil {
		return nil
	}
	return &usageDoc{Prompt: u.PromptTokens, Completion: u.CompletionTokens, Total: u.TotalTokens}
}

func (d *usageDoc) usage() *events.Usage {
	if d == nil {
		return nil
	}
	return &events.Usage{PromptTokens: d.Prompt, CompletionTokens: d.Completion, TotalTokens: d.Total}
}

func toInterruptDoc(in *Interrupt) *interruptDoc {
	if in == nil {
		return nil
	}
	return &interruptDoc{Agent: in.Agent, Tool: in.Tool, Question: in.Question, Targets: in.Targets}
}

func (d *interruptDoc) interrupt() *Interrupt {
	if d == nil {
		return nil
	}
	return &Interrupt{Agent: d.Agent, Tool: d.Tool, Question: d.Question, Targets: d.Targets}
}

type requestDoc struct {
	ID string `bson:"_id"`
	// N is the request's turn, or 0 for an outcome without a turn.
	N         int64         `bson:"n"`
	Status    events.Status `bson:"status"`
	CreatedAt time.Time     `bson:"created_at"`
}

func turnID(key string, n int64) string { return fmt.Sprintf("%s#%012d", key, n) }

func requestDocID(key, requestID string) string { return key + "#r#" + requestID }

// newTurnDoc is the document of turn n; t must be normalized.
func newTurnDoc(id events.Identity, n int64, t Turn) turnDoc {
	return turnDoc{
		ID:           turnID(id.Key(), n),
		Tenant:       id.Tenant,
		User:         id.User,
		Conversation: id.Conversation,
		N:            n,
		RequestID:    t.RequestID,
		UserMessage:  userDoc{Content: t.User, CreatedAt: t.UserAt},
		Assistant: assistantDoc{
			Content:   t.Answer,
			Agent:     t.Agent,
			Status:    t.Status,
			CreatedAt: t.CommittedAt,
			Usage:     toUsageDoc(t.Usage),
			Interrupt: toInterruptDoc(t.Interrupt),
		},
		Source: toSourceDoc(t.Source),
	}
}

func toSourceDoc(src *Source) *sourceDoc {
	if src == nil {
		return nil
	}
	return &sourceDoc{Topic: src.Topic, Partition: src.Partition, Offset: src.Offset, Time: storedTime(src.Time, time.Now)}
}

func (d *sourceDoc) source() *Source {
	if d == nil {
		return nil
	}
	return &Source{Topic: d.Topic, Partition: d.Partition, Offset: d.Offset, Time: d.Time.UTC()}
}

func (d turnDoc) numbered() numbered {
	return numbered{n: d.N, t: Turn{
		RequestID:   d.RequestID,
		User:        d.UserMessage.Content,
		UserAt:      d.UserMessage.CreatedAt.UTC(),
		Answer:      d.Assistant.Content,
		Agent:       d.Assistant.Agent,
		Status:      d.Assistant.Status,
		CommittedAt: d.Assistant.CreatedAt.UTC(),
		Source:      d.Source.source(),
		Usage:       d.Assistant.Usage.usage(),
		Interrupt:   d.Assistant.Interrupt.interrupt(),
	}}
}

// newRequestDoc is the request document of a committed turn: a function of
// the turn alone, so every writer of it writes the same document.
func newRequestDoc(key string, x numbered) requestDoc {
	return requestDoc{
		ID:        requestDocID(key, x.t.RequestID),
		N:         x.n,
		Status:    x.t.Status,
		CreatedAt: x.t.CommittedAt,
	}
}

// Commit implements Store. Protocol (each step is a single-document
// operation; a crash or a retry at any point converges):
//
//  1. requests/_id exists: roll the conversation forward to its turn and
//     report a duplicate.
//  2. n := conversations.turns + 1 (missing document: 0).
//  3. Insert turns/_id(n): the commit point. On a duplicate key, read turn
//     n: the same request id means an earlier attempt got this far (go on
//     with n, reporting a duplicate). Another request id means the
//     conversation document lags: read on to the first free turn and
//     insert there (bounded by CommitAttempts inserts). A free turn n
//     means the request id's unique index refused it: the request landed
//     at another turn, found by that index.
//  4. Insert requests/_id (a duplicate key is fine).
//  5. Roll the conversation forward to n.
func (s *MongoStore) Commit(ctx context.Context, id events.Identity, t Turn) (Committed, error) {
	if err := id.Validate(); err != nil {
		return Committed{}, fmt.Errorf("commit: %w", err)
	}
	if err := t.Validate(); err != nil {
		return Committed{}, fmt.Errorf("commit: %w", err)
	}
	t = normalize(t, s.cfg.Now)
	key := id.Key()

	req, found, err := findByID[requestDoc](ctx, s.reqs, requestDocID(key, t.RequestID))
	if err != nil {
		return Committed{}, fmt.Errorf("commit: read request: %w", err)
	}
	if found {
		if req.N == 0 { // an outcome without a turn was decided first
			return Committed{Status: req.Status, Duplicate: true}, nil
		}
		if err := s.rollForward(ctx, id, req.N, req.CreatedAt); err != nil {
			return Committed{}, fmt.Errorf("commit: %w", err)
		}
		return Committed{N: req.N, Status: req.Status, Duplicate: true}, nil
	}

	top, err := s.convTurns(ctx, key)
	if err != nil {
		return Committed{}, fmt.Errorf("commit: %w", err)
	}
	n := top + 1
	if t.Source != nil && n > 1 {
		// Fencing: the turn before the one we take must come from an older
		// record. Every later candidate predecessor is checked below, as
		// the slot it holds is found taken.
		prev, found, err := findByID[turnDoc](ctx, s.turns, turnID(key, n-1))
		if err != nil {
			return Committed{}, fmt.Errorf("commit: read turn %d: %w", n-1, err)
		}
		if found && t.Source.Fences(prev.Source.source()) {
			return Committed{}, fmt.Errorf("commit: %w", ErrFenced)
		}
	}
	for range s.cfg.CommitAttempts {
		doc := newTurnDoc(id, n, t)
		_, err := s.turns.InsertOne(ctx, doc)
		switch {
		case err == nil:
			return s.finishCommit(ctx, id, doc.numbered(), false)
		case !mongo.IsDuplicateKeyError(err):
			return Committed{}, fmt.Errorf("commit: insert turn %d: %w", n, err)
		}

		have, found, err := findByID[turnDoc](ctx, s.turns, doc.ID)
		if err != nil {
			return Committed{}, fmt.Errorf("commit: read turn %d: %w", n, err)
		}
		if !found {
			// The request id's unique index refused the insert: a
			// concurrent attempt committed this request at another turn
			// (rare; a collection scan on FerretDB, hence off the normal
			// path).
			have, found, err = s.turnOfRequest(ctx, id, t.RequestID)
			if err != nil {
				return Committed{}, fmt.Errorf("commit: %w", err)
			}
			if !found {
				continue // it was there a moment ago; nothing is ever deleted
			}
		}
		if have.RequestID == t.RequestID {
			return s.finishCommit(ctx, id, have.numbered(), true)
		}
		if t.Source.Fences(have.Source.source()) {
			return Committed{}, fmt.Errorf("commit: %w", ErrFenced)
		}
		// Another request holds turn n: the conversation document lags.
		// Point reads of the turns after n find the first free one more
		// cheaply than failed inserts would, and with a smaller window
		// for another commit to take it first.
		for {
			n++
			next, found, err := findByID[turnDoc](ctx, s.turns, turnID(key, n))
			if err != nil {
				return Committed{}, fmt.Errorf("commit: read turn %d: %w", n, err)
			}
			if !found {
				break
			}
			if next.RequestID == t.RequestID {
				return s.finishCommit(ctx, id, next.numbered(), true)
			}
			if t.Source.Fences(next.Source.source()) {
				return Committed{}, fmt.Errorf("commit: %w", ErrFenced)
			}
		}
	}
	return Committed{}, fmt.Errorf("commit: gave up after %d inserts found their turn taken", s.cfg.CommitAttempts)
}

// finishCommit runs steps 4 and 5 for a turn that is committed.
func (s *MongoStore) finishCommit(ctx context.Context, id events.Identity, x numbered, duplicate bool) (Committed, error) {
	key := id.Key()
	if _, err := s.reqs.InsertOne(ctx, newRequestDoc(key, x)); err != nil && !mongo.IsDuplicateKeyError(err) {
		return Committed{}, fmt.Errorf("commit: record request: %w", err)
	}
	if err := s.rollForward(ctx, id, x.n, x.t.CommittedAt); err != nil {
		return Committed{}, fmt.Errorf("commit: %w", err)
	}
	return Committed{N: x.n, Status: x.t.Status, Duplicate: duplicate}, nil
}

// rollForward raises the conversation's turn count to at least n, creating
// the document if needed. Every operator is monotonic ($max, $min) so
// concurrent and repeated roll-forwards commute (atomically on MongoDB;
// FerretDB's updates are read-modify-write, hence the readers' probe). The
// filter is the _id alone because FerretDB pushes down nothing else: with
// {turns: {$lt: n}} added it decodes every document of the collection on
// every commit. Issue #4's fencing condition is to be added to filter.
func (s *MongoStore) rollForward(ctx context.Context, id events.Identity, n int64, at time.Time) error {
	filter := bson.D{{Key: "_id", Value: id.Key()}}
	update := bson.D{
		{Key: "$max", Value: bson.D{{Key: "turns", Value: n}, {Key: "updated_at", Value: at}}},
		{Key: "$min", Value: bson.D{{Key: "created_at", Value: at}}},
		{Key: "$setOnInsert", Value: bson.D{
			{Key: "tenant", Value: id.Tenant},
			{Key: "user", Value: id.User},
			{Key: "conversation", Value: id.Conversation},
		}},
	}
	opts := options.UpdateOne().SetUpsert(true)
	_, err := s.convs.UpdateOne(ctx, filter, update, opts)
	if mongo.IsDuplicateKeyError(err) {
		// Two first commits upserted at once and this one lost the insert:
		// the document exists now, so the update matches it.
		_, err = s.convs.UpdateOne(ctx, filter, update, opts)
	}
	if err != nil {
		return fmt.Errorf("roll conversation forward to %d: %w", n, err)
	}
	return nil
}

// turnOfRequest finds the turn of a request id by a secondary-index query.
func (s *MongoStore) turnOfRequest(ctx context.Context, id events.Identity, requestID string) (turnDoc, bool, error) {
	var d turnDoc
	err := s.turns.FindOne(ctx, bson.D{
		{Key: "tenant", Value: id.Tenant},
		{Key: "user", Value: id.User},
		{Key: "conversation", Value: id.Conversation},
		{Key: "request_id", Value: requestID},
	}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return turnDoc{}, false, nil
	}
	if err != nil {
		return turnDoc{}, false, fmt.Errorf("find turn of request: %w", err)
	}
	return d, true, nil
}

// Lookup implements Store.
func (s *MongoStore) Lookup(ctx context.Context, id events.Identity, requestID string) (Committed, bool, error) {
	if err := id.Validate(); err != nil {
		return Committed{}, false, fmt.Errorf("lookup: %w", err)
	}
	if err := events.ValidateID("request_id", requestID); err != nil {
		return Committed{}, false, fmt.Errorf("lookup: %w", err)
	}
	req, found, err := findByID[requestDoc](ctx, s.reqs, requestDocID(id.Key(), requestID))
	if err != nil {
		return Committed{}, false, fmt.Errorf("lookup: %w", err)
	}
	if !found {
		return Committed{}, false, nil
	}
	return Committed{N: req.N, Status: req.Status}, true, nil
}

// RecordOutcome implements Store: the request document with turn 0 is the
// decision; its unique _id makes the first decision win.
func (s *MongoStore) RecordOutcome(ctx context.Context, id events.Identity, requestID string, status events.Status) (Committed, error) {
	if err := validateOutcome(id, requestID, status); err != nil {
		return Committed{}, err
	}
	doc := requestDoc{ID: requestDocID(id.Key(), requestID), Status: status, CreatedAt: storedTime(time.Time{}, s.cfg.Now)}
	_, err := s.reqs.InsertOne(ctx, doc)
	if err == nil {
		return Committed{Status: status}, nil
	}
	if !mongo.IsDuplicateKeyError(err) {
		return Committed{}, fmt.Errorf("record outcome: %w", err)
	}
	have, found, err := findByID[requestDoc](ctx, s.reqs, doc.ID)
	if err != nil || !found {
		return Committed{}, fmt.Errorf("record outcome: read request: %v (found %v)", err, found)
	}
	return Committed{N: have.N, Status: have.Status, Duplicate: true}, nil
}

// Window implements Store: one read of the conversation document, then
// point reads of the newest ceil(n/2) turns (and the probe past them).
func (s *MongoStore) Window(ctx context.Context, id events.Identity, n int) ([]Message, error) {
	if err := id.Validate(); err != nil {
		return nil, fmt.Errorf("window: %w", err)
	}
	if n <= 0 {
		return []Message{}, nil
	}
	key := id.Key()
	top, err := s.convTurns(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("window: %w", err)
	}
	turns, err := s.newestTurns(ctx, key, top, windowTurns(n))
	if err != nil {
		return nil, fmt.Errorf("window: %w", err)
	}
	return windowMessages(turns, n), nil
}

// List implements Store. limit is clamped to 1..MaxListLimit.
func (s *MongoStore) List(ctx context.Context, id events.Identity, before int64, limit int) (Page, error) {
	if err := id.Validate(); err != nil {
		return Page{}, fmt.Errorf("list: %w", err)
	}
	key := id.Key()
	top, err := s.convTurns(ctx, key)
	if err != nil {
		return Page{}, fmt.Errorf("list: %w", err)
	}
	if top == 0 || before <= 0 || before > 2*top+1 {
		// The page ends at the newest message, past what the conversation
		// document may vouch for: probe.
		turns, err := s.newestTurns(ctx, key, top, windowTurns(clampLimit(limit)))
		if err != nil {
			return Page{}, fmt.Errorf("list: %w", err)
		}
		if len(turns) == 0 {
			return Page{}, fmt.Errorf("list %s: %w", id.Conversation, ErrNotFound)
		}
		newest := turns[len(turns)-1].n
		if before <= 0 || before > 2*newest {
			lo, hi := listRange(2*newest, before, limit)
			return Page{Messages: flatten(turns, lo, hi), NextBefore: nextBefore(lo, hi)}, nil
		}
		top = newest // the document lagged and before lies within the turns probed
	}
	lo, hi := listRange(2*top, before, limit)
	if lo > hi {
		return Page{Messages: []Message{}}, nil
	}
	turns, err := s.turnRange(ctx, key, turnOf(lo), turnOf(hi))
	if err != nil {
		return Page{}, fmt.Errorf("list: %w", err)
	}
	return Page{Messages: flatten(turns, lo, hi), NextBefore: nextBefore(lo, hi)}, nil
}

// convTurns reads the conversation document's turn count (0 when missing).
func (s *MongoStore) convTurns(ctx context.Context, key string) (int64, error) {
	c, _, err := findByID[convDoc](ctx, s.convs, key)
	if err != nil {
		return 0, fmt.Errorf("read conversation: %w", err)
	}
	return c.Turns, nil
}

// newestTurns returns the newest k turns, oldest first, given top, the
// conversation document's turn count. It reads turns top-k+1 … top+1 at
// once; when turn top+1 exists (the document lags) it reads on while turns
// exist.
func (s *MongoStore) newestTurns(ctx context.Context, key string, top, k int64) ([]numbered, error) {
	lo := max(1, top-k+1)
	docs, found, err := s.fetchTurns(ctx, key, lo, top+1)
	if err != nil {
		return nil, err
	}
	out := make([]numbered, 0, len(docs))
	for i, d := range docs[:len(docs)-1] {
		if !found[i] {
			return nil, fmt.Errorf("turn %d of %d is missing", lo+int64(i), top)
		}
		out = append(out, d.numbered())
	}
	if found[len(docs)-1] {
		out = append(out, docs[len(docs)-1].numbered())
		for n := top + 2; ; n++ {
			d, ok, err := findByID[turnDoc](ctx, s.turns, turnID(key, n))
			if err != nil {
				return nil, fmt.Errorf("read turn %d: %w", n, err)
			}
			if !ok {
				break
			}
			out = append(out, d.numbered())
		}
	}
	if int64(len(out)) > k {
		out = out[int64(len(out))-k:]
	}
	return out, nil
}

// turnRange reads turns lo … hi, all of which must exist.
func (s *MongoStore) turnRange(ctx context.Context, key string, lo, hi int64) ([]numbered, error) {
	docs, found, err := s.fetchTurns(ctx, key, lo, hi)
	if err != nil {
		return nil, err
	}
	out := make([]numbered, len(docs))
	for i, d := range docs {
		if !found[i] {
			return nil, fmt.Errorf("turn %d is missing", lo+int64(i))
		}
		out[i] = d.numbered()
	}
	return out, nil
}

// fetchTurns point-reads turns lo … hi with at most ReadConcurrency reads
// in flight, and reports which exist. It returns when every read it started
// has returned.
func (s *MongoStore) fetchTurns(ctx context.Context, key string, lo, hi int64) ([]turnDoc, []bool, error) {
	size := hi - lo + 1
	docs := make([]turnDoc, size)
	found := make([]bool, size)
	readCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next    atomic.Int64 // index of the next turn to read
		errOnce sync.Once
		first   error // the first read error; written once under errOnce
		wg      sync.WaitGroup
	)
	for range min(int64(s.cfg.ReadConcurrency), size) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < size && readCtx.Err() == nil; i = next.Add(1) - 1 {
				n := lo + i
				var err error
				docs[i], found[i], err = findByID[turnDoc](readCtx, s.turns, turnID(key, n))
				if err != nil {
					errOnce.Do(func() { first = fmt.Errorf("read turn %d: %w", n, err) })
					cancel()
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("read turns: %w", err)
	}
	return docs, found, nil
}

// findByID point-reads the document with _id id; found is false when there
// is none.
func findByID[T any](ctx context.Context, c *mongo.Collection, id string) (doc T, found bool, err error) {
	err = c.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return doc, false, nil
	}
	return doc, err == nil, err
}

// Conversations implements Store. limit is clamped to 1..MaxListLimit.
//
// On MongoDB every query runs on the tenant_user_updated_at index, reading
// about limit documents: the conversations of the cursor's millisecond that
// follow it (by name), then the older ones by time. That index does not
// order conversations of the same millisecond by name, so the read of the
// older ones is cut at a whole millisecond: when the page ends within one,
// the conversations read at that millisecond are replaced by its first ones
// by name (an equality query on the index).
//
// On FerretDB's SQLite backend only _id equality is pushed down, so each of
// these queries scans the whole conversations collection: acceptable for
// the devstack and tests, not for production.
func (s *MongoStore) Conversations(ctx context.Context, tenant, user string, before ConversationCursor, limit int) (ConversationPage, error) {
	if err := validateOwner(tenant, user, before); err != nil {
		return ConversationPage{}, fmt.Errorf("conversations: %w", err)
	}
	limit = clampLimit(limit)
	want := limit + 1 // one more than the page tells whether another follows
	owner := func(more ...bson.E) bson.D {
		return append(bson.D{{Key: "tenant", Value: tenant}, {Key: "user", Value: user}}, more...)
	}
	byName := bson.D{{Key: "conversation", Value: -1}}

	var found []Conversation
	older := owner()
	if !before.IsZero() {
		at := before.UpdatedAt.UTC()
		ties, err := s.findConversations(ctx, owner(
			bson.E{Key: "updated_at", Value: at},
			bson.E{Key: "conversation", Value: bson.D{{Key: "$lt", Value: before.Conversation}}},
		), byName, want)
		if err != nil {
			return ConversationPage{}, err
		}
		found = ties
		older = owner(bson.E{Key: "updated_at", Value: bson.D{{Key: "$lt", Value: at}}})
	}
	if n := want - len(found); n > 0 {
		docs, err := s.findConversations(ctx, older, bson.D{{Key: "updated_at", Value: -1}}, n)
		if err != nil {
			return ConversationPage{}, err
		}
		if len(docs) == n {
			// The read may have stopped within the last millisecond it
			// reached, having taken any of its conversations: take that
			// millisecond's first ones by name instead.
			last := docs[n-1].UpdatedAt
			k := 0
			for k < n && docs[n-1-k].UpdatedAt.Equal(last) {
				k++
			}
			ties, err := s.findConversations(ctx, owner(bson.E{Key: "updated_at", Value: last}), byName, k)
			if err != nil {
				return ConversationPage{}, err
			}
			docs = append(docs[:n-k], ties...)
		}
		found = append(found, docs...)
	}
	return conversationPage(found, limit), nil
}

// findConversations reads up to limit conversation documents matching
// filter, in sort order.
func (s *MongoStore) findConversations(ctx context.Context, filter, sort bson.D, limit int) ([]Conversation, error) {
	cur, err := s.convs.Find(ctx, filter, options.Find().SetSort(sort).SetLimit(int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("conversations: %w", err)
	}
	var docs []convDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("conversations: %w", err)
	}
	out := make([]Conversation, len(docs))
	for i, d := range docs {
		out[i] = Conversation{Conversation: d.Conversation, UpdatedAt: d.UpdatedAt.UTC(), Messages: 2 * d.Turns}
	}
	return out, nil
}

// cancelDocID is the _id of a conversation's cancels in one partition; the
// documents live in the requests collection.
func cancelDocID(key string, partition int) string {
	return fmt.Sprintf("%s#cancel#%d", key, partition)
}

type cancelDoc struct {
	ID       string    `bson:"_id"`
	Topic    string    `bson:"topic"`
	Before   int64     `bson:"before"`
	Requests []string  `bson:"requests"`
	At       time.Time `bson:"at"`
}

// RecordCancel implements Store with one update of monotonic operators
// ($max, $push with $slice): atomic on MongoDB; FerretDB applies updates
// as read-modify-write, so two cancels of one conversation at the same
// instant may keep only one of them.
func (s *MongoStore) RecordCancel(ctx context.Context, id events.Identity, c Cancel) error {
	if err := validateCancel(id, c); err != nil {
		return err
	}
	update := bson.D{
		{Key: "$set", Value: bson.D{{Key: "topic", Value: c.Topic}}},
		{Key: "$max", Value: bson.D{{Key: "before", Value: c.Before}, {Key: "at", Value: storedTime(c.At, s.cfg.Now)}}},
	}
	if c.RequestID != "" {
		update[1] = bson.E{Key: "$max", Value: bson.D{{Key: "at", Value: storedTime(c.At, s.cfg.Now)}}}
		update = append(update, bson.E{Key: "$push", Value: bson.D{{Key: "requests", Value: bson.D{
			{Key: "$each", Value: bson.A{c.RequestID}},
			{Key: "$slice", Value: -MaxCancelledRequests},
		}}}})
	}
	filter := bson.D{{Key: "_id", Value: cancelDocID(id.Key(), c.Partition)}}
	opts := options.UpdateOne().SetUpsert(true)
	_, err := s.reqs.UpdateOne(ctx, filter, update, opts)
	if mongo.IsDuplicateKeyError(err) { // two first cancels upserted at once
		_, err = s.reqs.UpdateOne(ctx, filter, update, opts)
	}
	if err != nil {
		return fmt.Errorf("record cancel: %w", err)
	}
	return nil
}

// Cancelled implements Store: one point read.
func (s *MongoStore) Cancelled(ctx context.Context, id events.Identity, requestID string, src Source) (bool, error) {
	if err := id.Validate(); err != nil {
		return false, fmt.Errorf("cancelled: %w", err)
	}
	d, found, err := findByID[cancelDoc](ctx, s.reqs, cancelDocID(id.Key(), src.Partition))
	if err != nil {
		return false, fmt.Errorf("cancelled: %w", err)
	}
	if !found {
		return false, nil
	}
	return cancelState{topic: d.Topic, before: d.Before, requests: d.Requests}.covers(requestID, src), nil
}

type summaryDoc struct {
	ID           string    `bson:"_id"`
	Tenant       string    `bson:"tenant"`
	User         string    `bson:"user"`
	Conversation string    `bson:"conversation"`
	Through      int64     `bson:"through"`
	Text         string    `bson:"text"`
	CreatedAt    time.Time `bson:"created_at"`
}

// Summary implements Store: one point read.
func (s *MongoStore) Summary(ctx context.Context, id events.Identity) (Summary, bool, error) {
	if err := id.Validate(); err != nil {
		return Summary{}, false, fmt.Errorf("summary: %w", err)
	}
	d, found, err := findByID[summaryDoc](ctx, s.summaries, id.Key())
	if err != nil {
		return Summary{}, false, fmt.Errorf("summary: %w", err)
	}
	if !found {
		return Summary{}, false, nil
	}
	return Summary{Through: d.Through, Text: d.Text, CreatedAt: d.CreatedAt.UTC()}, true, nil
}

// SaveSummary implements Store with one conditional upsert: it matches the
// conversation's document only while that covers less, and an insert
// refused as a duplicate means a summary covering as much is already
// there. (FerretDB pushes the _id equality of this filter down.)
func (s *MongoStore) SaveSummary(ctx context.Context, id events.Identity, sum Summary) error {
	if err := validateSummary(id, sum); err != nil {
		return err
	}
	filter := bson.D{{Key: "_id", Value: id.Key()}, {Key: "through", Value: bson.D{{Key: "$lt", Value: sum.Through}}}}
	update := bson.D{{Key: "$set", Value: bson.D{
		{Key: "tenant", Value: id.Tenant},
		{Key: "user", Value: id.User},
		{Key: "conversation", Value: id.Conversation},
		{Key: "through", Value: sum.Through},
		{Key: "text", Value: sum.Text},
		{Key: "created_at", Value: storedTime(sum.CreatedAt, s.cfg.Now)},
	}}}
	_, err := s.summaries.UpdateOne(ctx, filter, update, options.UpdateOne().SetUpsert(true))
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("save summary: %w", err)
	}
	return nil
}

type checkpointDoc struct {
	ID        string    `bson:"_id"`
	Data      []byte    `bson:"data"`
	UpdatedAt time.Time `bson:"updated_at"`
}

func checkpointDocID(key, name string) string { return key + "#cp#" + name }

// SaveCheckpoint implements Store: one replace by _id, with upsert.
func (s *MongoStore) SaveCheckpoint(ctx context.Context, id events.Identity, name string, data []byte) error {
	if err := validateCheckpoint(id, name, data); err != nil {
		return err
	}
	doc := checkpointDoc{ID: checkpointDocID(id.Key(), name), Data: data, UpdatedAt: storedTime(time.Time{}, s.cfg.Now)}
	filter := bson.D{{Key: "_id", Value: doc.ID}}
	opts := options.Replace().SetUpsert(true)
	_, err := s.cps.ReplaceOne(ctx, filter, doc, opts)
	if mongo.IsDuplicateKeyError(err) { // two first writes upserted at once
		_, err = s.cps.ReplaceOne(ctx, filter, doc, opts)
	}
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	return nil
}

// LoadCheckpoint implements Store: one point read.
func (s *MongoStore) LoadCheckpoint(ctx context.Context, id events.Identity, name string) ([]byte, bool, error) {
	if err := validateCheckpoint(id, name, nil); err != nil {
		return nil, false, err
	}
	d, found, err := findByID[checkpointDoc](ctx, s.cps, checkpointDocID(id.Key(), name))
	if err != nil {
		return nil, false, fmt.Errorf("load checkpoint: %w", err)
	}
	if !found {
		return nil, false, nil
	}
	if d.Data == nil {
		d.Data = []byte{}
	}
	return d.Data, true, nil
}
