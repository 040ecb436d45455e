package history

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// scopeDoc is one key of a user's or a tenant's state:
// state/_id=<tenant>/<user>#u#<key> or <tenant>#t#<key>. A delete is kept
// as a tombstone (Del), so that an older write cannot bring the key back.
type scopeDoc struct {
	ID     string `bson:"_id"`
	Tenant string `bson:"tenant"`
	User   string `bson:"user,omitempty"`
	Key    string `bson:"k"`
	Value  string `bson:"v,omitempty"`
	Del    bool   `bson:"del,omitempty"`
	Stamp  string `bson:"stamp"`
}

var _ ScopeStore = (*MongoStore)(nil)

// applyScoped rolls a turn's user and tenant changes forward: one
// conditional upsert per key, issued together, applied only over an older
// stamp (filter _id and stamp $lt mine). When a key's document holds the
// same or a newer stamp the filter matches nothing and the upsert's insert
// hits the _id: that duplicate key is the no-op (MongoDB's conditional
// update is atomic; on FerretDB, Turnpike's patch 8 serialises the
// statements of update commands, so it is there too). Repeating it is
// harmless; different keys never touch each other's documents, and the
// whole map is never read back and rewritten. Not one bulk write: FerretDB
// ignores ordered:false on update and ends the command at its first
// failed statement, so a key behind a newer one would be skipped.
func (s *MongoStore) applyScoped(ctx context.Context, id events.Identity, st *turnState) error {
	if !st.scoped() {
		return nil
	}
	type upsert struct{ filter, update bson.D }
	var ups []upsert
	add := func(prefix, user string, ops []StateOp) {
		for _, op := range ops {
			set := bson.D{
				{Key: "tenant", Value: id.Tenant},
				{Key: "k", Value: op.Key},
				{Key: "stamp", Value: st.stamp},
			}
			if user != "" {
				set = append(set, bson.E{Key: "user", Value: user})
			}
			var update bson.D
			if op.Value == nil {
				set = append(set, bson.E{Key: "del", Value: true})
				update = bson.D{{Key: "$set", Value: set}, {Key: "$unset", Value: bson.D{{Key: "v", Value: ""}}}}
			} else {
				set = append(set, bson.E{Key: "v", Value: string(op.Value)})
				update = bson.D{{Key: "$set", Value: set}, {Key: "$unset", Value: bson.D{{Key: "del", Value: ""}}}}
			}
			ups = append(ups, upsert{
				filter: bson.D{{Key: "_id", Value: prefix + op.Key}, {Key: "stamp", Value: bson.D{{Key: "$lt", Value: st.stamp}}}},
				update: update,
			})
		}
	}
	add(userScopePrefix(id.Tenant, id.User), id.User, st.user)
	add(tenantScopePrefix(id.Tenant), "", st.tenant)
	errs := make([]error, len(ups))
	var wg sync.WaitGroup
	sem := make(chan struct{}, scopeWriteConcurrency)
	for i, u := range ups {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, err := s.state.UpdateOne(ctx, u.filter, u.update, options.UpdateOne().SetUpsert(true))
			if err != nil && !mongo.IsDuplicateKeyError(err) {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("roll state forward: %w", err)
	}
	return nil
}

// scopeWriteConcurrency bounds the upserts of one roll-forward in flight.
const scopeWriteConcurrency = 8

// ScopeState implements ScopeStore: one range query on _id.
func (s *MongoStore) ScopeState(ctx context.Context, tenant, user string) (map[string][]byte, error) {
	if err := validateScope(tenant, user); err != nil {
		return nil, err
	}
	docs, err := s.scopeDocs(ctx, scopePrefix(tenant, user))
	if err != nil {
		return nil, fmt.Errorf("scope state: %w", err)
	}
	out := make(map[string][]byte, len(docs))
	for _, d := range docs {
		if !d.Del {
			out[d.Key] = []byte(d.Value)
		}
	}
	return out, nil
}

// scopeDocs reads every document of one scope, whose _ids start with
// prefix (scopePrefix): one range query on _id.
func (s *MongoStore) scopeDocs(ctx context.Context, prefix string) ([]scopeDoc, error) {
	cur, err := s.state.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: prefix}, {Key: "$lt", Value: scopeEnd(prefix)}}}})
	if err != nil {
		return nil, err
	}
	var docs []scopeDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	return docs, nil
}

var _ StateReader = (*MongoStore)(nil)

// ConversationState implements StateReader: the newest turn (one range
// query with a limit of one), the user's scope (one range query) and the
// conversation's reset marks (one query by _id), issued together.
func (s *MongoStore) ConversationState(ctx context.Context, id events.Identity) (ConversationState, error) {
	if err := id.Validate(); err != nil {
		return ConversationState{}, fmt.Errorf("conversation state: %w", err)
	}
	var (
		user        []scopeDoc
		resets      resetMarks
		uerr, rerr  error
		done, rdone = make(chan struct{}), make(chan struct{})
		key         = id.Key()
	)
	go func() {
		defer close(done)
		user, uerr = s.scopeDocs(ctx, userScopePrefix(id.Tenant, id.User))
	}()
	go func() {
		defer close(rdone)
		resets, rerr = s.resetMarks(ctx, key)
	}()
	turns, terr := s.newest(ctx, key, 1)
	<-done
	<-rdone
	if uerr != nil {
		uerr = fmt.Errorf("read user state: %w", uerr)
	}
	if err := errors.Join(terr, uerr, rerr); err != nil {
		return ConversationState{}, fmt.Errorf("conversation state: %w", err)
	}
	if len(turns) == 0 {
		return ConversationState{}, fmt.Errorf("conversation state %s: %w", id.Conversation, ErrNotFound)
	}
	// A reset applied after the newest turn covers it: read what it left.
	last := turns[len(turns)-1]
	return conversationState(resets.apply(last.st, last.n, last.t.Source), user), nil
}
