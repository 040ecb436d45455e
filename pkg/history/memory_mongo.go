package history

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// MemorySearch is how MongoMemory finds and ranks memories.
type MemorySearch int

const (
	// MemorySearchText, the default, is MongoDB's: a text index on the
	// question and the answer (language English: stemmed, MongoDB's stop
	// words) and a $text query ranked by {$meta: "textScore"}. A server
	// without text indexes (FerretDB 1.24) makes NewMongoMemory fail.
	MemorySearchText MemorySearch = iota
	// MemorySearchTerms is for servers without text indexes (the embedded
	// FerretDB of pkg/devstack and pkg/turnpiketest): each memory stores
	// its MemoryTerms, an index on (tenant, user, terms) finds the
	// memories holding any of the query's terms, the newest
	// MemoryScanLimit of them, and the service ranks those by termScore
	// (no stemming; docs/api.md "Memory" states the differences).
	MemorySearchTerms
)

// MemoryScanLimit bounds the candidates of one MemorySearchTerms search:
// the newest memories holding a query term.
const MemoryScanLimit = 1000

// MongoMemoryConfig configures a MongoMemory. The zero value is ready to
// use on MongoDB.
type MongoMemoryConfig struct {
	// Collection holds one document per memory. Default "memories".
	Collection string
	// Search is how memories are found and ranked. Default
	// MemorySearchText.
	Search MemorySearch
}

// MongoMemory is the MemoryService on MongoDB (or FerretDB with
// MemorySearchTerms). A memory is one document whose _id is the turn's
// key (<tenant>/<user>/<conversation>#<turn, 12 digits>), so adding it
// again is a duplicate key and writes nothing. Every query names the
// tenant and the user. It is safe for concurrent use.
type MongoMemory struct {
	coll   *mongo.Collection
	search MemorySearch
}

var _ MemoryService = (*MongoMemory)(nil)

// memoryDoc is the stored document (docs/api.md "Memory").
type memoryDoc struct {
	ID           string    `bson:"_id"`
	Tenant       string    `bson:"tenant"`
	User         string    `bson:"user"`
	Conversation string    `bson:"conversation"`
	Turn         int64     `bson:"turn"`
	RequestID    string    `bson:"request_id"`
	Question     string    `bson:"question"`
	Answer       string    `bson:"answer"`
	At           time.Time `bson:"at"`
	Terms        []string  `bson:"terms"`
	Score        float64   `bson:"score,omitempty"` // textScore, projected by searches only
}

// NewMongoMemory returns the MongoMemory on db, creating its indexes.
func NewMongoMemory(ctx context.Context, db *mongo.Database, cfg MongoMemoryConfig) (*MongoMemory, error) {
	if db == nil {
		return nil, errors.New("new mongo memory: nil database")
	}
	if cfg.Search != MemorySearchText && cfg.Search != MemorySearchTerms {
		return nil, fmt.Errorf("new mongo memory: unknown search %d", cfg.Search)
	}
	if cfg.Collection == "" {
		cfg.Collection = "memories"
	}
	s := &MongoMemory{coll: db.Collection(cfg.Collection), search: cfg.Search}
	owner := bson.D{{Key: "tenant", Value: 1}, {Key: "user", Value: 1}}
	indexes := []mongo.IndexModel{
		{Keys: append(owner, bson.E{Key: "conversation", Value: 1}), Options: options.Index().SetName("tenant_user_conversation")},
	}
	switch cfg.Search {
	case MemorySearchText:
		// The owner prefix makes every $text query name the tenant and
		// the user (MongoDB requires equality on it).
		indexes = append(indexes, mongo.IndexModel{
			Keys:    append(owner, bson.E{Key: "question", Value: "text"}, bson.E{Key: "answer", Value: "text"}),
			Options: options.Index().SetName("tenant_user_text").SetDefaultLanguage("english"),
		})
	case MemorySearchTerms:
		indexes = append(indexes, mongo.IndexModel{
			Keys:    append(owner, bson.E{Key: "terms", Value: 1}, bson.E{Key: "at", Value: -1}),
			Options: options.Index().SetName("tenant_user_terms_at"),
		})
	}
	// One index per command (FerretDB 1.24 panics re-creating several).
	for _, ix := range indexes {
		if _, err := s.coll.Indexes().CreateOne(ctx, ix); err != nil {
			if cfg.Search == MemorySearchText {
				return nil, fmt.Errorf("new mongo memory: create index on %s (a server without text indexes, such as FerretDB, needs MemorySearchTerms): %w", s.coll.Name(), err)
			}
			return nil, fmt.Errorf("new mongo memory: create index on %s: %w", s.coll.Name(), err)
		}
	}
	return s, nil
}

