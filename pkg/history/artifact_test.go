package history_test

import (
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/history/historytest"
)

// suiteArtifactLimits are the limits historytest.Artifacts expects.
var suiteArtifactLimits = history.ArtifactLimits{MaxBytes: 1 << 20, MaxNames: 3}

func TestMemoryArtifacts(t *testing.T) {
	t.Parallel()
	historytest.Artifacts(t,
		func(*testing.T) history.ArtifactService { return history.NewMemoryArtifacts(suiteArtifactLimits) },
		func(*testing.T) history.Store { return history.NewMemoryStore() })
}

// TestMongoArtifacts runs the artifact suite on embedded FerretDB (or on
// TURNPIKE_MONGO_URI). The subtests share one database.
func TestMongoArtifacts(t *testing.T) {
	t.Parallel()
	db := testenv.MongoDB(t)
	historytest.Artifacts(t,
		func(t *testing.T) history.ArtifactService {
			a, err := history.NewMongoArtifacts(testenv.Context(t, 30*time.Second), db, history.ArtifactConfig{Limits: suiteArtifactLimits})
			if err != nil {
				t.Fatalf("NewMongoArtifacts: %v", err)
			}
			return a
		},
		func(t *testing.T) history.Store { return newMongoStore(t, testenv.Context(t, 30*time.Second), db) })
}
