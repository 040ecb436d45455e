package replay

import (
	"flag"
	"regexp"
	"testing"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

func TestTheFlagsAreOnlyWhatAReplayReads(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	var c config
	c.Bind(flagenv.New(fs, func(string) (string, bool) { return "", false }))
	for _, name := range []string{"auth-secret", "topic-partitions", "otlp-endpoint", "trace-sample-ratio", "pprof-addr"} {
		if fs.Lookup(name) != nil {
			t.Errorf("-%s is listed, but a replay never reads it", name)
		}
	}
	for _, name := range []string{"kafka-brokers", "mongo-uri", "mongo-db", "topic-prefix", "model", "echo-delay", "openai-model", "log-level", "mode", "instruction", "compact-tokens", "compact-keep"} {
		if fs.Lookup(name) == nil {
			t.Errorf("-%s is missing", name)
		}
	}
}

// The settings a replay shares with the worker (the brokers, MongoDB, the
// model, the window, compaction, the limits, the logs) have the worker's
// flag names, environment variables and defaults, so a replay run with the
// worker's environment runs the worker's agent as the worker does. A
// flag's environment variable is the one its usage names (flagenv's
// "(env NAME)"), the one it reads.
func TestTheSharedFlagsHaveTheWorkersDefaults(t *testing.T) {
	t.Parallel()
	none := func(string) (string, bool) { return "", false }
	rs := flag.NewFlagSet("replay", flag.ContinueOnError)
	var c config
	c.Bind(flagenv.New(rs, none))
	ws := flag.NewFlagSet("worker", flag.ContinueOnError)
	wc := worker.DefaultConfig()
	if err := wc.RegisterFlags(ws, none); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kafka-brokers", "mongo-uri", "mongo-db", "mongo-pool", "topic-prefix", "model", "echo-delay",
		"openai-base-url", "openai-api-key", "openai-model", "log-level", "log-format", "window", "compact-tokens", "compact-keep",
		"max-content-bytes", "run-timeout", "drain-timeout", "instruction", "agent-config"} {
		r, w := rs.Lookup(name), ws.Lookup(name)
		switch {
		case r == nil || w == nil:
			t.Errorf("-%s: replay has it %v, the worker %v", name, r != nil, w != nil)
		case r.DefValue != w.DefValue:
			t.Errorf("-%s defaults to %q in a replay, %q in the worker", name, r.DefValue, w.DefValue)
		case envOf(r) == "" || envOf(r) != envOf(w):
			t.Errorf("-%s reads %q in a replay, %q in the worker", name, envOf(r), envOf(w))
		}
	}
}

var envInUsage = regexp.MustCompile(`\(env (\w+)\)$`)

// envOf is the environment variable flag f reads, as its usage names it,
// or "".
func envOf(f *flag.Flag) string {
	if m := envInUsage.FindStringSubmatch(f.Usage); m != nil {
		return m[1]
	}
	return ""
}
