package devstack

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/logging"
	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// Main is the body of a devstack binary with the agent of opts (none: the
// agent file's, else one agent on TURNPIKE_MODEL, as cmd/devstack): it
// reads the settings of cmd/devstack from os.Args and TURNPIKE_*
// environment variables (-h lists them; with an agent written in Go,
// without those of the agent built without Go code, as worker.Main), runs
// until SIGINT or SIGTERM, prints where it serves and a dev token, and
// exits: 0 after a clean stop, 1 when it fails, 2 for bad flags or
// options. The worker options' logger, registry and ready hook do not
// apply: the devstack logs as its settings say and serves one registry at
// the ingest port's /metrics.
func Main(opts ...worker.Option) {
	os.Exit(mainWith(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr, opts))
}

// mainWith is Main on args and lookup (the environment), printing where
// it serves on stdout and logging on stderr; it returns the exit code.
func mainWith(args []string, lookup func(string) (string, bool), stdout, stderr io.Writer, opts []worker.Option) int {
	var c Config
	if code, ok := flagenv.ParseCommand("devstack", args, lookup, stderr, func(set *flagenv.Set) { c.bind(set, opts) }); !ok {
		return code
	}
	c.Logger = logging.New(stderr, c.Worker.LogLevel, c.Worker.LogFormat)
	c.Ready = func(st Stack) { fmt.Fprint(stdout, st.banner()) }
	return server.Main("devstack", c.Logger, func(ctx context.Context) error {
		// The command line gave every setting its value, zeros included.
		return launch(ctx, c.withDefaults(false), opts).Wait()
	})
}

// bind registers cmd/devstack's flags: its own, then the worker's
// (pkg/worker's RegisterFlags, with the options' agent: the settings
// every part shares are the worker's flags), ingest's and the push
// gateway's own settings. The devstack's logs default to text.
func (c *Config) bind(set *flagenv.Set, opts []worker.Option) {
	set.String(&c.Worker.LogFormat, "log-format", "TURNPIKE_LOG_FORMAT", "text", "log format: json or text")
	set.String(&c.AuthSecret, "auth-secret", "TURNPIKE_AUTH_SECRET", "",
		"HS256 secret of bearer tokens (at least 32 bytes; default: generated once and kept in the data directory)")
	set.String(&c.PprofAddr, "pprof-addr", "TURNPIKE_PPROF_ADDR", "", "serve net/http/pprof on this address (off when empty; keep it private)")
	set.String(&c.KafkaAddr, "kafka-addr", "TURNPIKE_KAFKA_ADDR", defaultKafkaAddr, "address of the embedded Kafka-protocol broker")
	set.String(&c.MongoAddr, "mongo-addr", "TURNPIKE_MONGO_ADDR", defaultMongoAddr, "address of the embedded MongoDB-compatible store")
	set.String(&c.DataDir, "data-dir", "TURNPIKE_DATA_DIR", defaultDataDir, "directory of the embedded broker's and store's files")
	set.String(&c.IngestAddr, "ingest-addr", "TURNPIKE_INGEST_ADDR", defaultIngestAddr, "listen address of the ingest API (loopback unless exposed deliberately)")
	set.String(&c.PushgwAddr, "pushgw-addr", "TURNPIKE_PUSHGW_ADDR", defaultPushgwAddr, "listen address of the push gateway (loopback unless exposed deliberately)")
	set.Bool(&c.DevTokensRemote, "dev-tokens-remote", "TURNPIKE_DEV_TOKENS_REMOTE", false,
		"serve POST /v1/dev/token beyond loopback: anyone who reaches the ingest port can mint tokens")
	set.String(&c.DevUser, "dev-user", "TURNPIKE_DEV_USER", defaultDevUser, "user of the printed dev token")
	set.String(&c.PublicStreamURL, "public-stream-url", "TURNPIKE_PUBLIC_STREAM_URL", "",
		"push gateway WebSocket URL for the demo page; {host} is the page's host name (default: the gateway's listener)")
	set.Fail(c.Worker.RegisterFlags(set.FlagSet(), set.Lookup(), opts...))
	set.Fail(c.Ingest.RegisterFlags(set.FlagSet(), set.Lookup()))
	set.Fail(c.Pushgw.RegisterFlags(set.FlagSet(), set.Lookup()))
}
