package history_test

import (
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/history/historytest"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	historytest.Run(t, func(*testing.T) history.Store { return history.NewMemoryStore() })
}
