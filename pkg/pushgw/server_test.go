package pushgw

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
)

func loadEnv(t *testing.T, env map[string]string, args ...string) Config {
	t.Helper()
	c, err := LoadConfig(args, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPushgwSettingsComeFromTheEnvironmentAndFlags(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"TURNPIKE_KAFKA_BROKERS":               "k:9092",
		"TURNPIKE_AUTH_SECRET":                 strings.Repeat("s", 32),
		"TURNPIKE_PUSHGW_RING_BYTES":           "1048576",
		"TURNPIKE_PUSHGW_QUEUE_BYTES":          "65536",
		"TURNPIKE_PUSHGW_ALLOWED_ORIGINS":      "https://app.example.com, https://*.example.org",
		"TURNPIKE_PUSHGW_CONNECT_PER_MINUTE":   "-1",
		"TURNPIKE_PUSHGW_SUBSCRIBE_PER_MINUTE": "600",
		"TURNPIKE_PUSHGW_CURSOR_WAIT":          "5s",
		"TURNPIKE_STREAM_PARTITIONS":           "160",
		"TURNPIKE_MONGO_URI":                   "mongodb://ignored:27017", // accepted, ignored
	}
	p := loadEnv(t, env, "-subscribe-burst", "7")
	if p.RingBytes != 1<<20 || p.QueueBytes != 64<<10 || p.ConnectPerMinute != -1 || p.SubscribePerMinute != 600 ||
		p.SubscribeBurst != 7 || p.CursorWait != 5*time.Second || p.ConnectBurst != DefaultConnectBurst || p.StreamPartitions != 160 {
		t.Fatalf("config = %+v", p)
	}
	if want := []string{"https://app.example.com", "https://*.example.org"}; !slices.Equal(p.AllowedOrigins, want) {
		t.Fatalf("allowed origins %q, want %q", p.AllowedOrigins, want)
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
}

func TestPushgwConfigRefusesAMalformedOrigin(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"TURNPIKE_KAFKA_BROKERS":          "k:9092",
		"TURNPIKE_AUTH_SECRET":            strings.Repeat("s", 32),
		"TURNPIKE_PUSHGW_ALLOWED_ORIGINS": "app.example.com",
	}
	c := loadEnv(t, env)
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "allowed origin") {
		t.Fatalf("Validate: %v, want the origin refused", err)
	}
}

// TestThePushGatewayCreatesTheStreamTopicWithItsOwnPartitionCount:
// docs/api.md "Kafka topics" (the push gateway creates the stream topic at
// start, with TURNPIKE_STREAM_PARTITIONS when set) and docs/pushgw.md
// "Sizing partitions".
func TestThePushGatewayCreatesTheStreamTopicWithItsOwnPartitionCount(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	c := DefaultConfig()
	prefix := testenv.Name(t, "sp") + "."
	c.Brokers, c.AuthSecret, c.TopicPrefix, c.Partitions, c.StreamPartitions, c.LogLevel = testenv.Kafka(t), strings.Repeat("s", 32), prefix, 2, 5, "error"
	s, err := New(c, WithListener(ln), WithReady(func() { close(ready) }))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	select {
	case <-ready:
		t.Cleanup(func() { stop(); <-done })
	case err := <-done:
		stop()
		t.Fatalf("Run: %v", err)
	}
	if ids, err := topic.Partitions(ctx, c.Brokers, prefix+"stream"); err != nil || len(ids) != 5 {
		t.Errorf("the stream topic after ready: partitions %v, err %v; want StreamPartitions' 5", ids, err)
	}
}

// Every answer of the push gateway's HTTP side other than an upgrade is in
// the JSON error shape with the code of its status: unknown paths, other
// methods, and a GET that is not a WebSocket handshake.
func TestThePushGatewayAnswersEveryErrorInTheJSONShape(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	secret := strings.Repeat("s", 32)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	c := DefaultConfig()
	c.Brokers, c.AuthSecret, c.TopicPrefix, c.Partitions, c.LogLevel = testenv.Kafka(t), secret, testenv.Name(t, "p")+".", 2, "error"
	s, err := New(c, WithListener(ln), WithReady(func() { close(ready) }))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	select {
	case <-ready:
		t.Cleanup(func() { stop(); <-done })
	case err := <-done:
		stop()
		t.Fatalf("Run: %v", err)
	}
	tok, err := auth.Mint(secret, auth.DefaultTenant, "alice", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	for _, tt := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodGet, "/nope", 404, ""},
		{http.MethodGet, "/v1/stream/", 404, ""},
		{http.MethodPost, "/v1/stream", 405, "GET"},
		{http.MethodDelete, "/v1/stream", 405, "GET"},
		{http.MethodGet, "/v1/stream", 400, ""}, // a token but no handshake
		{http.MethodPost, "/healthz", 405, "GET, HEAD"},
		{http.MethodGet, "/v1/./stream", 404, ""},
	} {
		req, err := http.NewRequestWithContext(ctx, tt.method, base+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultTransport.RoundTrip(req) // no redirects followed
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if res.StatusCode != tt.status || res.Header.Get("Content-Type") != "application/json" ||
			json.Unmarshal(b, &e) != nil || e.Error.Code != server.CodeFor(tt.status) || res.Header.Get("Allow") != tt.allow {
			t.Errorf("%s %s: %d %s %q (Allow %q); want %d %s in the JSON shape (Allow %q)", tt.method, tt.path,
				res.StatusCode, res.Header.Get("Content-Type"), b, res.Header.Get("Allow"), tt.status, server.CodeFor(tt.status), tt.allow)
		}
	}
}
