package ingest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// memoryService is a test service with mem serving DELETE /v1/memories.
func memoryService(t *testing.T, mem history.MemoryService) *testService {
	t.Helper()
	return newTestServiceWith(t, Config{}, nil, nil, nil, func(d *serviceDeps) { d.Memory = mem })
}

func remember(t *testing.T, ctx context.Context, mem history.MemoryService, tenant, user, conv string) {
	t.Helper()
	id := events.Identity{Tenant: tenant, User: user, Conversation: conv}
	if _, err := mem.Add(ctx, history.Memory{Identity: id, Turn: 1, Question: "the walrus fact", Answer: "ok", At: time.Unix(1, 0)}); err != nil {
		t.Fatal(err)
	}
}

// memoriesOf is where (tenant, user) has memories: "conv conv …".
func memoriesOf(t *testing.T, ctx context.Context, mem history.MemoryService, tenant, user string) string {
	t.Helper()
	hits, err := mem.Search(ctx, tenant, user, "walrus", 50)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, h := range hits {
		out = append(out, h.Identity.Conversation)
	}
	return strings.Join(out, " ")
}

func TestDeleteMemoriesDeletesTheTokensUsersOnly(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mem := history.NewInMemoryMemory()
	owners := [][2]string{{"acme", "alice"}, {"acme", "bob"}, {"other", "alice"}}
	for _, o := range owners {
		remember(t, ctx, mem, o[0], o[1], "a")
		remember(t, ctx, mem, o[0], o[1], "b")
	}
	s := memoryService(t, mem)

	w := s.do(http.MethodDelete, memoriesPath+"?conversation=a", token(t, "acme", "alice"), "", nil)
	if w.Code != http.StatusOK || !sameJSON(t, w.Body.String(), `{"conversation":"a","deleted":1}`) {
		t.Fatalf("DELETE ?conversation=a: %d %s", w.Code, w.Body)
	}
	if got := memoriesOf(t, ctx, mem, "acme", "alice"); got != "b" {
		t.Fatalf("alice's memories after deleting a: %q; want b", got)
	}
	for _, o := range owners[1:] {
		if got := memoriesOf(t, ctx, mem, o[0], o[1]); got != "a b" && got != "b a" {
			t.Fatalf("%s/%s's memories after alice's delete: %q; want a and b", o[0], o[1], got)
		}
	}
	w = s.do(http.MethodDelete, memoriesPath, token(t, "acme", "alice"), "", nil)
	if w.Code != http.StatusOK || !sameJSON(t, w.Body.String(), `{"deleted":1}`) {
		t.Fatalf("DELETE all: %d %s", w.Code, w.Body)
	}
	w = s.do(http.MethodDelete, memoriesPath, token(t, "acme", "alice"), "", nil)
	if w.Code != http.StatusOK || !sameJSON(t, w.Body.String(), `{"deleted":0}`) {
		t.Fatalf("DELETE all again: %d %s; want 200 deleted 0", w.Code, w.Body)
	}
	for _, o := range owners[1:] {
		if got := memoriesOf(t, ctx, mem, o[0], o[1]); len(strings.Fields(got)) != 2 {
			t.Fatalf("%s/%s's memories after alice's deletes: %q; want both", o[0], o[1], got)
		}
	}
}

func TestDeleteMemoriesRefusesBadInputWithJSON4xx(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mem := history.NewInMemoryMemory()
	remember(t, ctx, mem, "acme", "alice", "a")
	s := memoryService(t, mem)
	tok := token(t, "acme", "alice")
	cases := []struct {
		name, method, target, tok string
		status                    int
		code                      string
	}{
		{"no token", http.MethodDelete, memoriesPath, "", 401, server.CodeUnauthenticated},
		{"GET", http.MethodGet, memoriesPath, tok, 405, ""},
		{"empty conversation", http.MethodDelete, memoriesPath + "?conversation=", tok, 400, server.CodeInvalidArgument},
		{"twice", http.MethodDelete, memoriesPath + "?conversation=a&conversation=b", tok, 400, server.CodeInvalidArgument},
		{"unknown parameter", http.MethodDelete, memoriesPath + "?user=bob", tok, 400, server.CodeInvalidArgument},
		{"tenant parameter", http.MethodDelete, memoriesPath + "?tenant=other", tok, 400, server.CodeInvalidArgument},
		{"../", http.MethodDelete, memoriesPath + "?conversation=" + url.QueryEscape("../a"), tok, 400, server.CodeInvalidArgument},
		{"%2F", http.MethodDelete, memoriesPath + "?conversation=a%2Fb", tok, 400, server.CodeInvalidArgument},
		{"NUL", http.MethodDelete, memoriesPath + "?conversation=a%00", tok, 400, server.CodeInvalidArgument},
		{"over-long", http.MethodDelete, memoriesPath + "?conversation=" + strings.Repeat("a", events.MaxIDLen+1), tok, 400, server.CodeInvalidArgument},
	}
	for _, c := range cases {
		w := s.do(c.method, c.target, c.tok, "", nil)
		if w.Code != c.status || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
			t.Fatalf("%s: %d %q %s; want %d JSON", c.name, w.Code, w.Header().Get("Content-Type"), w.Body, c.status)
		}
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error.Message == "" || (c.code != "" && body.Error.Code != c.code) {
			t.Fatalf("%s: body %s; want the error shape with code %q", c.name, w.Body, c.code)
		}
	}
	if got := memoriesOf(t, ctx, mem, "acme", "alice"); got != "a" {
		t.Fatalf("refused deletes deleted something: %q left", got)
	}
}

func TestDeleteMemoriesIsNotServedWithoutMemory(t *testing.T) {
	t.Parallel()
	s := newTestService(t, Config{}, nil, nil, nil)
	if w := s.do(http.MethodDelete, memoriesPath, token(t, "acme", "alice"), "", nil); w.Code != http.StatusNotFound {
		t.Fatalf("DELETE without memory: %d %s; want 404", w.Code, w.Body)
	}
}
