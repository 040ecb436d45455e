package embedded

import (
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kfake"
)

// KafkaConfig configures the embedded broker.
type KafkaConfig struct {
	// Addr is the host:port to listen on. Default "127.0.0.1:0" (a random port).
	Addr string
	// DataDir, when set, persists topics, records and committed offsets
	// there, so a restart on the same directory keeps them. Default: memory only.
	DataDir string
	// Options are extra kfake options (tests use them for fault injection
	// settings or broker configs).
	Options []kfake.Opt
}

// Kafka is a running embedded Kafka-protocol broker.
type Kafka struct {
	cluster *kfake.Cluster
	addr    string
	once    sync.Once
}

// StartKafka starts a single-broker kfake cluster.
func StartKafka(cfg KafkaConfig) (*Kafka, error) {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	host, portStr, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("kafka addr %q: %w", cfg.Addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("kafka addr %q: bad port: %w", cfg.Addr, err)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		// kfake always asks for 127.0.0.1; bind the host the caller chose.
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, net.JoinHostPort(host, strconv.Itoa(port)))
		}),
	}
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.DataDir))
	}
	opts = append(opts, cfg.Options...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start kafka: %w", err)
	}
	addrs := c.ListenAddrs()
	if len(addrs) == 0 {
		c.Close()
		return nil, fmt.Errorf("start kafka: no listener")
	}
	return &Kafka{cluster: c, addr: addrs[0]}, nil
}

// Addr is the bootstrap address of the broker.
func (k *Kafka) Addr() string { return k.addr }

// Cluster exposes the kfake cluster, for tests that inject faults.
func (k *Kafka) Cluster() *kfake.Cluster { return k.cluster }

// Close stops the broker (and flushes its data directory, if any).
func (k *Kafka) Close() {
	k.once.Do(k.cluster.Close)
}
