package service_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/internal/service"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/auth"
)

// Every answer of the push gateway's HTTP side other than an upgrade is in
// the JSON error shape with the code of its status: unknown paths, other
// methods, and a GET that is not a WebSocket handshake.
func TestThePushGatewayAnswersEveryErrorInTheJSONShape(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	secret := strings.Repeat("s", 32)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	c := service.PushgwConfig{Shared: service.Shared{Brokers: testenv.Kafka(t), AuthSecret: secret, TopicPrefix: testenv.Name(t, "p") + ".", Model: "echo", Partitions: 2}}
	go func() {
		done <- service.RunPushgw(runCtx, c, service.Env{Ready: func() { close(ready) }}, ln)
	}()
	select {
	case <-ready:
		t.Cleanup(func() { stop(); <-done })
	case err := <-done:
		stop()
		t.Fatalf("RunPushgw: %v", err)
	}
	tok, err := auth.Mint(secret, auth.DefaultTenant, "alice", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	for _, tt := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodGet, "/nope", 404, ""},
		{http.MethodGet, "/v1/stream/", 404, ""},
		{http.MethodPost, "/v1/stream", 405, "GET"},
		{http.MethodDelete, "/v1/stream", 405, "GET"},
		{http.MethodGet, "/v1/stream", 400, ""}, // a token but no handshake
		{http.MethodPost, "/healthz", 405, "GET, HEAD"},
		{http.MethodGet, "/v1/./stream", 404, ""},
	} {
		req, err := http.NewRequestWithContext(ctx, tt.method, base+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultTransport.RoundTrip(req) // no redirects followed
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if res.StatusCode != tt.status || res.Header.Get("Content-Type") != "application/json" ||
			json.Unmarshal(b, &e) != nil || e.Error.Code != server.CodeFor(tt.status) || res.Header.Get("Allow") != tt.allow {
			t.Errorf("%s %s: %d %s %q (Allow %q); want %d %s in the JSON shape (Allow %q)", tt.method, tt.path,
				res.StatusCode, res.Header.Get("Content-Type"), b, res.Header.Get("Allow"), tt.status, server.CodeFor(tt.status), tt.allow)
		}
	}
}
