package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// serviceProcs runs the three services as processes. Ingest and the
// gateway serve on listeners this process holds for the whole test, so a
// restarted one comes back where clients look for it (connections made
// meanwhile wait in the listener's backlog); each worker gets a listener
// of its own for its metrics.
type serviceProcs struct {
	t   *testing.T
	f   *faultStack
	env []string
	lns map[string]*net.TCPListener

	mu    sync.Mutex
	procs map[string]*exec.Cmd
	ops   map[string]string
}

func (s *serviceProcs) addr(role string) string { return s.lns[role].Addr().String() }

func (s *serviceProcs) start(role string) {
	s.t.Helper()
	ln := s.lns[role]
	if ln == nil { // a worker: a new listener for its metrics
		ln = loopback(s.t)
		defer ln.Close()
	}
	cmd, err := startProcess(role, append(append([]string(nil), s.f.env...), s.env...), ln)
	if err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.procs[role] = cmd
	s.ops[role] = ln.Addr().String()
	s.mu.Unlock()
	// Wait until it serves.
	ctx := testenv.Context(s.t, 30*time.Second)
	poll(s.t, ctx, role+" ready", func() (bool, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ln.Addr().String()+"/readyz", nil)
		if err != nil {
			return false, err.Error()
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// metrics scrapes the metrics of role's process.
func (s *serviceProcs) metrics(ctx context.Context, role string) (metricSet, error) {
	s.mu.Lock()
	addr := s.ops[role]
	s.mu.Unlock()
	return scrape(ctx, addr)
}

// terminate sends SIGTERM and returns the exit code.
func (s *serviceProcs) terminate(role string) int {
	s.t.Helper()
	s.mu.Lock()
	cmd := s.procs[role]
	delete(s.procs, role)
	s.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		s.t.Fatalf("%s did not stop within 60s of SIGTERM", role)
		return -1
	}
}

func (s *serviceProcs) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for role, cmd := range s.procs {
		if err := cmd.Process.Kill(); err != nil {
			s.t.Errorf("kill %s: %v", role, err)
		}
		_ = cmd.Wait() // "signal: killed"
	}
	for _, ln := range s.lns {
		ln.Close()
	}
}

func TestSIGTERMUnderLoadLosesNothingInAnyService(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts every service under load")
	}
	ctx := testenv.Context(t, 3*time.Minute)
	f := newFaultStack(t)
	const secret = "shutdown-test-secret-of-32-bytes-or-more"
	sp := &serviceProcs{t: t, f: f, procs: map[string]*exec.Cmd{}, ops: map[string]string{},
		lns: map[string]*net.TCPListener{"ingest": loopback(t), "pushgw": loopback(t)}}
	sp.env = []string{"TURNPIKE_AUTH_SECRET=" + secret, "TURNPIKE_RATE_PER_SECOND=-1"}
	t.Cleanup(sp.stopAll)
	for _, role := range []string{"pushgw", "worker", "ingest"} {
		sp.start(role)
	}
	tok, err := auth.Mint(secret, "acme", "term", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := &client.Client{BaseURL: "http://" + sp.addr("ingest"), StreamURL: "ws://" + sp.addr("pushgw") + "/v1/stream", Token: tok}
	l := load{convs: 8, msgs: 6, user: "term", extra: "[[delay:30ms]]"}

	var wg sync.WaitGroup
	errs := make(chan error, l.convs)
	for i := 1; i <= l.convs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := converse(ctx, c, l, i); err != nil {
				errs <- err
			}
		}()
	}
	// Restart every service once, mid-load, with SIGTERM, each while the
	// worker has runs in flight.
	for _, role := range []string{"worker", "ingest", "pushgw"} {
		poll(t, ctx, "the worker running", func() (bool, string) {
			m, err := sp.metrics(ctx, "worker")
			if err != nil {
				return false, err.Error()
			}
			return m.sum(metricRunning) > 0, "no run in flight"
		})
		if code := sp.terminate(role); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", role, code)
		}
		t.Logf("%s stopped with SIGTERM and restarted", role)
		sp.start(role)
	}
	wg.Wait()
	t.Log("load done")
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	v := f.waitDone(t, ctx, l)
	// The worker stopped with runs in flight and drained them (runs take
	// about 150ms, the drain deadline is 2s): none was cut off and re-run.
	if v.reruns != 0 {
		t.Fatalf("%d runs were cut off by SIGTERM and re-run: the worker did not drain", v.reruns)
	}
}

// converse is one chat user: each message is sent (retried with its
// idempotency key until ingest accepts it) after the previous one
// completed on the stream; the subscription resumes across gateway
// restarts.
func converse(ctx context.Context, c *client.Client, l load, i int) error {
	conv := l.id(i).Conversation
	var sub *client.Subscription
	for {
		var err error
		if sub, err = c.Subscribe(ctx, conv, client.SubscribeOptions{}); err == nil {
			break
		}
		if ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer sub.Close()
	for j := 1; j <= l.msgs; j++ {
		var requestID string
		for {
			a, err := c.Send(ctx, conv, l.content(j), client.SendOptions{IdempotencyKey: fmt.Sprintf("c%d-m%d", i, j)})
			if err == nil {
				requestID = a.RequestID
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%s m%d never accepted: %w", conv, j, err)
			}
			time.Sleep(50 * time.Millisecond) // ingest restarting, or 503
		}
		for {
			e, err := sub.Next(ctx)
			if err != nil {
				return fmt.Errorf("%s m%d: %w", conv, j, err)
			}
			if done, ok := e.(*events.RunCompletedEvent); ok && done.RequestID == requestID {
				if done.Status != events.StatusComplete {
					return fmt.Errorf("%s m%d completed %s", conv, j, done.Status)
				}
				break
			}
		}
	}
	return nil
}
