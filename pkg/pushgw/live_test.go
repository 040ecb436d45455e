package pushgw

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/testenv"
)

// cutter opens broker connections that cutAll closes; until restore, new
// ones hang (a broker gone silent: kafka-go's dials then time out only
// after its dialer's 10 s, so FetchMessage hears of nothing for 30 s), while
// the gateway's other Kafka client (its readiness ping) still reaches it.
type cutter struct {
	mu sync.Mutex
	// Guarded by mu.
	back  chan struct{} // closed by restore; nil while not cut
	conns []net.Conn
}

func (c *cutter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c.mu.Lock()
	back := c.back
	c.mu.Unlock()
	if back != nil {
		select {
		case <-back:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		c.mu.Lock()
		c.conns = append(c.conns, conn)
		c.mu.Unlock()
	}
	return conn, err
}

func (c *cutter) cutAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.back = make(chan struct{})
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}

func (c *cutter) restore() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.back)
	c.back = nil
}

// awaitReady polls Ready until want(err) holds.
func awaitReady(ctx context.Context, t *testing.T, gw *gateway, what string, want func(error) bool) {
	t.Helper()
	for {
		err := gw.Ready(ctx)
		if want(err) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: Ready = %v", what, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func readersFailing(err error) bool {
	return err != nil && strings.Contains(err.Error(), "live readers failing")
}

// TestAReplicaIsUnreadyWhileItsLiveReadersCannotReachTheBrokerAndReadyOnceTheyCanWithoutARecord:
// docs/pushgw.md "Replicas": a replica stays unready while its live readers
// cannot read, and is ready again once they can. The readers' connections
// are cut (in flight: kafka-go retries such a failure by itself and does
// not tell FetchMessage) and new ones hang while Kafka still answers the
// gateway's ping; then they are allowed again and the replica
// is ready with no record produced (an idle poll is a successful fetch).
func TestAReplicaIsUnreadyWhileItsLiveReadersCannotReachTheBrokerAndReadyOnceTheyCanWithoutARecord(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	f := newFixtureOn(t, ctx, []string{k.Addr()})
	c := &cutter{}
	f.dialKafka = c.dial
	f.start(ctx, nil, nil)

	c.cutAll()
	awaitReady(ctx, t, f.gw, "while the live readers' connections are cut", readersFailing)
	c.restore()
	awaitReady(ctx, t, f.gw, "once the live readers reach the broker again", func(err error) bool { return err == nil })
}

// TestAReplicaIsReadyAgainAfterFailedFetchesOnceAFetchSucceedsWithoutARecord:
// docs/pushgw.md "Replicas": after a live reader's fetches failed (the
// broker answered them with an error), the replica is ready again once a
// fetch succeeds, though the partition stays idle (no record fetched).
func TestAReplicaIsReadyAgainAfterFailedFetchesOnceAFetchSucceedsWithoutARecord(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	f := newFixtureOn(t, ctx, []string{k.Addr()})
	var logs syncBuffer
	f.launchLogged = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f.start(ctx, nil, nil)
	_, id := aliceConv(t)
	p := partitionOf(id)

	fault := k.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: f.topic, Partitions: []int32{int32(p)},
		Err: kerr.KafkaStorageError, Count: -1})
	logs.await(ctx, t, fmt.Sprintf(`msg="live reader: fetch failed, retrying" partition=%d`, p))
	awaitReady(ctx, t, f.gw, "while the fetches fail", readersFailing)
	fault.Remove()
	awaitReady(ctx, t, f.gw, "once a fetch succeeds, with no record", func(err error) bool { return err == nil })
}
