package service_test

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
	"github.com/turnpike-dev/turnpike/internal/pushgw"
	"github.com/turnpike-dev/turnpike/internal/service"
)

func parsePushgw(t *testing.T, env map[string]string, args ...string) service.PushgwConfig {
	t.Helper()
	var c service.PushgwConfig
	fs := flag.NewFlagSet("pushgw", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	set := flagenv.New(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	c.Bind(set)
	if err := set.Parse(args); err != nil {
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
	}
	c := parsePushgw(t, env, "-subscribe-burst", "7")
	p := c.Pushgw
	if p.RingBytes != 1<<20 || p.QueueBytes != 64<<10 || p.ConnectPerMinute != -1 || p.SubscribePerMinute != 600 ||
		p.SubscribeBurst != 7 || p.CursorWait != 5*time.Second || p.ConnectBurst != pushgw.DefaultConnectBurst {
		t.Fatalf("config = %+v", p)
	}
	if want := []string{"https://app.example.com", "https://*.example.org"}; !slices.Equal(p.AllowedOrigins, want) {
		t.Fatalf("allowed origins %q, want %q", p.AllowedOrigins, want)
	}
	if err := c.Validate(); err != nil {
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
	c := parsePushgw(t, env)
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "allowed origin") {
		t.Fatalf("Validate: %v, want the origin refused", err)
	}
}
