package pushgw

import (
	"errors"
	"fmt"
	"time"

	"github.com/turnpike-dev/turnpike/internal/topic"
)

// Defaults of Config. A zero field takes its default.
const (
	DefaultQueueSize         = 1024
	DefaultMaxSubscriptions  = 100
	DefaultPingInterval      = 25 * time.Second
	DefaultPongWait          = 60 * time.Second
	DefaultWriteTimeout      = 10 * time.Second
	DefaultReplayConcurrency = 64
	DefaultReplayBuffer      = 4096
)

// Config configures a Gateway. Zero values take the documented defaults.
type Config struct {
	// Brokers are the Kafka bootstrap addresses. Required.
	Brokers []string
	// Topic is the stream topic. Default the stream topic under
	// topic.DefaultPrefix ("turnpike.stream").
	Topic string
	// QueueSize is each connection's outbound queue, in frames. A client
	// whose queue is full when an event arrives is closed with 4008.
	// Default 1024.
	QueueSize int
	// MaxSubscriptions caps the subscriptions of one connection. Default 100.
	MaxSubscriptions int
	// PingInterval is how often the server pings each client. It must be
	// shorter than PongWait. Default 25s.
	PingInterval time.Duration
	// PongWait is how long a connection may stay silent (no pong, no frame)
	// before it is dropped. Default 60s.
	PongWait time.Duration
	// WriteTimeout bounds every write to a client, close frames included.
	// Default 10s.
	WriteTimeout time.Duration
	// ReplayConcurrency caps the replays (subscriptions with since) reading
	// Kafka at once, across the gateway. Default 64.
	ReplayConcurrency int
	// ReplayBuffer caps the live frames buffered for one subscription while
	// its replay runs; overflowing it closes the client with 4008.
	// Default 4096.
	ReplayBuffer int
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Topic == "" {
		c.Topic = topic.NewNames(topic.DefaultPrefix).Stream
	}
	setDefault(&c.QueueSize, DefaultQueueSize)
	setDefault(&c.MaxSubscriptions, DefaultMaxSubscriptions)
	setDefault(&c.PingInterval, DefaultPingInterval)
	setDefault(&c.PongWait, DefaultPongWait)
	setDefault(&c.WriteTimeout, DefaultWriteTimeout)
	setDefault(&c.ReplayConcurrency, DefaultReplayConcurrency)
	setDefault(&c.ReplayBuffer, DefaultReplayBuffer)
	return c
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// Validate reports every problem of c (after defaults), joined.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("brokers: none given"))
	}
	for i, b := range c.Brokers {
		if b == "" {
			errs = append(errs, fmt.Errorf("brokers[%d]: empty", i))
		}
	}
	nonNegative := func(name string, v int64) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s: %d, want > 0", name, v))
		}
	}
	nonNegative("queue size", int64(c.QueueSize))
	nonNegative("max subscriptions", int64(c.MaxSubscriptions))
	nonNegative("replay concurrency", int64(c.ReplayConcurrency))
	nonNegative("replay buffer", int64(c.ReplayBuffer))
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ping interval", c.PingInterval}, {"pong wait", c.PongWait}, {"write timeout", c.WriteTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: %v, want > 0", d.name, d.v))
		}
	}
	if c.PingInterval > 0 && c.PongWait > 0 && c.PingInterval >= c.PongWait {
		errs = append(errs, fmt.Errorf("ping interval %v: must be shorter than pong wait %v", c.PingInterval, c.PongWait))
	}
	return errors.Join(errs...)
}
