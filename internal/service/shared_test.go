package service_test

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/service"
)

func TestTheMongoPoolComesFromTheEnvironmentAndIsNeverNegative(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pool string
		want int
		ok   bool
	}{{"", 0, true}, {"8", 8, true}, {"-1", -1, false}} {
		env := map[string]string{
			"TURNPIKE_KAFKA_BROKERS": "k:9092",
			"TURNPIKE_MONGO_URI":     "mongodb://m:27017",
			"TURNPIKE_AUTH_SECRET":   strings.Repeat("s", 32),
		}
		if tc.pool != "" {
			env["TURNPIKE_MONGO_POOL"] = tc.pool
		}
		var c service.IngestConfig
		fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		set := flagenv.New(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		c.Bind(set)
		if err := set.Parse(nil); err != nil {
			t.Fatal(err)
		}
		if c.MongoPool != tc.want {
			t.Errorf("TURNPIKE_MONGO_POOL=%q: MongoPool %d, want %d", tc.pool, c.MongoPool, tc.want)
		}
		err := c.Validate()
		if tc.ok && err != nil {
			t.Errorf("TURNPIKE_MONGO_POOL=%q: Validate: %v", tc.pool, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "TURNPIKE_MONGO_POOL")) {
			t.Errorf("TURNPIKE_MONGO_POOL=%q: Validate: %v, want the pool refused", tc.pool, err)
		}
	}
}
