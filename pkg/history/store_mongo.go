package history

import (
	"context"
	"errors"
	"fmt"
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
	// Requests is the collection of request outcomes without a turn (one
	// per request id, the first decision winning) and of cancels (one per
	// conversation and partition). Default "requests".
	Requests string
	// Summaries is the collection of conversation summaries (one per
	// conversation). Default "summaries".
	Summaries string
	// Checkpoints is the collection of agent checkpoints (one per
	// interrupted run). Default "checkpoints".
	Checkpoints string
	// State is the collection of the user and tenant scopes of state (one
	// document per key). Default "state".
	State string
	// ReadConcurrency is ignored: the store reads turns by range queries
	// now, not by concurrent point reads.
	//
	// Deprecated: has no effect.
	ReadConcurrency int
	// CommitAttempts bounds the turn inserts of one Commit: each after the
	// first follows a concurrent commit of the same conversation taking the
	// turn it tried. Turns of one conversation are normally committed one
	// at a time; with k racing committers one wins each round, so a commit
	// may lose about k-1 times per turn it waits for. Default 64.
	CommitAttempts int
	// GroupCommitBatch bounds the documents of one bulk write of turn
	// inserts, and of conversation updates: the commits of concurrent runs
	// are written together (group commit), each learning its own result.
	// A full batch makes later commits wait for the next one. Default 64;
	// 1 writes every document on its own.
	GroupCommitBatch int
	// GroupCommitFlushes bounds the bulk writes of each kind in flight at
	// once; while that many are, new writes gather into the next batch.
	// Default 2.
	GroupCommitFlushes int
	// GroupCommitTimeout bounds one bulk write (it is not cut short when
	// the run that leads it gives up, as it holds other runs' documents).
	// Default 30s.
	GroupCommitTimeout time.Duration
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
	if c.State == "" {
		c.State = "state"
	}
	if c.GroupCommitBatch == 0 {
		c.GroupCommitBatch = 64
	}
	if c.GroupCommitFlushes == 0 {
		c.GroupCommitFlushes = 2
	}
	if c.GroupCommitTimeout == 0 {
		c.GroupCommitTimeout = 30 * time.Second
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
	if c.GroupCommitBatch < 1 {
		errs = append(errs, fmt.Errorf("group commit batch %d: must be at least 1", c.GroupCommitBatch))
	}
	if c.GroupCommitFlushes < 1 {
		errs = append(errs, fmt.Errorf("group commit flushes %d: must be at least 1", c.GroupCommitFlushes))
	}
	if c.GroupCommitTimeout < 0 {
		errs = append(errs, fmt.Errorf("group commit timeout %v: must not be negative", c.GroupCommitTimeout))
	}
	if c.CommitAttempts < 1 {
		errs = append(errs, fmt.Errorf("commit attempts %d: must be at least 1", c.CommitAttempts))
	}
	names := []string{c.Conversations, c.Turns, c.Requests, c.Summaries, c.Checkpoints, c.State}
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
// Every write relies only on single-document atomicity and unique indexes
// (FerretDB has no transactions):
//
//   - turns/<key>#<n, 12 digits> is the commit point: one document holds
//     every message of turn n, so a turn is stored whole or not at all.
//     Its seq (the user message's; the assistant messages, one per part,
//     follow) is the one after the last message of turn n-1, which the
//     commit has read: two commits racing for turn n compute the same seq
//     and only one of them inserts turn n, so seqs stay unique and without
//     gaps. (Documents of format version 1, written before parts, have no
//     seq and one assistant message: turn n holds seqs 2n-1 and 2n. They
//     precede every version 2 document of their conversation. A commit
//     with Turn.KeepV1 writes one too, after a version 1 turn or none: a
//     rolling upgrade's mix of releases then keeps to the numbering both
//     count.)
//     Its unique index on (identity, request_id) makes a request id land
//     on one turn, so the insert is the idempotency check too. The turns of
//     a conversation are one _id range, read newest first with a limit:
//     the window, and the newest turn that fencing compares with.
//   - requests/<key>#r#<request id> records an outcome without a turn
//     (RecordOutcome). Stores written before this protocol also hold one
//     for every committed turn; they are still honoured.
//   - requests/<key>#cancel#<partition> holds a conversation's cancels.
//   - requests/<key>#j#<request id> is the step journal of a running
//     request (Journal, journal_mongo.go), found by Start's query of the
//     request's outcome; expire_at carries a TTL index where the server
//     has them (SweepSteps elsewhere).
//   - A turn also keeps session state (Turn.State): the conversation's
//     state after it, its active agent, and the run's user and tenant
//     changes, rolled forward after the insert into
//     state/<tenant>/<user>#u#<key> and state/<tenant>#t#<key>, one
//     conditional upsert per key (state_mongo.go), and again by the
//     conversation's next Start.
//   - conversations/<key> holds turns, the highest turn number known
//     committed, messages, the seq of its last message (absent when
//     written before parts: then 2 × turns), and the times the
//     conversation list is ordered by. It is
//     rolled forward monotonically after each commit and may lag behind
//     the turns collection (a crash between the commit point and the
//     roll-forward; FerretDB's non-atomic read-modify-write updates):
//     reads of messages never use it.
//
// An ordinary turn (Pending.Start, then Commit) is four commands in three
// round trips: the request's decision and cancels (one query by _id) with
// the window (one range query), then the turn insert, then the
// conversation update. Concurrent commits' inserts and updates are written
// in bulk (group commit, see MongoConfig.GroupCommitBatch).
//
// On FerretDB's SQLite backend the _id equality, $in and range filters,
// with a sort on _id and a limit, are pushed down to SQLite's _id index by
// Turnpike's patches of FerretDB (third_party/ferretdb/TURNPIKE_PATCHES.md).
type MongoStore struct {
	cfg       MongoConfig
	convs     *mongo.Collection
	turns     *mongo.Collection
	reqs      *mongo.Collection
	summaries *mongo.Collection
	cps       *mongo.Collection
	state     *mongo.Collection

	// Group commit of turn inserts and conversation roll-forwards.
	turnWriter *groupWriter[any]
	convWriter *groupWriter[mongo.WriteModel]
}

var _ Store = (*MongoStore)(nil)

// NewMongoStore returns a store on db and creates its secondary indexes
// (idempotent). The request id's unique index on turns enforces, on both
// backends, that a request id lands on one turn.
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
		state:     db.Collection(cfg.State),
	}
	unordered := options.InsertMany().SetOrdered(false)
	s.turnWriter = newGroupWriter(cfg.GroupCommitBatch, cfg.GroupCommitFlushes, cfg.GroupCommitTimeout,
		func(ctx context.Context, docs []any) []error {
			_, err := s.turns.InsertMany(ctx, docs, unordered)
			return bulkErrors(len(docs), err)
		})
	unorderedBulk := options.BulkWrite().SetOrdered(false)
	s.convWriter = newGroupWriter(cfg.GroupCommitBatch, cfg.GroupCommitFlushes, cfg.GroupCommitTimeout,
		func(ctx context.Context, models []mongo.WriteModel) []error {
			_, err := s.convs.BulkWrite(ctx, models, unorderedBulk)
			return bulkErrors(len(models), err)
		})
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
		// Older pages of List find the turn holding a seq by it (not
		// unique: documents of format version 1 have no seq).
		{s.turns, mongo.IndexModel{Keys: identity("seq"), Options: options.Index().SetName("identity_seq")}},
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
	// Step journals expire at expire_at (the backstop of DeleteSteps).
	// FerretDB refuses TTL indexes as not implemented: there SweepSteps
	// deletes them.
	ttl := mongo.IndexModel{Keys: bson.D{{Key: "expire_at", Value: 1}}, Options: options.Index().SetName("expire_at_ttl").SetExpireAfterSeconds(0)}
	if _, err := s.reqs.Indexes().CreateOne(ctx, ttl); err != nil {
		var ce mongo.CommandError
		if !errors.As(err, &ce) || ce.Code != codeNotImplemented {
			return fmt.Errorf("create index on %s: %w", s.reqs.Name(), err)
		}
	}
	return nil
}

