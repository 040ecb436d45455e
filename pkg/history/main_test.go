package history_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/turnpike-dev/turnpike/internal/embedded"
)

// TestMain starts one embedded FerretDB for the package's tests (unless
// TURNPIKE_MONGO_URI names a server): testenv.MongoDB then hands each test
// its own database on it. One instance, not one per test, because
// ferretdb.New writes package-level state (a data race when two start at
// once) and because each instance costs a start and a 3 s stop.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("TURNPIKE_MONGO_URI") != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "history-ferretdb-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	mg, err := embedded.StartMongo(embedded.MongoConfig{DataDir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedded mongo:", err)
		return 1
	}
	defer mg.Close()
	if err := os.Setenv("TURNPIKE_MONGO_URI", mg.URI()); err != nil {
		fmt.Fprintln(os.Stderr, "setenv:", err)
		return 1
	}
	return m.Run()
}
