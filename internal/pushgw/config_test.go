package pushgw

import (
	"strings"
	"testing"
	"time"
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
			err := tt.cfg.Validate()
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
		c.ConnectPerMinute != 600 || c.ConnectBurst != 100 || c.SubscribePerMinute != 6000 || c.SubscribeBurst != 1000 {
		t.Fatalf("defaults = %+v", c)
	}
}