// codeNotImplemented is the server error code of a feature FerretDB does
// not have.
const codeNotImplemented = 238

// Documents. Field names are part of the stored format.

type convDoc struct {
	ID           string `bson:"_id"`
	Tenant       string `bson:"tenant"`
	User         string `bson:"user"`
	Conversation string `bson:"conversation"`
	Turns        int64  `bson:"turns"`
	// Messages is the seq of the conversation's last message; 0 in a
	// document written before parts (then it is 2 × Turns).
	Messages  int64     `bson:"messages,omitempty"`
	CreatedAt time.Time `bson:"created_at"`
	UpdatedAt time.Time `bson:"updated_at"`
}

// turnFormat is the format version of the turn documents Commit writes.
// Version 1 (no "v" field) has no seq and one assistant message, whose
// content and agent are in "assistant"; version 2 has "seq" and "parts",
// and "assistant" holds only what is the run's (status, time, usage,
// interrupt).
const turnFormat = 2

type turnDoc struct {
	ID           string `bson:"_id"`
	V            int    `bson:"v,omitempty"`
	Tenant       string `bson:"tenant"`
	User         string `bson:"user"`
	Conversation string `bson:"conversation"`
	N            int64  `bson:"n"`
	// Seq is the seq of the turn's user message (version 2).
	Seq       int64  `bson:"seq,omitempty"`
	RequestID string `bson:"request_id"`
	// UserMessage is stored as "user_message": "user" is the identity field.
	UserMessage userDoc      `bson:"user_message"`
	Assistant   assistantDoc `bson:"assistant"`
	// Parts are the assistant messages, in order (version 2).
	Parts []partDoc `bson:"parts,omitempty"`
	// Source is the request's record (absent for turns committed without).
	Source *sourceDoc `bson:"source,omitempty"`
	// State is the conversation's state after the turn, by key (absent
	// when empty); ActiveAgent the agent the turn left it with (absent:
	// the root); Scoped the run's changes of the user and tenant scopes.
	State       []stateDoc `bson:"state,omitempty"`
	ActiveAgent string     `bson:"active_agent,omitempty"`
	FromAgent   string     `bson:"from_agent,omitempty"`
	Scoped      *scopedDoc `bson:"scoped,omitempty"`
	// Artifacts is the manifest of the run's artifact saves (absent:
	// none): see artifact.go.
	Artifacts []string `bson:"artifacts,omitempty"`
}

