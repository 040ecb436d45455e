package history

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// seedBatch is the number of documents per InsertMany of SeedTurns.
const seedBatch = 2000

// SeedTurns writes turns as turns first, first+1, … of id in bulk: exactly
// the documents that committing them one by one (in that order) leaves.
func SeedTurns(ctx context.Context, s *MongoStore, id events.Identity, first int64, turns []Turn) error {
	if len(turns) == 0 {
		return nil
	}
	tdocs := make([]any, 0, seedBatch)
	flush := func() error {
		opts := options.InsertMany().SetOrdered(false)
		if _, err := s.turns.InsertMany(ctx, tdocs, opts); err != nil {
			return fmt.Errorf("seed turns: %w", err)
		}
		tdocs = tdocs[:0]
		return nil
	}
	var oldest, newest time.Time
	seq := 2*first - 1 // turns before first had one part each
	for i, t := range turns {
		if err := t.Validate(); err != nil {
			return fmt.Errorf("seed turn %d: %w", i, err)
		}
		t = normalize(t, s.cfg.Now)
		d := newTurnDoc(id, first+int64(i), seq, t, false)
		seq += int64(len(t.Parts)) + 1
		tdocs = append(tdocs, d)
		if i == 0 || t.CommittedAt.Before(oldest) {
			oldest = t.CommittedAt
		}
		if i == 0 || t.CommittedAt.After(newest) {
			newest = t.CommittedAt
		}
		if len(tdocs) == seedBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if len(tdocs) > 0 {
		if err := flush(); err != nil {
			return err
		}
	}
	last := first + int64(len(turns)) - 1
	if err := s.rollForward(ctx, id, last, seq-1, oldest); err != nil {
		return err
	}
	return s.rollForward(ctx, id, last, seq-1, newest)
}

// InsertTurnOnly writes the commit point of turn n and nothing else, as a
// crash right after it would leave the store.
func InsertTurnOnly(ctx context.Context, s *MongoStore, id events.Identity, n int64, t Turn) error {
	_, err := s.turns.InsertOne(ctx, newTurnDoc(id, n, 2*n-1, normalize(t, s.cfg.Now), false))
	return err
}

// SetConversationTurns overwrites the conversation document's turn count,
// as a lagging roll-forward (or FerretDB's lost update) would leave it.
func SetConversationTurns(ctx context.Context, s *MongoStore, id events.Identity, n int64) error {
	_, err := s.convs.UpdateOne(ctx, bson.D{{Key: "_id", Value: id.Key()}}, bson.D{{Key: "$set", Value: bson.D{{Key: "turns", Value: n}}}})
	return err
}

// RawDocuments returns the stored documents of id, keyed by collection and
// _id with the identity key replaced by "KEY", for comparing two
// conversations' storage.
func RawDocuments(ctx context.Context, s *MongoStore, id events.Identity) (map[string]bson.M, error) {
	// Read by _id: the conversation, then turns while they exist.
	out := make(map[string]bson.M)
	key := id.Key()
	put := func(coll, docID string, m bson.M) {
		delete(m, "_id")
		for _, f := range []string{"tenant", "user", "conversation"} {
			if _, ok := m[f]; ok {
				m[f] = "IDENTITY"
			}
		}
		out[coll+"/"+"KEY"+docID[len(key):]] = m
	}
	conv, found, err := findByID[bson.M](ctx, s.convs, key)
	if err != nil || !found {
		return nil, fmt.Errorf("raw conversation: found %v, %v", found, err)
	}
	put("conversations", key, conv)
	for n := int64(1); ; n++ {
		d, found, err := findByID[bson.M](ctx, s.turns, turnID(key, n))
		if err != nil {
			return nil, err
		}
		if !found {
			break
		}
		put("turns", turnID(key, n), d)
	}
	return out, nil
}

// WriteLegacyRequest writes the request document an older version of the
// store wrote for every committed turn (the turn's number and status),
// which the store still honours.
func WriteLegacyRequest(ctx context.Context, s *MongoStore, id events.Identity, n int64, requestID string, status events.Status, at time.Time) error {
	_, err := s.reqs.InsertOne(ctx, requestDoc{ID: requestDocID(id.Key(), requestID), N: n, Status: status, CreatedAt: storedTime(at, s.cfg.Now)})
	return err
}
