package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/ingest"
	"github.com/turnpike-dev/turnpike/pkg/pushgw"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// /readyz of each service is 200 while what it uses answers and 503,
// naming the check that failed, while MongoDB or Kafka is unreachable
// (docs/api.md "Health and metrics"): ingest and the worker check both;
// the push gateway, which uses no MongoDB, stays ready without it. The
// broker and the store are this test's own (embedded, whatever
// TURNPIKE_KAFKA_BROKERS and TURNPIKE_MONGO_URI say), so that it can stop
// them under the running services.
func TestEachServicesReadinessFailsWhileItsBrokerOrStoreIsUnreachable(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 2*time.Minute)
	kafka := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	mongo := testenv.EmbeddedMongo(t, t.TempDir())
	const secret = "readyz-test-secret-that-is-32-bytes-long"
	prefix, db, brokers := testenv.Name(t, "ready"), testenv.Name(t, "ready"), []string{kafka.Addr()}
	quiet := slog.New(slog.DiscardHandler)

	run := func(name string, r func(context.Context) error) {
		runCtx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			// Run's error after its broker or store went away is not
			// this test's subject: staying up and unready is.
			_ = r(runCtx)
		}()
		t.Cleanup(func() {
			stop()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Errorf("%s did not return within a minute of its stop", name)
			}
		})
	}
	ic := ingest.DefaultConfig()
	ic.Brokers, ic.MongoURI, ic.MongoDB, ic.AuthSecret, ic.TopicPrefix = brokers, mongo.URI(), db, secret, prefix
	in := loopback(t)
	is, err := ingest.New(ic, ingest.WithListener(in), ingest.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	run("ingest", is.Run)
	wc := worker.DefaultConfig()
	wc.Brokers, wc.MongoURI, wc.MongoDB, wc.TopicPrefix = brokers, mongo.URI(), db, prefix
	wl := loopback(t)
	w, err := worker.New(wc, worker.WithListener(wl), worker.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	run("worker", w.Run)
	pc := pushgw.DefaultConfig()
	pc.Brokers, pc.AuthSecret, pc.TopicPrefix = brokers, secret, prefix
	pl := loopback(t)
	gw, err := pushgw.New(pc, pushgw.WithListener(pl), pushgw.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	run("pushgw", gw.Run)

	type service struct {
		name, addr string
		checks     []string // its readiness checks, the first its store's when it has one
	}
	services := []service{
		{"ingest", in.Addr().String(), []string{"mongo", "kafka"}},
		{"worker", wl.Addr().String(), []string{"mongo", "kafka"}},
		{"pushgw", pl.Addr().String(), []string{"kafka", "gateway"}},
	}
	// want waits until s's /readyz answers status, those of its checks in
	// down failing and the others "ok". A check missing or unknown fails
	// at once: no wait makes it right.
	want := func(s service, status int, down ...string) {
		t.Helper()
		var names []string
		testenv.Eventually(t, ctx, fmt.Sprintf("%s /readyz %d with %v down", s.name, status, down), func() bool {
			code, checks, err := readyz(ctx, s.addr)
			if err != nil {
				return false
			}
			if names = slices.Sorted(maps.Keys(checks)); !slices.Equal(names, slices.Sorted(slices.Values(s.checks))) {
				return true
			}
			if code != status {
				return false
			}
			for _, c := range s.checks {
				if slices.Contains(down, c) == (checks[c] == "ok") {
					return false
				}
			}
			return true
		})
		if !slices.Equal(names, slices.Sorted(slices.Values(s.checks))) {
			t.Fatalf("%s /readyz checks %v, want %v", s.name, names, s.checks)
		}
	}
	for _, s := range services {
		want(s, http.StatusOK)
	}
	mongo.Close()
	for _, s := range services {
		if s.checks[0] == "mongo" {
			want(s, http.StatusServiceUnavailable, "mongo")
		} else {
			want(s, http.StatusOK)
		}
	}
	kafka.Close()
	for _, s := range services {
		if s.checks[0] == "mongo" {
			want(s, http.StatusServiceUnavailable, "mongo", "kafka")
		} else {
			// The gateway's own check needs the stream topic's metadata.
			want(s, http.StatusServiceUnavailable, "kafka", "gateway")
		}
	}
}

// readyz returns the status of addr's /readyz and its checks.
func readyz(ctx context.Context, addr string) (int, map[string]string, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Checks map[string]string `json:"checks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return resp.StatusCode, nil, err
	}
	return resp.StatusCode, body.Checks, nil
}