// stateDoc is one key of state: its JSON value, or a delete (Del, in a
// turn's scoped changes only).
type stateDoc struct {
	Key   string `bson:"k"`
	Value string `bson:"v,omitempty"`
	Del   bool   `bson:"del,omitempty"`
}

// scopedDoc is a turn's changes of the user and tenant scopes, with the
// stamp that orders them per key.
type scopedDoc struct {
	Stamp  string     `bson:"stamp"`
	User   []stateDoc `bson:"user,omitempty"`
	Tenant []stateDoc `bson:"tenant,omitempty"`
}

func toStateDocs(ops []StateOp) []stateDoc {
	if len(ops) == 0 {
		return nil
	}
	out := make([]stateDoc, len(ops))
	for i, op := range ops {
		out[i] = stateDoc{Key: op.Key, Value: string(op.Value), Del: op.Value == nil}
	}
	return out
}

func fromStateDocs(docs []stateDoc) []StateOp {
	if len(docs) == 0 {
		return nil
	}
	out := make([]StateOp, len(docs))
	for i, d := range docs {
		out[i] = StateOp{Key: d.Key}
		if !d.Del {
			out[i].Value = []byte(d.Value)
		}
	}
	return out
}

// setState stores st in the turn document.
func (d *turnDoc) setState(st *turnState) {
	d.State, d.ActiveAgent, d.FromAgent, d.Scoped = nil, "", "", nil
	if st == nil {
		return
	}
	d.State, d.ActiveAgent, d.FromAgent = toStateDocs(st.values), st.agent, st.from
	if st.scoped() {
		d.Scoped = &scopedDoc{Stamp: st.stamp, User: toStateDocs(st.user), Tenant: toStateDocs(st.tenant)}
	}
}

// turnState reads what the turn document keeps of state.
func (d turnDoc) turnState() *turnState {
	if len(d.State) == 0 && d.ActiveAgent == "" && d.FromAgent == "" && d.Scoped == nil {
		return nil
	}
	st := &turnState{values: fromStateDocs(d.State), agent: d.ActiveAgent, from: d.FromAgent}
	if d.Scoped != nil {
		st.stamp, st.user, st.tenant = d.Scoped.Stamp, fromStateDocs(d.Scoped.User), fromStateDocs(d.Scoped.Tenant)
	}
	return st
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
	// Content and Agent are set in version 1 documents only.
	Content   string        `bson:"content,omitempty"`
	Agent     string        `bson:"agent,omitempty"`
	Status    events.Status `bson:"status"`
	CreatedAt time.Time     `bson:"created_at"`
	// Usage and Interrupt are absent when unknown or not interrupted.
	Usage     *usageDoc     `bson:"usage,omitempty"`
	Interrupt *interruptDoc `bson:"interrupt,omitempty"`
}

