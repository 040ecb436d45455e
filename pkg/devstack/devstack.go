// Package devstack runs the whole Turnpike pipeline in one process with
// the caller's eino agent, for a team's local development: an embedded
// Kafka-protocol broker (kfake) and an embedded MongoDB-compatible store
// (FerretDB on SQLite), both keeping their files in a data directory, the
// ingest API with the demo page, the push gateway, and a worker running
// the agent of pkg/worker's options. It is cmd/devstack with Go agent code:
//
//	func main() { devstack.Main(worker.WithAgentFactory(newAgent)) }
//
// Point it at a real Kafka or MongoDB with TURNPIKE_KAFKA_BROKERS or
// TURNPIKE_MONGO_URI (then that part is not embedded). Not for production:
// use pkg/worker there, with cmd/ingest and cmd/pushgw.
package devstack

import (
	"cmp"
	"context"
	"log/slog"
	"os"
	"reflect"

	"github.com/turnpike-dev/turnpike/internal/devstack"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// Config configures Run.
type Config struct {
	// DataDir keeps the embedded broker's and store's files. Default "./data".
	DataDir string
	// KafkaAddr and MongoAddr are the embedded broker's and store's
	// addresses. Defaults "127.0.0.1:9092" and "127.0.0.1:27017"; port 0
	// picks a free one.
	KafkaAddr, MongoAddr string
	// IngestAddr and PushgwAddr are the ingest API's and the push
	// gateway's listen addresses. Defaults "127.0.0.1:8080" and
	// "127.0.0.1:8081": loopback only, as cmd/devstack.
	IngestAddr, PushgwAddr string
	// DevUser is the user of the dev token Ready receives. Default "dev".
	DevUser string
	// Worker configures the worker (and the settings every part shares:
	// topics, log level and format, the model of the agent built without
	// Go code). Its Brokers and MongoURI, when set, replace the embedded
	// broker and store. Each zero field takes its value in
	// DefaultConfig().Worker (worker.DefaultConfig() with text logs), so
	// setting Worker.Brokers alone uses that broker with every other
	// default; a zero TraceSampleRatio, too, takes the default 1. Its Addr
	// and PprofAddr do not apply (the ingest port serves /metrics).
	Worker worker.Config
	// Ready, if set, is called once every part serves.
	Ready func(Stack)
	// Logger. Default: Worker.LogLevel and LogFormat on stderr.
	Logger *slog.Logger
}

// Stack says where a running devstack serves.
type Stack struct {
	// IngestURL is the ingest API's (and the demo page's) base URL;
	// StreamURL the push gateway's WebSocket endpoint.
	IngestURL, StreamURL string
	// DevToken is a bearer token of tenant "default" and user DevUser,
	// valid 7 days.
	DevToken string
}

// DefaultConfig returns the devstack's defaults.
func DefaultConfig() Config {
	w := worker.DefaultConfig()
	w.LogFormat = "text"
	return Config{DataDir: devstack.DefaultDataDir, KafkaAddr: devstack.DefaultKafkaAddr, MongoAddr: devstack.DefaultMongoAddr,
		IngestAddr: devstack.DefaultIngestAddr, PushgwAddr: devstack.DefaultPushgwAddr, DevUser: devstack.DefaultDevUser, Worker: w}
}

// Run runs the devstack with the worker's agent and hooks of opts until
// ctx ends. Zero fields of c take their defaults, field by field (those of
// c.Worker included).
func Run(ctx context.Context, c Config, opts ...worker.Option) error {
	def := DefaultConfig()
	fillZero(&c.Worker, def.Worker)
	dc := devstack.Config{Shared: devstack.SharedOf(c.Worker), Worker: c.Worker, WorkerOptions: opts}
	dc.DataDir, dc.KafkaAddr, dc.MongoAddr = cmp.Or(c.DataDir, def.DataDir), cmp.Or(c.KafkaAddr, def.KafkaAddr), cmp.Or(c.MongoAddr, def.MongoAddr)
	dc.IngestAddr, dc.PushgwAddr, dc.DevUser = cmp.Or(c.IngestAddr, def.IngestAddr), cmp.Or(c.PushgwAddr, def.PushgwAddr), cmp.Or(c.DevUser, def.DevUser)
	log := c.Logger
	if log == nil {
		log = dc.NewLogger(os.Stderr)
	}
	return devstack.Run(ctx, dc, devstack.Listeners{}, log, func(st devstack.Stack) {
		if c.Ready != nil {
			c.Ready(Stack{IngestURL: st.IngestURL(), StreamURL: st.StreamURL(), DevToken: st.DevToken})
		}
	})
}

// Main is the body of a devstack binary with the agent of opts: it reads
// the settings of cmd/devstack from os.Args and TURNPIKE_* environment
// variables (-h lists them; with an agent written in Go, without those of
// the agent built without Go code, as worker.Main), runs until SIGINT or
// SIGTERM, prints where it serves and a dev token, and exits: 0 after a
// clean stop, 1 when it fails, 2 for bad flags or options. The worker
// options' logger, registry and ready hook do not apply: the devstack logs
// as its settings say and serves one registry at the ingest port's
// /metrics.
func Main(opts ...worker.Option) {
	os.Exit(devstack.Main(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr, opts...))
}

// fillZero sets each zero field of *c to def's.
func fillZero(c *worker.Config, def worker.Config) {
	v, d := reflect.ValueOf(c).Elem(), reflect.ValueOf(def)
	for i := range v.NumField() {
		if f := v.Field(i); f.CanSet() && f.IsZero() {
			f.Set(d.Field(i))
		}
	}
}
