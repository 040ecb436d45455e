package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/auth"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// serviceProcs runs the three services as processes on fixed addresses,
// so that a restarted one comes back where clients look for it.
type serviceProcs struct {
	t     *testing.T
	f     *faultStack
	env   []string
	addrs map[string]string

	mu    sync.Mutex
	procs map[string]*exec.Cmd
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (s *serviceProcs) start(role string) {
	s.t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(append(os.Environ(), "TURNPIKE_TEST_RUN_SERVICE="+role), s.f.env...), s.env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.procs[role] = cmd
	s.mu.Unlock()
	if role == "worker" {
		return
	}
	// Wait until it serves.
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get("http://" + s.addrs[role] + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s not ready", role)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	for _, cmd := range s.procs {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

func TestSIGTERMUnderLoadLosesNothingInAnyService(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts every service under load")
	}
	ctx := testenv.Context(t, 3*time.Minute)
	f := newFaultStack(t)
	const secret = "shutdown-test-secret-of-32-bytes-or-more"
	sp := &serviceProcs{t: t, f: f, procs: map[string]*exec.Cmd{},
		addrs: map[string]string{"ingest": freeAddr(t), "pushgw": freeAddr(t)}}
	sp.env = []string{
		"TURNPIKE_AUTH_SECRET=" + secret, "TURNPIKE_RATE_PER_SECOND=-1",
		"TURNPIKE_INGEST_ADDR=" + sp.addrs["ingest"], "TURNPIKE_PUSHGW_ADDR=" + sp.addrs["pushgw"],
	}
	t.Cleanup(sp.stopAll)
	for _, role := range []string{"pushgw", "worker", "ingest"} {
		sp.start(role)
	}
	tok, err := auth.Mint(secret, "acme", "term", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := &client.Client{BaseURL: "http://" + sp.addrs["ingest"], StreamURL: "ws://" + sp.addrs["pushgw"] + "/v1/stream", Token: tok}
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
	// Restart every service once, mid-load, with SIGTERM.
	for _, role := range []string{"worker", "ingest", "pushgw"} {
		time.Sleep(800 * time.Millisecond)
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
	v := waitDone(t, ctx, f.store(), l)
	t.Logf("verdict: %s", v)
	if !v.ok() {
		t.Fatalf("invariants violated: %s", v)
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