type partDoc struct {
	Agent   string `bson:"agent"`
	Content string `bson:"content"`
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

// newTurnDoc is the document of turn n, whose user message has seq seq;
// t must be normalized. With v1 it is of format version 1 (see asV1; seq
// must be 2n-1).
func newTurnDoc(id events.Identity, n, seq int64, t Turn, v1 bool) turnDoc {
	if v1 {
		p := asV1(t).Parts[0]
		return turnDoc{
			ID:           turnID(id.Key(), n),
			Tenant:       id.Tenant,
			User:         id.User,
			Conversation: id.Conversation,
			N:            n,
			RequestID:    t.RequestID,
			UserMessage:  userDoc{Content: t.User, CreatedAt: t.UserAt},
			Assistant: assistantDoc{
				Content:   p.Text,
				Agent:     p.Agent,
				Status:    t.Status,
				CreatedAt: t.CommittedAt,
				Usage:     toUsageDoc(t.Usage),
				Interrupt: toInterruptDoc(t.Interrupt),
			},
			Source: toSourceDoc(t.Source),
		}
	}
	parts := make([]partDoc, len(t.Parts))
	for i, p := range t.Parts {
		parts[i] = partDoc{Agent: p.Agent, Content: p.Text}
	}
	return turnDoc{
		ID:           turnID(id.Key(), n),
		V:            turnFormat,
		Tenant:       id.Tenant,
		User:         id.User,
		Conversation: id.Conversation,
		N:            n,
		Seq:          seq,
		RequestID:    t.RequestID,
		UserMessage:  userDoc{Content: t.User, CreatedAt: t.UserAt},
		Parts:        parts,
		Assistant: assistantDoc{
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

// numbered reads a turn document of either format version.
func (d turnDoc) numbered() numbered {
	seq := 2*d.N - 1
	parts := []Part{{Agent: d.Assistant.Agent, Text: d.Assistant.Content}}
	if d.V >= 2 {
		seq = d.Seq
		parts = make([]Part, len(d.Parts))
		for i, p := range d.Parts {
			parts[i] = Part{Agent: p.Agent, Text: p.Content}
		}
	}
	return numbered{n: d.N, seq: seq, v1: d.V < 2, st: d.turnState(), t: Turn{
		RequestID:   d.RequestID,
		User:        d.UserMessage.Content,
		UserAt:      d.UserMessage.CreatedAt.UTC(),
		Parts:       parts,
		Status:      d.Assistant.Status,
		CommittedAt: d.Assistant.CreatedAt.UTC(),
		Source:      d.Source.source(),
		Usage:       d.Assistant.Usage.usage(),
		Interrupt:   d.Assistant.Interrupt.interrupt(),
		Artifacts:   d.Artifacts,
	}}
}

// maxTurn is the highest turn number a turn _id can hold (12 digits).
const maxTurn = 999_999_999_999

// turnsOf is the filter of every turn of the conversation of key: one _id
// range (identity keys hold no '#', so no other conversation's turns fall
// in it).
func turnsOf(key string) bson.E {
	return bson.E{Key: "_id", Value: bson.D{{Key: "$gte", Value: turnID(key, 1)}, {Key: "$lte", Value: turnID(key, maxTurn)}}}
}

// newest reads the newest k turns (k >= 1) of the conversation of key,
// oldest first: one range query on _id, newest first, with a limit.
func (s *MongoStore) newest(ctx context.Context, key string, k int64) ([]numbered, error) {
	return s.findTurns(ctx, bson.D{turnsOf(key)}, -1, k)
}

// findTurns reads the turns matching filter in _id order (dir 1 or -1),
// at most limit of them (0: all), and returns them oldest first.
func (s *MongoStore) findTurns(ctx context.Context, filter bson.D, dir int, limit int64) ([]numbered, error) {
	return s.findTurnsBy(ctx, filter, "_id", dir, limit)
}

// findTurnsBy is findTurns in the order of field (_id or seq, which
// order a conversation's turns alike).
func (s *MongoStore) findTurnsBy(ctx context.Context, filter bson.D, field string, dir int, limit int64) ([]numbered, error) {
	opts := options.Find().SetSort(bson.D{{Key: field, Value: dir}})
	if limit > 0 {
		// A batch larger than the limit: the first reply holds every turn
		// and closes the cursor (MongoDB stops at the limit; FerretDB at a
		// batch it could not fill), so no getMore follows.
		opts.SetLimit(limit).SetBatchSize(int32(min(limit+1, 1<<20)))
	}
	cur, err := s.turns.Find(ctx, filter, opts)
	if err != nil {
		return nil, fmt.Errorf("read turns: %w", err)
	}
	var docs []turnDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("read turns: %w", err)
	}
	out := make([]numbered, len(docs))
	for i, d := range docs {
		if dir < 0 {
			out[len(docs)-1-i] = d.numbered()
		} else {
			out[i] = d.numbered()
		}
	}
	if err := contiguous(out); err != nil {
		return nil, fmt.Errorf("read turns: %w", err)
	}
	return out, nil
}

// decisionDoc decodes both kinds of document Start reads from the
// requests collection: a request's decision and a partition's cancels.
type decisionDoc struct {
	ID       string        `bson:"_id"`
	N        int64         `bson:"n"`
	Status   events.Status `bson:"status"`
	Topic    string        `bson:"topic"`
	Before   int64         `bson:"before"`
	Requests []string      `bson:"requests"`
}

// start implements starter: the request's decision and cancels (one query
// by _id) and the newest turns (one range query), issued together.
func (s *MongoStore) start(ctx context.Context, p *Pending, n int) (Start, *tip, error) {
	key := p.id.Key()
	reqID, jid := requestDocID(key, p.requestID), journalDocID(key, p.requestID)
	// The request's step journal, if it has one, is found by the same
	// query: a re-run learns what to replay for no extra command.
	// And the conversation's reset marks: a reset's run needs no more.
	ids := bson.A{reqID, jid, resetDocID(key, resetState), resetDocID(key, resetAgent)}
	if p.source != nil {
		ids = append(ids, cancelDocID(key, p.source.Partition))
	}
	var (
		raws []bson.Raw
		derr error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		cur, err := s.reqs.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
		if err == nil {
			err = cur.All(ctx, &raws)
		}
		if err != nil {
			derr = fmt.Errorf("read request and cancels: %w", err)
		}
	}()
	turns, terr := s.newest(ctx, key, max(1, windowTurns(n)))
	<-done
	if err := errors.Join(derr, terr); err != nil {
		return Start{}, nil, err
	}

	var (
		decisions []decisionDoc
		cancels   *decisionDoc
		steps     *Steps
		resets    resetMarks
	)
	for _, raw := range raws {
		docID, _ := raw.Lookup("_id").StringValueOK()
		if m, ok, err := resets.read(key, docID, raw); err != nil {
			return Start{}, nil, err
		} else if ok {
			resets = m
			continue
		}
		if docID == jid {
			var j journalDoc
			if err := bson.Unmarshal(raw, &j); err != nil {
				return Start{}, nil, fmt.Errorf("read journal: %w", err)
			}
			js := j.steps()
			steps = &js
			continue
		}
		var d decisionDoc
		if err := bson.Unmarshal(raw, &d); err != nil {
			return Start{}, nil, fmt.Errorf("read request and cancels: %w", err)
		}
		decisions = append(decisions, d)
	}
	for i, d := range decisions {
		switch d.ID {
		case reqID:
			return Start{Decided: true, Committed: Committed{N: d.N, Status: d.Status}, Steps: steps}, nil, nil
		default:
			cancels = &decisions[i]
		}
	}
	for _, x := range turns {
		if x.t.RequestID == p.requestID {
			return Start{Decided: true, Committed: Committed{N: x.n, Status: x.t.Status, Artifacts: len(x.t.Artifacts)}, Steps: steps}, nil, nil
		}
	}
	t := &tip{v1: true}
	if len(turns) > 0 {
		last := turns[len(turns)-1]
		t = &tip{n: last.n, next: last.end() + 1, source: last.t.Source, v1: last.v1, st: last.st}
		if !p.source.follows(last.t.Source) {
			// The record is not past the newest turn's: a redelivery of a
			// request committed before the window, or one that will be
			// fenced. Only the request id's index can tell (not on the
			// ordinary path: records of a conversation are committed in
			// order).
			have, found, err := s.turnOfRequest(ctx, p.id, p.requestID)
			if err != nil {
				return Start{}, nil, err
			}
			if found {
				return Start{Decided: true, Committed: Committed{N: have.N, Status: have.Assistant.Status, Artifacts: len(have.Artifacts)}, Steps: steps}, nil, nil
			}
		}
	}
	// The state the next run starts from is the newest turn's as the
	// resets leave it.
	t.resets, t.st = resets, resets.apply(t.st, t.n, t.source)
	if cancels != nil && p.source != nil &&
		(cancelState{topic: cancels.Topic, before: cancels.Before, requests: cancels.Requests}).covers(p.requestID, *p.source) {
		return Start{Cancelled: true, Steps: steps}, nil, nil
	}
	return Start{Window: windowMessages(turns, n), Steps: steps}, t, nil
}

// follows reports whether the record src comes after last in the same
// partition, so that no turn up to last's can hold src's request.
func (src *Source) follows(last *Source) bool {
	return src != nil && last != nil && src.Topic == last.Topic && src.Partition == last.Partition && src.Offset > last.Offset
}

// Commit implements Store. Protocol (each step is a single-document
// operation; a crash or a retry at any point converges):
//
//  1. Unless Pending.Start just read them (t.tip): the request's document
//     (an outcome decided first, or a turn recorded by an older version
//     of this store: report a duplicate), and the newest turn.
//  2. A turn from an older record than the newest turn's is fenced.
//  3. Insert turns/_id(newest+1): the commit point. On a duplicate key,
//     read that turn: the same request id means an earlier attempt got
//     this far (report a duplicate). Another request id means a
//     concurrent commit took the turn: read on to the first free turn
//     and insert there (bounded by CommitAttempts inserts), fencing
//     against every turn found. A free turn means the request id's unique
//     index refused the insert: the request landed at another turn, found
//     by that index.
//  4. Roll the conversation forward to the turn.
//
// Inserts and roll-forwards of concurrent commits are written in bulk
// (group commit).
func (s *MongoStore) Commit(ctx context.Context, id events.Identity, t Turn) (Committed, error) {
	if err := id.Validate(); err != nil {
		return Committed{}, fmt.Errorf("commit: %w", err)
	}
	if err := t.Validate(); err != nil {
		return Committed{}, fmt.Errorf("commit: %w", err)
	}
	t = normalize(t, s.cfg.Now)
	key := id.Key()

	last := t.tip
	if last == nil {
		req, found, err := findByID[requestDoc](ctx, s.reqs, requestDocID(key, t.RequestID))
		if err != nil {
			return Committed{}, fmt.Errorf("commit: read request: %w", err)
		}
		if found {
			if req.N == 0 { // an outcome without a turn was decided first
				return Committed{Status: req.Status, Duplicate: true}, nil
			}
			// An older version's request document: its turns had one
			// part each, so turn N ends at seq 2N.
			if err := s.rollForward(ctx, id, req.N, 2*req.N, req.CreatedAt); err != nil {
				return Committed{}, fmt.Errorf("commit: %w", err)
			}
			return Committed{N: req.N, Status: req.Status, Duplicate: true}, nil
		}
		turns, err := s.newest(ctx, key, 1)
		if err != nil {
			return Committed{}, fmt.Errorf("commit: %w", err)
		}
		resets, err := s.resetMarks(ctx, key)
		if err != nil {
			return Committed{}, fmt.Errorf("commit: %w", err)
		}
		last = &tip{v1: true}
		if len(turns) == 1 {
			last = &tip{n: turns[0].n, next: turns[0].end() + 1, source: turns[0].t.Source, v1: turns[0].v1, st: turns[0].st}
		}
		last.resets, last.st = resets, resets.apply(last.st, last.n, last.source)
	}
	// Fencing: the turn before the one we take must come from an older
	// record. Every later candidate predecessor is checked below, as the
	// slot it holds is found taken.
	if last.n > 0 && t.Source.Fences(last.source) {
		// A request committed before newer records' turns is a
		// duplicate, not fenced: idempotency per request id comes first.
		// (Pending.Start has already decided it on the worker's path, so
		// this read is made only where a commit would fail.)
		have, found, err := s.turnOfRequest(ctx, id, t.RequestID)
		if err != nil {
			return Committed{}, fmt.Errorf("commit: %w", err)
		}
		if found {
			return s.finishCommit(ctx, id, have.numbered(), true)
		}
		return Committed{}, fmt.Errorf("commit: %w", ErrFenced)
	}
	n, seq, prevV1, prevSt := last.n+1, max(last.next, 1), last.v1, last.st
	for range s.cfg.CommitAttempts {
		doc := newTurnDoc(id, n, seq, t, inV1(t, n, seq, prevV1))
		// The conversation's state after this turn is the state of the
		// turn it follows with the run's changes: computed again when a
		// concurrent commit took the turn, so no change is lost.
		st, err := nextState(prevSt, t.State, t.CommittedAt, key, n)
		if err != nil {
			return Committed{}, fmt.Errorf("commit: %w", err)
		}
		doc.setState(st)
		doc.Artifacts = t.Artifacts
		err = s.turnWriter.do(ctx, doc)
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
			// The request id's unique index refused the insert: this
			// request is committed at another turn.
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
		// Another request holds turn n: read the turns after it (one
		// range query) to find the first free one, fencing against each.
		after, err := s.findTurns(ctx, bson.D{{Key: "_id", Value: bson.D{
			{Key: "$gt", Value: turnID(key, n)}, {Key: "$lte", Value: turnID(key, maxTurn)},
		}}}, 1, 0)
		if err != nil {
			return Committed{}, fmt.Errorf("commit: %w", err)
		}
		for _, next := range after {
			if next.t.RequestID == t.RequestID {
				return s.finishCommit(ctx, id, next, true)
			}
			if t.Source.Fences(next.t.Source) {
				return Committed{}, fmt.Errorf("commit: %w", ErrFenced)
			}
		}
		// The first free turn's messages follow the last taken turn's.
		taken := have.numbered()
		if len(after) > 0 {
			taken = after[len(after)-1]
		}
		n, seq, prevV1, prevSt = taken.n+1, taken.end()+1, taken.v1, taken.st
		prevSt = last.resets.apply(prevSt, taken.n, taken.t.Source)
	}
	return Committed{}, fmt.Errorf("commit: gave up after %d inserts found their turn taken", s.cfg.CommitAttempts)
}

// finishCommit rolls the conversation forward to a committed turn and,
// at the same time, the user and tenant keys the turn changed.
func (s *MongoStore) finishCommit(ctx context.Context, id events.Identity, x numbered, duplicate bool) (Committed, error) {
	var serr error
	done := make(chan struct{})
	if x.st.scoped() {
		go func() {
			defer close(done)
			serr = s.applyScoped(ctx, id, x.st)
		}()
	} else {
		close(done)
	}
	err := s.rollForward(ctx, id, x.n, x.end(), x.t.CommittedAt)
	<-done
	if err := errors.Join(err, serr); err != nil {
		return Committed{}, fmt.Errorf("commit: %w", err)
	}
	return Committed{N: x.n, Status: x.t.Status, Duplicate: duplicate, Artifacts: len(x.t.Artifacts)}, nil
}

// rollForward raises the conversation's turn count to at least n and its
// message count to at least messages (the seq of turn n's last message),
// creating the document if needed. Every operator is monotonic ($max, $min) so
// concurrent and repeated roll-forwards commute (atomically on MongoDB;
// FerretDB's updates are read-modify-write, so there the count may lag,
// which no read of messages depends on). The filter is the _id alone: one
// document, found through the _id index on both backends.
func (s *MongoStore) rollForward(ctx context.Context, id events.Identity, n, messages int64, at time.Time) error {
	update := mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: id.Key()}}).SetUpsert(true).SetUpdate(bson.D{
		{Key: "$max", Value: bson.D{{Key: "turns", Value: n}, {Key: "messages", Value: messages}, {Key: "updated_at", Value: at}}},
		{Key: "$min", Value: bson.D{{Key: "created_at", Value: at}}},
		{Key: "$setOnInsert", Value: bson.D{
			{Key: "tenant", Value: id.Tenant},
			{Key: "user", Value: id.User},
			{Key: "conversation", Value: id.Conversation},
		}},
	})
	err := s.convWriter.do(ctx, update)
	if mongo.IsDuplicateKeyError(err) {
		// Two first commits upserted at once and this one lost the insert:
		// the document exists now, so the update matches it.
		err = s.convWriter.do(ctx, update)
	}
	if err != nil {
		return fmt.Errorf("roll conversation forward to %d: %w", n, err)
	}
	return nil
}

