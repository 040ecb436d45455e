package topic

import (
	"context"
	"net"
	"time"

	"github.com/segmentio/kafka-go"
)

// ReadDeadlineMargin is how much later than kafka-go asks the read
// deadlines of a reader's broker connections fall.
//
// kafka-go v0.4.51's Reader gives a fetch a read deadline of MaxWait and
// asks the broker to wait 3/4 of it (MaxWait minus a quarter for the round
// trip). An idle partition's empty answer that comes later than MaxWait (a
// busy broker, a GC pause, a loaded machine) hits the deadline, and the
// Reader takes the i/o timeout for a broken connection: it closes it and
// backs off (ReadBackoffMin, 100 ms, and more when it recurs) before it
// dials again, so a record produced meanwhile waits for the backoff. With
// the margin, a late empty answer is an ordinary empty fetch and the
// Reader fetches again at once; a broker that answers nothing for MaxWait
// plus the margin is still a failure. (The margin is franz-go's request
// timeout overhead.)
const ReadDeadlineMargin = 10 * time.Second

// DialFunc dials a broker (net.Dialer.DialContext's signature).
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// ReaderDialer returns the dialer of Turnpike's readers: every read
// deadline of its connections is ReadDeadlineMargin later than kafka-go
// sets it. dial, if set, opens the connections (tests break them); state,
// if set, is told of every read and dial of a connection: nil when bytes
// arrived, the error when a read or a dial failed (a refused dial, a
// connection reset, a read past the deadline).
func ReaderDialer(dial DialFunc, state func(error)) *kafka.Dialer {
	if dial == nil {
		dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext
	}
	return &kafka.Dialer{
		Timeout: 10 * time.Second,
		DialFunc: func(ctx context.Context, network, address string) (net.Conn, error) {
			c, err := dial(ctx, network, address)
			if err != nil {
				if state != nil {
					state(err)
				}
				return nil, err
			}
			return &marginConn{Conn: c, state: state}, nil
		},
	}
}

// marginConn moves read deadlines ReadDeadlineMargin later and reports
// reads to state.
type marginConn struct {
	net.Conn
	state func(error)
}

func (c *marginConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.state != nil {
		switch {
		case n > 0:
			c.state(nil)
		case err != nil:
			c.state(err)
		}
	}
	return n, err
}

func (c *marginConn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(later(t))
}

func (c *marginConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetReadDeadline(later(t))
}

// later returns t plus the margin; the zero time (no deadline) stays.
func later(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Add(ReadDeadlineMargin)
}
