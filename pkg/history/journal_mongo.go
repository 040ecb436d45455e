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

var _ Journal = (*MongoStore)(nil)

// journalDocID is the _id of request requestID's journal, in the requests
// collection beside its outcome: Pending.Start's read of the outcome finds
// it in the same query.
func journalDocID(key, requestID string) string { return key + "#j#" + requestID }

// journalDoc is a request's journal. keys lists the steps' keys, so that a
// write's filter can refuse a key recorded before.
type journalDoc struct {
	ID       string    `bson:"_id"`
	Owner    int64     `bson:"owner"`
	Runs     int       `bson:"runs"`
	Bytes    int       `bson:"bytes"`
	Keys     []string  `bson:"keys"`
	Steps    []stepDoc `bson:"steps"`
	ExpireAt time.Time `bson:"expire_at"`
}

type stepDoc struct {
	Key   string `bson:"key"`
	Hash  string `bson:"hash,omitempty"`
	Data  []byte `bson:"data"`
	State []byte `bson:"state,omitempty"`
	// Artifacts is the step's staged artifact saves (Step.Artifacts).
	Artifacts []string  `bson:"artifacts,omitempty"`
	Owner     int64     `bson:"owner"`
	At        time.Time `bson:"at"`
}

func toStepDoc(s Step) stepDoc {
	return stepDoc{Key: s.Key, Hash: s.Hash, Data: s.Data, State: s.State, Artifacts: s.Artifacts, Owner: s.Owner, At: s.At}
}

func (d stepDoc) step() Step {
	data := d.Data
	if data == nil {
		data = []byte{}
	}
	return Step{Key: d.Key, Hash: d.Hash, Data: data, State: d.State, Artifacts: d.Artifacts, Owner: d.Owner, At: d.At.UTC()}
}

func (d journalDoc) steps() Steps {
	out := Steps{Owner: d.Owner, Runs: d.Runs, Bytes: d.Bytes, Steps: make([]Step, len(d.Steps))}
	for i, s := range d.Steps {
		out.Steps[i] = s.step()
	}
	return out
}

// journalAttempts bounds the rounds of a journal write that finds the
// document changed between its conditional update and its read.
const journalAttempts = 8

// Steps implements Journal: one point read.
func (s *MongoStore) Steps(ctx context.Context, id events.Identity, requestID string) (Steps, bool, error) {
	if err := validateJournal(id, requestID, 1); err != nil {
		return Steps{}, false, fmt.Errorf("steps: %w", err)
	}
	d, found, err := findByID[journalDoc](ctx, s.reqs, journalDocID(id.Key(), requestID))
	if err != nil || !found {
		return Steps{}, false, wrapErr("steps", err)
	}
	return d.steps(), true, nil
}

// ClaimSteps implements Journal with one conditional update (owner below
// the claimant's), which returns the journal as it left it; when it
// matches nothing, one read tells a missing journal from a newer owner's.
func (s *MongoStore) ClaimSteps(ctx context.Context, id events.Identity, requestID string, owner int64) (int, error) {
	if err := validateJournal(id, requestID, owner); err != nil {
		return 0, fmt.Errorf("claim steps: %w", err)
	}
	jid := journalDocID(id.Key(), requestID)
	for range journalAttempts {
		var d journalDoc
		err := s.reqs.FindOneAndUpdate(ctx,
			bson.D{{Key: "_id", Value: jid}, {Key: "owner", Value: bson.D{{Key: "$lt", Value: owner}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "owner", Value: owner}}}, {Key: "$inc", Value: bson.D{{Key: "runs", Value: 1}}}},
			options.FindOneAndUpdate().SetReturnDocument(options.After),
		).Decode(&d)
		if err == nil {
			return d.Runs, nil
		}
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return 0, fmt.Errorf("claim steps: %w", err)
		}
		have, found, err := findByID[journalDoc](ctx, s.reqs, jid)
		switch {
		case err != nil:
			return 0, fmt.Errorf("claim steps: %w", err)
		case !found:
			return 0, nil
		case have.Owner >= owner:
			return 0, fmt.Errorf("claim steps: %w", ErrFenced)
		}
		// An older owner's journal changed between the two: try again.
	}
	return 0, fmt.Errorf("claim steps: journal of %s kept changing", requestID)
}

