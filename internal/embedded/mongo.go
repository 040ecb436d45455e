package embedded

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/turnpike-dev/turnpike/third_party/ferretdb/ferretdb"
)

// MongoConfig configures the embedded MongoDB-compatible store.
type MongoConfig struct {
	// Addr is the host:port to listen on. Default "127.0.0.1:0".
	Addr string
	// DataDir is the directory of the SQLite files. Required: FerretDB's
	// SQLite backend always writes files. Tests pass t.TempDir().
	DataDir string
	// Logger receives FerretDB's own logs. Default: discarded. FerretDB logs
	// every connection at info level, so pass a logger at warn or above.
	Logger *slog.Logger
}

// Mongo is a running FerretDB instance on SQLite.
type Mongo struct {
	uri    string
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// newFerretDB serialises ferretdb.New, which writes package-level state of
// FerretDB's (its version info): two stores starting at once would race.
var newFerretDB sync.Mutex

// StartMongo starts FerretDB with the SQLite handler.
func StartMongo(cfg MongoConfig) (*Mongo, error) {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("start mongo: DataDir is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("start mongo: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("start mongo: %w", err)
	}
	newFerretDB.Lock()
	f, err := ferretdb.New(&ferretdb.Config{
		Listener: ferretdb.ListenerConfig{TCP: cfg.Addr},
		Logger:   cfg.Logger,
		Handler:  "sqlite",
		// WAL with synchronous=NORMAL: a commit survives a crash of the
		// process (kill -9), not of the machine; the default FULL syncs
		// every commit and caps the devstack at about 100 turns/s.
		SQLiteURL: "file:" + dir + "/?_pragma=synchronous(normal)",
	})
	newFerretDB.Unlock()
	if err != nil {
		return nil, fmt.Errorf("start mongo: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Mongo{uri: f.MongoDBURI(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		_ = f.Run(ctx) // returns nil when ctx ends
	}()
	return m, nil
}

// URI is the mongodb:// connection string of the store.
func (m *Mongo) URI() string { return m.uri }

// Close stops the store, closes its connections and SQLite files, and waits.
func (m *Mongo) Close() {
	m.once.Do(func() {
		m.cancel()
		<-m.done
	})
}
