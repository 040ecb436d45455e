package history

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// The parts of a conversation's state a reset mark is kept for.
const (
	resetState = "state"
	resetAgent = "agent"
)

// resetDocID is the _id of a conversation's reset mark of one part; the
// documents live in the requests collection, where Start reads them with
// the request's decision, at no extra command.
func resetDocID(key, part string) string { return key + "#reset#" + part }

// resetDoc is a reset mark: the reset covers turns up to N and the turns
// of records older than Source (absent: none).
type resetDoc struct {
	ID        string     `bson:"_id"`
	N         int64      `bson:"n"`
	Source    *sourceDoc `bson:"source,omitempty"`
	RequestID string     `bson:"request_id"`
	At        time.Time  `bson:"at"`
}

func (d resetDoc) mark() *resetMark { return &resetMark{n: d.N, source: d.Source.source()} }

// read sets the mark raw holds when docID is one of the reset marks of the
// conversation of key; ok reports whether it was.
func (r resetMarks) read(key, docID string, raw bson.Raw) (resetMarks, bool, error) {
	var part **resetMark
	switch docID {
	case resetDocID(key, resetState):
		part = &r.state
	case resetDocID(key, resetAgent):
		part = &r.agent
	default:
		return r, false, nil
	}
	var d resetDoc
	if err := bson.Unmarshal(raw, &d); err != nil {
		return r, false, fmt.Errorf("read reset: %w", err)
	}
	*part = d.mark()
	return r, true, nil
}

// resetMarks reads the conversation's reset marks (one query).
func (s *MongoStore) resetMarks(ctx context.Context, key string) (resetMarks, error) {
	cur, err := s.reqs.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{
		resetDocID(key, resetState), resetDocID(key, resetAgent),
	}}}}})
	var raws []bson.Raw
	if err == nil {
		err = cur.All(ctx, &raws)
	}
	if err != nil {
		return resetMarks{}, fmt.Errorf("read resets: %w", err)
	}
	var r resetMarks
	for _, raw := range raws {
		docID, _ := raw.Lookup("_id").StringValueOK()
		if r, _, err = r.read(key, docID, raw); err != nil {
			return resetMarks{}, err
		}
	}
	return r, nil
}

// reset implements resetter. Protocol (each step one single-document
// operation; a crash or a retry at any point converges):
//
//  1. When n < 0 (no Start before), read the request's decision (a
//     decided request is reported, and resets nothing) and the newest
//     turn's number.
//  2. Move each named part's mark forward to (n, src): an upsert that
//     matches only an older mark (n lower, or equal and src not older); a
//     newer mark makes it a duplicate key, which leaves the newer one.
//  3. Insert the request's decision (complete, no turn): its unique _id
//     makes the first decision win. A duplicate reports the decision
//     already made.
//
// A crash between 2 and 3 leaves the mark written and the request
// undecided: its redelivery (in the conversation's order, before any later
// request has run) writes the same mark again.
func (s *MongoStore) reset(ctx context.Context, id events.Identity, requestID string, r Reset, n int64, src *Source) (Committed, error) {
	key := id.Key()
	if n < 0 {
		// Without Start, nothing said the request is undecided: a decided
		// one must not move the marks.
		if c, found, err := s.decision(ctx, id, requestID); err != nil {
			return Committed{}, err
		} else if found {
			c.Duplicate = true
			return c, nil
		}
		turns, err := s.newest(ctx, key, 1)
		if err != nil {
			return Committed{}, err
		}
		n = 0
		if len(turns) == 1 {
			n = turns[0].n
		}
	}
	now := storedTime(time.Time{}, s.cfg.Now)
	for _, part := range []struct {
		name string
		on   bool
	}{{resetState, r.State}, {resetAgent, r.Agent}} {
		if !part.on {
			continue
		}
		docID := resetDocID(key, part.name)
		older := bson.A{bson.D{{Key: "n", Value: bson.D{{Key: "$lt", Value: n}}}}}
		if src == nil {
			older = append(older, bson.D{{Key: "n", Value: n}})
		} else {
			// Same n: unless the stored mark's record is newer than src.
			older = append(older, bson.D{{Key: "n", Value: n}, {Key: "$or", Value: bson.A{
				bson.D{{Key: "source.topic", Value: bson.D{{Key: "$ne", Value: src.Topic}}}},
				bson.D{{Key: "source.partition", Value: bson.D{{Key: "$ne", Value: src.Partition}}}},
				bson.D{{Key: "source.offset", Value: bson.D{{Key: "$lte", Value: src.Offset}}}},
			}}})
		}
		filter := bson.D{{Key: "_id", Value: docID}, {Key: "$or", Value: older}}
		set := bson.D{{Key: "n", Value: n}, {Key: "request_id", Value: requestID}, {Key: "at", Value: now}}
		update := bson.D{{Key: "$set", Value: set}}
		if src != nil {
			set = append(set, bson.E{Key: "source", Value: toSourceDoc(src)})
			update = bson.D{{Key: "$set", Value: set}}
		} else {
			update = append(update, bson.E{Key: "$unset", Value: bson.D{{Key: "source", Value: ""}}})
		}
		_, err := s.reqs.UpdateOne(ctx, filter, update, options.UpdateOne().SetUpsert(true))
		if err != nil && !mongo.IsDuplicateKeyError(err) {
			return Committed{}, fmt.Errorf("write reset mark %s: %w", part.name, err)
		}
	}
	doc := requestDoc{ID: requestDocID(key, requestID), Status: events.StatusComplete, CreatedAt: now}
	_, err := s.reqs.InsertOne(ctx, doc)
	if err == nil {
		return Committed{Status: events.StatusComplete}, nil
	}
	if !mongo.IsDuplicateKeyError(err) {
		return Committed{}, fmt.Errorf("record reset: %w", err)
	}
	req, found, err := findByID[requestDoc](ctx, s.reqs, doc.ID)
	if err != nil || !found {
		return Committed{}, fmt.Errorf("record reset: read request: %v (found %v)", err, found)
	}
	return Committed{N: req.N, Status: req.Status, Duplicate: true}, nil
}
