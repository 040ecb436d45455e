package stacktest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// Gates across processes. A worker that runs in a process of its own (the
// e2e fault tests kill them) pauses its echo model through the Gates of the
// test's process: RemoteAgent's model dials the address Serve listens on
// for each pause, names the run's conversation on one line, and goes on
// when Serve answers one byte, which it does once the conversation's gate
// lets a token pass; it acknowledges that byte with one of its own. A held
// pause is a connection Serve has not answered: Gate.Held says so in the
// test, whatever process waits. When the run ends (a cancel) the worker
// closes the connection, and when the worker dies its kernel does; either
// way Serve stops waiting for it, and the pause takes nothing from the
// gate. A pass is the pause's only once acknowledged: a worker that died
// (or whose run ended) between the gate letting its token pass and its
// acknowledgement gives the pass back to the gate, for the next pause.

// passByte is Serve's answer: the token may pass.
const passByte = '+'

// ackByte is the pause's acknowledgement of passByte: the token takes the
// pass.
const ackByte = '.'

// Serve answers the pauses of the RemoteAgent models that dial ln through
// g's gates, until ctx ends or ln fails. It then closes ln and every
// connection, waits for their goroutines, and returns ctx.Err() (or ln's
// error). Run it in a goroutine; it is the only user of ln.
func (g *Gates) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			ln.Close()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("gates: accept: %w", err)
		}
		wg.Go(func() { g.answer(ctx, conn) })
	}
}

// answer serves one pause on conn: it reads the conversation, waits at its
// gate while the peer keeps the connection open, and answers passByte
// when the token may pass. The pass goes back to the gate unless the peer
// acknowledges it.
func (g *Gates) answer(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	r := bufio.NewReaderSize(conn, events.MaxIDLen+1)
	line, err := r.ReadSlice('\n') // an ID and its newline, or an error
	if err != nil {
		return
	}
	conversation := strings.TrimSuffix(string(line), "\n")
	// The peer sends one byte more, its acknowledgement of a pass: a read
	// that returns before the pass is its end (a run that ended, a process
	// that died).
	pctx, gone := context.WithCancel(ctx)
	defer gone()
	peer := make(chan bool, 1) // whether the peer acknowledged
	go func() {
		b, err := r.ReadByte()
		peer <- err == nil && b == ackByte
		gone()
	}()
	gate, err := g.take(pctx, conversation)
	if err != nil {
		conn.Close()
		<-peer
		return
	}
	acked := false
	if _, err := conn.Write([]byte{passByte}); err == nil {
		acked = <-peer
	} else {
		conn.Close()
		<-peer
	}
	if !acked && gate != nil {
		gate.Allow(1) // the token did not take its pass: the next pause may
	}
	conn.Close()
}

// RemoteAgent is Agent for a worker in another process than the Gates: the
// worker option that runs c's agent on the echo model (c.EchoDelay), each
// of its pauses first passing the gate of its run's conversation in the
// Gates serving at addr (Serve). A pause fails when addr does not answer.
func RemoteAgent(c worker.Config, addr string) worker.Option {
	return gatedAgent(c, func(ctx context.Context, d time.Duration) error {
		r, _ := worker.RequestFromContext(ctx)
		if err := passRemote(ctx, addr, r.Conversation); err != nil {
			return err
		}
		return sleep(ctx, d)
	})
}

// passRemote returns when the Gates serving at addr let a token of
// conversation's answer pass, or ctx.Err() when ctx ends first (the
// connection closed, so the gate stops holding it).
func passRemote(ctx context.Context, addr, conversation string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("gates at %s: %w", addr, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if _, err := io.WriteString(conn, conversation+"\n"); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("gates at %s: %w", addr, err)
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil || b[0] != passByte {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("gates at %s: no pass for %s: %w", addr, conversation, errors.Join(err, errNoPass))
	}
	// The pass is this pause's once acknowledged; unacknowledged, the gates
	// give it back.
	if _, err := conn.Write([]byte{ackByte}); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("gates at %s: acknowledge the pass for %s: %w", addr, conversation, err)
	}
	return nil
}

// errNoPass: the gates closed the connection without letting the token pass.
var errNoPass = errors.New("gates: closed without a pass")
