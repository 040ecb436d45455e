package service_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turnpike-dev/turnpike/internal/auth"
	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/service"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/client"
)

// The worker says it is ready only once its topics exist: the devstack
// reports ready when every service has, and ingest's first produce fails
// with "unknown topic" if the worker is still creating the requests topic.
// The broker holds CreateTopics back, so a worker that reports ready
// before its topics exist is seen doing so.
func TestTheWorkerIsReadyOnlyOnceItsTopicsExist(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	k := testenv.EmbeddedKafka(t, embedded.KafkaConfig{})
	var held, created atomic.Bool
	k.Cluster().ControlKey(int16(kmsg.CreateTopics), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster().KeepControl()
		if !held.Swap(true) {
			time.Sleep(300 * time.Millisecond)
		}
		created.Store(true) // the broker creates them right after this returns
		return nil, nil, false
	})
	prefix := testenv.Name(t, "ready") + "."
	c := service.WorkerConfig{Shared: service.Shared{Brokers: []string{k.Addr()}, MongoURI: testenv.MongoURI(t),
		MongoDB: testenv.Name(t, "ready"), AuthSecret: strings.Repeat("s", 32), TopicPrefix: prefix, Model: "echo", Partitions: 2}}
	runCtx, stop := context.WithCancel(ctx)
	ready := make(chan bool, 1)
	done := make(chan error, 1)
	go func() {
		done <- service.RunWorker(runCtx, c, service.Env{Ready: func() { ready <- created.Load() }}, nil)
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Error("the worker reported ready before the broker had created its topics")
		}
	case err := <-done:
		t.Fatalf("RunWorker: %v", err)
	case <-ctx.Done():
		t.Fatal("the worker never reported ready")
	}
	if _, err := topic.Partitions(ctx, []string{k.Addr()}, prefix+"requests"); err != nil {
		t.Errorf("the requests topic after ready: %v", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("RunWorker: %v", err)
	}
}

// Ingest creates the requests topic itself: a message POSTed before any
// worker has started is queued (202), not refused with 503 for an unknown
// topic, so the services may start in any order.
func TestIngestQueuesAMessageBeforeAnyWorkerHasStarted(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	secret := strings.Repeat("s", 32)
	brokers := []string{testenv.EmbeddedKafka(t, embedded.KafkaConfig{}).Addr()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := service.IngestConfig{Shared: service.Shared{Brokers: brokers, MongoURI: testenv.MongoURI(t), MongoDB: testenv.Name(t, "ingest"),
		AuthSecret: secret, TopicPrefix: testenv.Name(t, "ingest") + ".", Model: "echo", Partitions: 2}}
	runCtx, stop := context.WithCancel(ctx)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- service.RunIngest(runCtx, c, service.Env{Ready: func() { close(ready) }}, ln) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("RunIngest: %v", err)
	}
	tok, err := auth.Mint(secret, auth.DefaultTenant, "ann", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cl := &client.Client{BaseURL: "http://" + ln.Addr().String(), Token: tok}
	if _, err := cl.Send(ctx, "c1", "hello", client.SendOptions{}); err != nil {
		t.Errorf("a message before any worker: %v", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("RunIngest: %v", err)
	}
}