// RecordStep implements Journal with one conditional upsert that claims
// and appends at once: it matches the journal only while no newer run
// owns it, the key is not recorded and the step fits. When it matches
// nothing, its insert hits the journal's _id (a duplicate key) and one
// read decides: fenced, recorded before (that step is returned), or full.
func (s *MongoStore) RecordStep(ctx context.Context, id events.Identity, requestID string, owner int64, st Step, limits JournalLimits) (Step, error) {
	limits = limits.withDefaults()
	if err := validateStep(id, requestID, owner, st, limits); err != nil {
		return Step{}, err
	}
	size := st.size()
	if size > limits.MaxBytes {
		return Step{}, fmt.Errorf("record step: %w", ErrJournalFull)
	}
	now := storedTime(time.Time{}, s.cfg.Now)
	st.Owner, st.At = owner, now
	if st.Data == nil {
		st.Data = []byte{}
	}
	jid := journalDocID(id.Key(), requestID)
	filter := bson.D{
		{Key: "_id", Value: jid},
		{Key: "owner", Value: bson.D{{Key: "$lte", Value: owner}}},
		{Key: "keys", Value: bson.D{{Key: "$ne", Value: st.Key}}},
		{Key: "bytes", Value: bson.D{{Key: "$lte", Value: limits.MaxBytes - size}}},
	}
	update := bson.D{
		{Key: "$set", Value: bson.D{{Key: "owner", Value: owner}, {Key: "expire_at", Value: now.Add(limits.TTL)}}},
		{Key: "$setOnInsert", Value: bson.D{{Key: "runs", Value: 1}}},
		{Key: "$push", Value: bson.D{{Key: "keys", Value: st.Key}, {Key: "steps", Value: toStepDoc(st)}}},
		{Key: "$inc", Value: bson.D{{Key: "bytes", Value: size}}},
	}
	for range journalAttempts {
		_, err := s.reqs.UpdateOne(ctx, filter, update, options.UpdateOne().SetUpsert(true))
		if err == nil {
			return st, nil
		}
		if !mongo.IsDuplicateKeyError(err) {
			return Step{}, fmt.Errorf("record step: %w", err)
		}
		have, found, err := findByID[journalDoc](ctx, s.reqs, jid)
		if err != nil {
			return Step{}, fmt.Errorf("record step: %w", err)
		}
		if !found {
			continue // deleted meanwhile: the next upsert creates it
		}
		if have.Owner > owner {
			return Step{}, fmt.Errorf("record step: %w", ErrFenced)
		}
		for _, x := range have.Steps {
			if x.Key == st.Key {
				return x.step(), nil
			}
		}
		if have.Bytes+size > limits.MaxBytes {
			return Step{}, fmt.Errorf("record step: %w", ErrJournalFull)
		}
		// The journal changed between the two: try again.
	}
	return Step{}, fmt.Errorf("record step: journal of %s kept changing", requestID)
}

// TruncateSteps implements Journal: a read, then a write of the kept
// prefix conditional on the journal being as read (its owner and size).
func (s *MongoStore) TruncateSteps(ctx context.Context, id events.Identity, requestID string, owner int64, n int) error {
	if err := validateJournal(id, requestID, owner); err != nil {
		return fmt.Errorf("truncate steps: %w", err)
	}
	jid := journalDocID(id.Key(), requestID)
	for range journalAttempts {
		have, found, err := findByID[journalDoc](ctx, s.reqs, jid)
		switch {
		case err != nil:
			return fmt.Errorf("truncate steps: %w", err)
		case !found:
			return nil
		case have.Owner > owner:
			return fmt.Errorf("truncate steps: %w", ErrFenced)
		}
		keep := have.Steps[:max(0, min(n, len(have.Steps)))]
		keys, bytes := make([]string, len(keep)), 0
		for i, x := range keep {
			keys[i] = x.Key
			bytes += x.step().size()
		}
		res, err := s.reqs.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: jid}, {Key: "owner", Value: have.Owner}, {Key: "bytes", Value: have.Bytes}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "owner", Value: owner}, {Key: "keys", Value: keys}, {Key: "steps", Value: keep}, {Key: "bytes", Value: bytes}}}})
		if err != nil {
			return fmt.Errorf("truncate steps: %w", err)
		}
		if res.MatchedCount > 0 {
			return nil
		}
	}
	return fmt.Errorf("truncate steps: journal of %s kept changing", requestID)
}

// DeleteSteps implements Journal: one delete by _id and owner; when it
// deletes nothing, one read tells a missing journal from a newer owner's.
func (s *MongoStore) DeleteSteps(ctx context.Context, id events.Identity, requestID string, owner int64) error {
	if err := validateJournal(id, requestID, owner); err != nil {
		return fmt.Errorf("delete steps: %w", err)
	}
	jid := journalDocID(id.Key(), requestID)
	res, err := s.reqs.DeleteOne(ctx, bson.D{{Key: "_id", Value: jid}, {Key: "owner", Value: bson.D{{Key: "$lte", Value: owner}}}})
	if err != nil {
		return fmt.Errorf("delete steps: %w", err)
	}
	if res.DeletedCount > 0 {
		return nil
	}
	have, found, err := findByID[journalDoc](ctx, s.reqs, jid)
	switch {
	case err != nil:
		return fmt.Errorf("delete steps: %w", err)
	case found && have.Owner > owner:
		return fmt.Errorf("delete steps: %w", ErrFenced)
	}
	return nil
}

// SweepSteps deletes the journals whose expire_at is before now: those of
// requests that never reached a durable end and were not written for
// JournalLimits.TTL. On MongoDB a TTL index on expire_at does the same by
// itself; FerretDB has none, so the worker calls this periodically. It
// returns how many it deleted.
func (s *MongoStore) SweepSteps(ctx context.Context, now time.Time) (int, error) {
	res, err := s.reqs.DeleteMany(ctx, bson.D{{Key: "expire_at", Value: bson.D{{Key: "$lt", Value: now.UTC()}}}})
	if err != nil {
		return 0, fmt.Errorf("sweep steps: %w", err)
	}
	return int(res.DeletedCount), nil
}

func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", op, err)
}