// turnOfRequest finds the turn of a request id: a query on the request
// id's index within the conversation's _id range (which FerretDB pushes
// down, reading only that conversation's turns).
func (s *MongoStore) turnOfRequest(ctx context.Context, id events.Identity, requestID string) (turnDoc, bool, error) {
	var d turnDoc
	err := s.turns.FindOne(ctx, bson.D{
		turnsOf(id.Key()),
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

// decision reports the committed turn or the recorded outcome of a
// request id: its request document (an outcome, or a turn committed by an
// older version of this store), else its turn.
func (s *MongoStore) decision(ctx context.Context, id events.Identity, requestID string) (Committed, bool, error) {
	req, found, err := findByID[requestDoc](ctx, s.reqs, requestDocID(id.Key(), requestID))
	if err != nil {
		return Committed{}, false, err
	}
	if found {
		return Committed{N: req.N, Status: req.Status}, true, nil
	}
	d, found, err := s.turnOfRequest(ctx, id, requestID)
	if err != nil || !found {
		return Committed{}, false, err
	}
	return Committed{N: d.N, Status: d.Assistant.Status, Artifacts: len(d.Artifacts)}, true, nil
}

// Lookup implements Store: the request's document, else its turn.
func (s *MongoStore) Lookup(ctx context.Context, id events.Identity, requestID string) (Committed, bool, error) {
	if err := id.Validate(); err != nil {
		return Committed{}, false, fmt.Errorf("lookup: %w", err)
	}
	if err := events.ValidateID("request_id", requestID); err != nil {
		return Committed{}, false, fmt.Errorf("lookup: %w", err)
	}
	c, found, err := s.decision(ctx, id, requestID)
	if err != nil {
		return Committed{}, false, fmt.Errorf("lookup: %w", err)
	}
	return c, found, nil
}

// RecordOutcome implements Store: a turn of the request id, or its request
// document, is a decision already made; else the request document with
// turn 0 is the decision, its unique _id making the first one win.
func (s *MongoStore) RecordOutcome(ctx context.Context, id events.Identity, requestID string, status events.Status) (Committed, error) {
	if err := validateOutcome(id, requestID, status); err != nil {
		return Committed{}, err
	}
	have, found, err := s.turnOfRequest(ctx, id, requestID)
	if err != nil {
		return Committed{}, fmt.Errorf("record outcome: %w", err)
	}
	if found {
		return Committed{N: have.N, Status: have.Assistant.Status, Duplicate: true, Artifacts: len(have.Artifacts)}, nil
	}
	doc := requestDoc{ID: requestDocID(id.Key(), requestID), Status: status, CreatedAt: storedTime(time.Time{}, s.cfg.Now)}
	_, err = s.reqs.InsertOne(ctx, doc)
	if err == nil {
		return Committed{Status: status}, nil
	}
	if !mongo.IsDuplicateKeyError(err) {
		return Committed{}, fmt.Errorf("record outcome: %w", err)
	}
	req, found, err := findByID[requestDoc](ctx, s.reqs, doc.ID)
	if err != nil || !found {
		return Committed{}, fmt.Errorf("record outcome: read request: %v (found %v)", err, found)
	}
	return Committed{N: req.N, Status: req.Status, Duplicate: true}, nil
}

// Window implements Store: one range query.
func (s *MongoStore) Window(ctx context.Context, id events.Identity, n int) ([]Message, error) {
	if err := id.Validate(); err != nil {
		return nil, fmt.Errorf("window: %w", err)
	}
	if n <= 0 {
		return []Message{}, nil
	}
	turns, err := s.newest(ctx, id.Key(), windowTurns(n))
	if err != nil {
		return nil, fmt.Errorf("window: %w", err)
	}
	return windowMessages(turns, n), nil
}

// List implements Store: the newest turns (one range query, which also
// tells whether the conversation exists), and for an older page one more
// range query. limit is clamped to 1..MaxListLimit.
func (s *MongoStore) List(ctx context.Context, id events.Identity, before int64, limit int) (Page, error) {
	if err := id.Validate(); err != nil {
		return Page{}, fmt.Errorf("list: %w", err)
	}
	key := id.Key()
	turns, err := s.newest(ctx, key, windowTurns(clampLimit(limit)))
	if err != nil {
		return Page{}, fmt.Errorf("list: %w", err)
	}
	if len(turns) == 0 {
		return Page{}, fmt.Errorf("list %s: %w", id.Conversation, ErrNotFound)
	}
	lo, hi := listRange(turns[len(turns)-1].end(), before, limit)
	if lo > hi {
		return Page{Messages: []Message{}}, nil
	}
	if lo < turns[0].seq {
		if turns, err = s.holding(ctx, id, lo, hi); err != nil {
			return Page{}, fmt.Errorf("list: %w", err)
		}
	}
	return Page{Messages: flatten(turns, lo, hi), NextBefore: nextBefore(lo, hi)}, nil
}

// holding reads the turns that hold messages lo…hi, oldest first: the
// version 2 turns by seq (one query on the identity_seq index, newest
// first, with a limit; the _id range bounds it to the conversation's
// turns up to the highest number the turn holding hi can have), then,
// when those do not reach back to lo, the version 1 turns before them by
// number (one range query on _id), where turn n holds 2n-1 and 2n.
func (s *MongoStore) holding(ctx context.Context, id events.Identity, lo, hi int64) ([]numbered, error) {
	key := id.Key()
	turns, err := s.findTurnsBy(ctx, bson.D{
		{Key: "_id", Value: bson.D{{Key: "$gte", Value: turnID(key, 1)}, {Key: "$lte", Value: turnID(key, min(turnOf(hi), maxTurn))}}},
		{Key: "tenant", Value: id.Tenant},
		{Key: "user", Value: id.User},
		{Key: "conversation", Value: id.Conversation},
		{Key: "seq", Value: bson.D{{Key: "$lte", Value: hi}}},
	}, "seq", -1, spanTurns(hi-lo+1))
	if err != nil {
		return nil, err
	}
	if len(turns) > 0 && turns[0].seq <= lo {
		return turns, nil
	}
	// The rest is in version 1 turns, before the version 2 ones read.
	upper := hi
	if len(turns) > 0 {
		upper = turns[0].seq - 1
	}
	first, last := turnOf(lo), turnOf(upper)
	old, err := s.findTurns(ctx, bson.D{{Key: "_id", Value: bson.D{
		{Key: "$gte", Value: turnID(key, first)}, {Key: "$lte", Value: turnID(key, last)},
	}}}, 1, 0)
	if err != nil {
		return nil, err
	}
	if int64(len(old)) != last-first+1 || old[0].seq != 2*first-1 {
		return nil, fmt.Errorf("read %d of turns %d…%d, holding messages %d…%d", len(old), first, last, lo, upper)
	}
	all := append(old, turns...)
	if err := contiguous(all); err != nil {
		return nil, fmt.Errorf("read turns: %w", err)
	}
	return all, nil
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
		// Messages is 0 in a document written before parts, and lags
		// behind turns rolled forward by a release before parts (a
		// rolling upgrade): those turns have two messages each, and
		// every turn has two or more.
		messages := max(d.Messages, 2*d.Turns)
		out[i] = Conversation{Conversation: d.Conversation, UpdatedAt: d.UpdatedAt.UTC(), Messages: messages}
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
// ($max, $push with $slice): atomic on MongoDB, and on the embedded
// FerretDB too (Turnpike's patch 8 serialises a collection's updates;
// patch 10 applies $slice). A request cancelled again is appended again
// (see MaxCancelledRequests).
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
