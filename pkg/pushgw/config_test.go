package pushgw

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/flagenv"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		wantErr []string
	}{
		{"Brokers alone are a valid config.", Config{Brokers: []string{"k:9092"}}, nil},
		{"A config without brokers is refused.", Config{}, []string{"brokers"}},
		{"An empty broker address is refused.", Config{Brokers: []string{""}}, []string{"brokers[0]"}},
		{"Negative sizes are all reported.", Config{Brokers: []string{"k"}, QueueSize: -1, MaxSubscriptions: -1, ReplayConcurrency: -1, ReplayBuffer: -1},
			[]string{"queue size", "max subscriptions", "replay concurrency", "replay buffer"}},
		{"Negative byte bounds and bursts are all reported.",
			Config{Brokers: []string{"k"}, QueueBytes: -1, RingBytes: -1, ReplayBufferBytes: -1, ConnectBurst: -1, SubscribeBurst: -1},
			[]string{"queue bytes", "ring bytes", "replay buffer bytes", "connect burst", "subscribe burst"}},
		{"A negative rate is not an error: it turns the limit off.", Config{Brokers: []string{"k"}, ConnectPerMinute: -1, SubscribePerMinute: -1}, nil},
		{"Negative durations are reported.", Config{Brokers: []string{"k"}, WriteTimeout: -time.Second, CursorWait: -time.Second},
			[]string{"write timeout", "cursor wait"}},
		{"A malformed allowed origin is refused.", Config{Brokers: []string{"k"}, AllowedOrigins: []string{"*", "example.com"}}, []string{"allowed origin \"example.com\""}},
		{"A ping interval not shorter than the pong wait is refused.", Config{Brokers: []string{"k"}, PingInterval: time.Minute, PongWait: time.Minute},
			[]string{"ping interval"}},
		{"A default ping interval above a short pong wait is refused.", Config{Brokers: []string{"k"}, PongWait: time.Second}, []string{"ping interval"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.validateGateway()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors about %v", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %v, missing %q", err, w)
				}
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{Brokers: []string{"k"}}.withDefaults()
	if c.Topic != "turnpike.stream" || c.QueueSize != 1024 || c.QueueBytes != 1<<20 || c.MaxSubscriptions != 100 || c.PingInterval != 25*time.Second ||
		c.PongWait != time.Minute || c.WriteTimeout != 10*time.Second || c.ReplayConcurrency != 64 || c.ReplayBuffer != 4096 ||
		c.ReplayBufferBytes != 4<<20 || c.RingBytes != 64<<20 || c.CursorWait != 2*time.Second || len(c.AllowedOrigins) != 0 ||
		c.ConnectPerMinute != 600 || c.ConnectBurst != 100 || c.SubscribePerMinute != 6000 || c.SubscribeBurst != 1000 ||
		c.ReaderIdle != 30*time.Second || c.PartitionWatch != 10*time.Second {
		t.Fatalf("defaults = %+v", c)
	}
}

// TestTheEventStreamTimingDefaultsAreTheDocumentedOnes: docs/api.md "The
// stream" gives a heartbeat every 15 s and a retry of 2 s, both as the zero
// Config's defaults and as the defaults of the flags and environment
// variables the service reads.
func TestTheEventStreamTimingDefaultsAreTheDocumentedOnes(t *testing.T) {
	t.Parallel()
	const heartbeat, retry = 15 * time.Second, 2 * time.Second
	c := Config{Brokers: []string{"k"}}.withDefaults()
	if c.SSEHeartbeat != heartbeat || c.SSERetry != retry {
		t.Errorf("zero Config: heartbeat %v, retry %v; want %v and %v", c.SSEHeartbeat, c.SSERetry, heartbeat, retry)
	}
	var bound Config
	set := flagenv.New(flag.NewFlagSet("pushgw", flag.ContinueOnError), func(string) (string, bool) { return "", false })
	bound.bindGateway(set)
	if err := set.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if bound.SSEHeartbeat != heartbeat || bound.SSERetry != retry {
		t.Errorf("flags: heartbeat %v, retry %v; want %v and %v", bound.SSEHeartbeat, bound.SSERetry, heartbeat, retry)
	}
	for name, want := range map[string]string{"sse-heartbeat": "15s", "sse-retry": "2s"} {
		if f := set.FlagSet().Lookup(name); f == nil || f.DefValue != want {
			t.Errorf("flag -%s: %+v, want the default %s in its usage", name, f, want)
		}
	}
	if got := retryField(c.SSERetry); got != "retry: 2000\n\n" {
		t.Errorf("the retry field of the default: %q, want %q", got, "retry: 2000\n\n")
	}
}

// docs/pushgw.md "Replicas": a live reader stays open 30 s after its last
// subscriber left by default, set by -reader-idle and
// TURNPIKE_PUSHGW_READER_IDLE; "Sizing partitions": a replica reads the
// stream topic's partition count again every 10 s by default, set by
// -partition-watch-interval and TURNPIKE_PUSHGW_PARTITION_WATCH_INTERVAL.
func TestTheReaderIdleTimeAndThePartitionWatchIntervalHaveTheirDefaultsAndAreSetByFlagOrEnvironment(t *testing.T) {
	t.Parallel()
	readerIdle := func(c Config) time.Duration { return c.ReaderIdle }
	partitionWatch := func(c Config) time.Duration { return c.PartitionWatch }
	for _, tt := range []struct {
		name  string
		field func(Config) time.Duration
		args  []string
		env   map[string]string
		want  time.Duration
	}{
		{"The reader idle time is 30 s with nothing set.", readerIdle, nil, nil, 30 * time.Second},
		{"The flag sets the reader idle time.", readerIdle, []string{"-reader-idle=2m"}, nil, 2 * time.Minute},
		{"The environment sets the reader idle time.", readerIdle, nil, map[string]string{"TURNPIKE_PUSHGW_READER_IDLE": "5s"}, 5 * time.Second},
		{"The partition watch interval is 10 s with nothing set.", partitionWatch, nil, nil, 10 * time.Second},
		{"The flag sets the partition watch interval.", partitionWatch, []string{"-partition-watch-interval=1m"}, nil, time.Minute},
		{"The environment sets the partition watch interval.", partitionWatch, nil,
			map[string]string{"TURNPIKE_PUSHGW_PARTITION_WATCH_INTERVAL": "3s"}, 3 * time.Second},
	} {
		var c Config
		set := flagenv.New(flag.NewFlagSet("pushgw", flag.ContinueOnError), func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
		c.bindGateway(set)
		if err := set.Parse(tt.args); err != nil {
			t.Fatalf("%s %v", tt.name, err)
		}
		if got := tt.field(c); got != tt.want {
			t.Errorf("%s Got %v, want %v", tt.name, got, tt.want)
		}
	}
}
