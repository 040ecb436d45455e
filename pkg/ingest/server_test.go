package ingest

import (
	"context"
	"flag"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/internal/webui"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/client"
)

// loadEnv is LoadConfig with env as the environment.
func loadEnv(t *testing.T, env map[string]string, args ...string) Config {
	t.Helper()
	c, err := LoadConfig(args, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// cmd/ingest never mints dev tokens: no flag or environment variable turns
// POST /v1/dev/token on (only the devstack sets Config.DevTokens).
func TestIngestHasNoWayToTurnDevTokensOn(t *testing.T) {
	t.Parallel()
	env := map[string]string{"TURNPIKE_DEV_TOKENS": "true", "TURNPIKE_INGEST_DEV_TOKENS": "1"}
	c := loadEnv(t, env)
	if c.DevTokens {
		t.Fatal("dev tokens are on in cmd/ingest's configuration")
	}
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	if err := new(Config).RegisterFlags(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	for _, set := range []*flag.FlagSet{fs, cmdFlags(t)} {
		set.VisitAll(func(f *flag.Flag) {
			if strings.Contains(f.Name, "dev") || strings.Contains(strings.ToLower(f.Usage), "dev token") {
				t.Errorf("cmd/ingest has a flag -%s (%s)", f.Name, f.Usage)
			}
		})
	}
	if c.PublicStreamURL != webui.DefaultStreamURL {
		t.Errorf("public stream url %q, want the default %q", c.PublicStreamURL, webui.DefaultStreamURL)
	}
}

// cmdFlags is cmd/ingest's flag set.
func cmdFlags(t *testing.T) *flag.FlagSet {
	t.Helper()
	var c Config
	set := flagenv.New(flag.NewFlagSet("ingest", flag.ContinueOnError), func(string) (string, bool) { return "", false })
	set.FlagSet().SetOutput(io.Discard)
	c.bind(set, true)
	return set.FlagSet()
}

func TestIngestConfigRefusesABadPublicStreamURL(t *testing.T) {
	t.Parallel()
	c := Config{PublicStreamURL: "http://localhost:8081/v1/stream"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ws:// or wss://") {
		t.Fatalf("Validate: %v, want the stream URL refused", err)
	}
}

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
		c := loadEnv(t, env)
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

// Ingest creates the requests topic itself: a message POSTed before any
// worker has started is queued (202), not refused with 503 for an unknown
// topic, so the services may start in any order.
func TestIngestQueuesAMessageBeforeAnyWorkerHasStarted(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	secret := strings.Repeat("s", 32)
	brokers := []string{testenv.EmbeddedKafka(t, embedded.KafkaConfig{}).Addr()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.Brokers, c.MongoURI, c.MongoDB, c.AuthSecret = brokers, testenv.MongoURI(t), testenv.Name(t, "ingest"), secret
	c.TopicPrefix, c.Partitions, c.LogLevel = testenv.Name(t, "ingest")+".", 2, "error"
	ready := make(chan struct{})
	s, err := New(c, WithListener(ln), WithReady(func() { close(ready) }))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	// Ready means both topics ingest uses exist, with its partition count:
	// the requests topic for the first POST, the control topic for cancels
	// and the completions reader.
	names := topic.NewNames(c.TopicPrefix)
	for _, name := range []string{names.Requests, names.Control} {
		if ids, err := topic.Partitions(ctx, brokers, name); err != nil || len(ids) != c.Partitions {
			t.Errorf("%s once ingest is ready: partitions %v, err %v; want %d", name, ids, err, c.Partitions)
		}
	}
	tok, err := auth.Mint(secret, auth.DefaultTenant, "ann", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cl := &client.Client{BaseURL: "http://" + ln.Addr().String(), Token: tok}
	if _, err := cl.Send(ctx, "c1", "hello", client.SendOptions{}); err != nil {
		t.Errorf("a message before any worker: %v", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
