// Package mongodial connects to MongoDB as every Turnpike service does:
// the URI, the database and the pool bound of their settings
// (TURNPIKE_MONGO_URI, TURNPIKE_MONGO_DB, TURNPIKE_MONGO_POOL). It imports
// no package of pkg/, so that every public package may use it. Dial is
// safe for concurrent use.
package mongodial

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// Conn is a connected database.
type Conn struct {
	// DB is the database.
	DB     *mongo.Database
	client *mongo.Client
}

// Dial connects to the MongoDB of uri and returns database db. pool, when
// positive, bounds the client's connections (and so its commands in
// flight); 0 is the driver's default, 100. Each operation is bounded by
// 30 s. Close disconnects.
func Dial(uri, db string, pool int) (*Conn, error) {
	opts := options.Client().ApplyURI(uri).SetTimeout(30 * time.Second)
	if pool > 0 {
		opts.SetMaxPoolSize(uint64(pool))
	}
	client, err := mongo.Connect(opts)
	if err != nil {
		return nil, fmt.Errorf("connect mongo: %w", err)
	}
	return &Conn{DB: client.Database(db), client: client}, nil
}

// Ping checks that the primary answers: the services' /readyz check.
func (c *Conn) Ping(ctx context.Context) error { return c.client.Ping(ctx, readpref.Primary()) }

// Close disconnects, waiting at most 10 s for operations in flight.
func (c *Conn) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.client.Disconnect(ctx)
}