// Add implements MemoryService: one insert.
func (s *MongoMemory) Add(ctx context.Context, m Memory) (bool, error) {
	m, err := prepareMemory(m)
	if err != nil {
		return false, err
	}
	doc := memoryDoc{
		ID: memoryKey(m.Identity, m.Turn), Tenant: m.Identity.Tenant, User: m.Identity.User, Conversation: m.Identity.Conversation,
		Turn: m.Turn, RequestID: m.RequestID, Question: m.Question, Answer: m.Answer, At: m.At,
		Terms: MemoryTerms(m.Question + "\n" + m.Answer),
	}
	if _, err := s.coll.InsertOne(ctx, doc); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return false, nil
		}
		return false, fmt.Errorf("add memory: %w", err)
	}
	return true, nil
}

// Search implements MemoryService: one find command (a getMore more only
// past 16 MiB of MemorySearchTerms candidates).
func (s *MongoMemory) Search(ctx context.Context, tenant, user, query string, limit int) ([]MemoryHit, error) {
	limit, err := validateSearch(tenant, user, query, limit)
	if err != nil {
		return nil, err
	}
	q := queryTerms(query)
	if len(q) == 0 {
		return nil, nil
	}
	var (
		filter bson.D
		opts   = options.Find().SetProjection(bson.D{{Key: "terms", Value: 0}})
	)
	switch s.search {
	case MemorySearchText:
		// The query's words, not its text: $search reads quotes as a
		// phrase and a leading '-' as a negation, which a user's message
		// does not mean.
		filter = bson.D{{Key: "tenant", Value: tenant}, {Key: "user", Value: user}, {Key: "$text", Value: bson.D{{Key: "$search", Value: strings.Join(q, " ")}}}}
		score := bson.D{{Key: "$meta", Value: "textScore"}}
		opts = options.Find().
			SetProjection(bson.D{{Key: "terms", Value: 0}, {Key: "score", Value: score}}).
			SetSort(bson.D{{Key: "score", Value: score}, {Key: "at", Value: -1}, {Key: "_id", Value: 1}}).
			SetLimit(int64(limit))
	default:
		filter = bson.D{{Key: "tenant", Value: tenant}, {Key: "user", Value: user}, {Key: "terms", Value: bson.D{{Key: "$in", Value: q}}}}
		// Every candidate in the find's reply (the driver's first batch
		// is 101 documents: a getMore each further batch), up to the
		// server's 16 MiB a reply. The batch is one more than the limit:
		// FerretDB leaves the cursor open when a batch is full (as
		// findTurnsBy's), which costs a getMore with limit candidates or
		// more.
		opts.SetSort(bson.D{{Key: "at", Value: -1}, {Key: "_id", Value: 1}}).SetLimit(MemoryScanLimit).SetBatchSize(MemoryScanLimit + 1)
	}
	cur, err := s.coll.Find(ctx, filter, opts)
	if err != nil {
		return nil, fmt.Errorf("search memory: %w", err)
	}
	var docs []memoryDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("search memory: %w", err)
	}
	hits := make([]MemoryHit, 0, len(docs))
	for _, d := range docs {
		if d.Tenant != tenant || d.User != user {
			continue // never: the filter names them
		}
		m := Memory{
			Identity: events.Identity{Tenant: d.Tenant, User: d.User, Conversation: d.Conversation},
			Turn:     d.Turn, RequestID: d.RequestID, Question: d.Question, Answer: d.Answer, At: d.At.UTC(),
		}
		sc := d.Score
		if s.search == MemorySearchTerms {
			sc = termScore(q, m)
		}
		hits = append(hits, MemoryHit{Memory: m, Score: sc})
	}
	if s.search == MemorySearchTerms {
		return rankHits(hits, limit), nil
	}
	return hits, nil
}

// Delete implements MemoryService: one delete of many.
func (s *MongoMemory) Delete(ctx context.Context, tenant, user, conversation string) (int64, error) {
	if err := validateDelete(tenant, user, conversation); err != nil {
		return 0, err
	}
	filter := bson.D{{Key: "tenant", Value: tenant}, {Key: "user", Value: user}}
	if conversation != "" {
		filter = append(filter, bson.E{Key: "conversation", Value: conversation})
	}
	res, err := s.coll.DeleteMany(ctx, filter)
	if err != nil {
		return 0, fmt.Errorf("delete memories: %w", err)
	}
	return res.DeletedCount, nil
}
