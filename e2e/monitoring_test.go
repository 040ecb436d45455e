package e2e

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
)

// monitoringMetricsFile lists every metric the Grafana dashboard and the
// PrometheusRule read; deploy/promcheck's TestTheMetricsListIsCurrent
// keeps it equal to the names their PromQL parses to.
var monitoringMetricsFile = filepath.Join("..", "deploy", "promcheck", "metrics.txt")

// Every metric the dashboard and the alerts read exists on a running
// stack's /metrics (docs/deploy.md "Monitoring"), once a turn has run and
// the kubelet's readiness probe (here, a GET /readyz) has: a query of a
// renamed or missing metric fails here. The devstack's services share one
// registry, served on ingest's and the gateway's listeners; both are
// scraped, once the worker reported its partitions' lag.
func TestTheMonitoringMetricsExistOnARunningStack(t *testing.T) {
	t.Parallel()
	want := readMonitoringMetrics(t)
	ctx := testenv.Context(t, 90*time.Second)
	st := startStack(t, "")
	defer st.stop()
	c := st.client(t, "acme", "ops")
	sub, err := c.Subscribe(ctx, "monitored", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	a, err := c.Send(ctx, "monitored", "hello there", client.SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if done, ok := e.(*events.RunCompletedEvent); ok && done.RequestID == a.RequestID {
			break
		}
	}
	// A partition's lag is first reported at its first commit tick after
	// the assignment: wait for it, then check every name.
	for {
		m, err := scrape(ctx, st.IngestAddr)
		if err != nil {
			t.Fatal(err)
		}
		if len(m[metricLag]) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never reported: %v", metricLag, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	have := map[string]bool{}
	for _, addr := range []string{st.IngestAddr, st.PushgwAddr} {
		get(ctx, t, "http://"+addr+"/readyz")
		m, err := scrape(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		for name := range m {
			have[name] = true
		}
	}
	for _, name := range want {
		if !have[name] {
			t.Errorf("%s names %s; the running stack's /metrics has no such series", monitoringMetricsFile, name)
		}
	}
}

// readMonitoringMetrics reads the names of monitoringMetricsFile.
func readMonitoringMetrics(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(monitoringMetricsFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			names = append(names, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(names) < 10 {
		t.Fatalf("%s lists only %v", monitoringMetricsFile, names)
	}
	return names
}

// get GETs url and drops the answer (its status too: /readyz is called
// for its side effect on /metrics).
func get(ctx context.Context, t *testing.T, url string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}
