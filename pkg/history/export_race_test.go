package history

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// LagConversation sets the turn count of id's conversation document to
// turns, as commits that stopped before rolling it forward leave it.
func LagConversation(ctx context.Context, s *MongoStore, id events.Identity, turns int64) error {
	_, err := s.convs.UpdateOne(ctx, bson.D{{Key: "_id", Value: id.Key()}}, bson.D{{Key: "$set", Value: bson.D{{Key: "turns", Value: turns}}}})
	if err != nil {
		return fmt.Errorf("lag conversation: %w", err)
	}
	return nil
}

// DeleteTurn removes turn n of id (no commit ever deletes one: tests use
// it to free a slot below a turn that exists).
func DeleteTurn(ctx context.Context, s *MongoStore, id events.Identity, n int64) error {
	if _, err := s.turns.DeleteOne(ctx, bson.D{{Key: "_id", Value: turnID(id.Key(), n)}}); err != nil {
		return fmt.Errorf("delete turn: %w", err)
	}
	return nil
}

// DeleteRequest removes the request document of requestID, as a commit
// that stopped between its turn and its request document leaves it.
func DeleteRequest(ctx context.Context, s *MongoStore, id events.Identity, requestID string) error {
	if _, err := s.reqs.DeleteOne(ctx, bson.D{{Key: "_id", Value: requestDocID(id.Key(), requestID)}}); err != nil {
		return fmt.Errorf("delete request: %w", err)
	}
	return nil
}
