package replay

import (
	"flag"
	"testing"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
)

func TestTheFlagsAreOnlyWhatAReplayReads(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	var c Config
	c.Bind(flagenv.New(fs, func(string) (string, bool) { return "", false }))
	for _, name := range []string{"auth-secret", "topic-partitions", "otlp-endpoint", "trace-sample-ratio", "pprof-addr"} {
		if fs.Lookup(name) != nil {
			t.Errorf("-%s is listed, but a replay never reads it", name)
		}
	}
	for _, name := range []string{"kafka-brokers", "mongo-uri", "mongo-db", "topic-prefix", "model", "echo-delay", "openai-model", "log-level", "mode", "instruction"} {
		if fs.Lookup(name) == nil {
			t.Errorf("-%s is missing", name)
		}
	}
}
