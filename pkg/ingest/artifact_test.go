package ingest

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// publishArtifact saves and publishes one version of name for id.
func publishArtifact(t *testing.T, ctx context.Context, a history.ArtifactService, id events.Identity, name, mime, data string) history.Artifact {
	t.Helper()
	tok, err := a.Stage(ctx, id, history.ArtifactSave{Name: name, MIME: mime, Data: []byte(data)})
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Publish(ctx, id, []string{tok})
	if err != nil || len(out) != 1 {
		t.Fatalf("Publish: %v, %v", out, err)
	}
	return out[0]
}

func artifactService(t *testing.T) (*testService, *history.MemoryArtifacts) {
	t.Helper()
	arts := history.NewMemoryArtifacts(history.ArtifactLimits{})
	s := newTestServiceWith(t, Config{}, nil, nil, nil, func(d *serviceDeps) { d.Artifacts = arts })
	return s, arts
}

// The routes list, read (any version, with ETag, conditional and range
// requests) and delete the caller's artifacts.
func TestArtifactRoutesListReadAndDelete(t *testing.T) {
	t.Parallel()
	s, arts := artifactService(t)
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "c1"}
	v1 := publishArtifact(t, s.ctx, arts, id, "chart.png", "image/png", "\x89PNG one")
	v2 := publishArtifact(t, s.ctx, arts, id, "chart.png", "image/png", "\x89PNG two!")
	publishArtifact(t, s.ctx, arts, id, "user:notes.txt", "text/plain", "notes")
	tok := token(t, "acme", "alice")

	w := s.do(http.MethodGet, "/v1/conversations/c1/artifacts", tok, "", nil)
	var list artifactsJSON
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &list) != nil || len(list.Artifacts) != 2 ||
		list.Artifacts[0].Name != "chart.png" || list.Artifacts[0].Version != 2 || list.Artifacts[0].MIMEType != "image/png" ||
		list.Artifacts[0].Size != int64(len("\x89PNG two!")) || list.Artifacts[1].Name != "user:notes.txt" {
		t.Fatalf("list: %d %s", w.Code, w.Body)
	}
	w = s.do(http.MethodGet, "/v1/conversations/c1/artifacts/chart.png", tok, "", nil)
	if w.Code != http.StatusOK || w.Body.String() != "\x89PNG two!" || w.Header().Get("Content-Type") != "image/png" ||
		w.Header().Get("ETag") != `"`+v2.Token+`"` || w.Header().Get("X-Artifact-Version") != "2" {
		t.Fatalf("latest: %d %q %v", w.Code, w.Body, w.Header())
	}
	w = s.do(http.MethodGet, "/v1/conversations/c1/artifacts/chart.png?version=1", tok, "", nil)
	if w.Code != http.StatusOK || w.Body.String() != "\x89PNG one" || w.Header().Get("ETag") != `"`+v1.Token+`"` {
		t.Fatalf("version 1: %d %q", w.Code, w.Body)
	}
	w = s.do(http.MethodGet, "/v1/conversations/c1/artifacts/chart.png", tok, "", map[string]string{"If-None-Match": `"` + v2.Token + `"`})
	if w.Code != http.StatusNotModified || w.Body.Len() != 0 {
		t.Fatalf("If-None-Match: %d %q", w.Code, w.Body)
	}
	w = s.do(http.MethodGet, "/v1/conversations/c1/artifacts/chart.png", tok, "", map[string]string{"Range": "bytes=1-3"})
	if w.Code != http.StatusPartialContent || w.Body.String() != "PNG" || w.Header().Get("Content-Range") != "bytes 1-3/9" {
		t.Fatalf("Range: %d %q %v", w.Code, w.Body, w.Header())
	}
	for _, q := range []string{"?version=0", "?version=-1", "?version=x", "?version="} {
		if w := s.do(http.MethodGet, "/v1/conversations/c1/artifacts/chart.png"+q, tok, "", nil); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"invalid_argument"`) {
			t.Errorf("GET %s: %d %s, want 400 invalid_argument", q, w.Code, w.Body)
		}
	}
	if w := s.do(http.MethodGet, "/v1/conversations/c1/artifacts/chart.png?version=3", tok, "", nil); w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), `"not_found"`) {
		t.Fatalf("version 3: %d %s", w.Code, w.Body)
	}
	if w := s.do(http.MethodPost, "/v1/conversations/c1/artifacts/chart.png", tok, "", nil); w.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", w.Code)
	}
	if w := s.do(http.MethodDelete, "/v1/conversations/c1/artifacts/chart.png", tok, "", nil); w.Code != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", w.Code, w.Body)
	}
	if w := s.do(http.MethodGet, "/v1/conversations/c1/artifacts/chart.png?version=1", tok, "", nil); w.Code != http.StatusNotFound {
		t.Fatalf("GET after DELETE: %d", w.Code)
	}
	if w := s.do(http.MethodDelete, "/v1/conversations/c1/artifacts/chart.png", tok, "", nil); w.Code != http.StatusNotFound {
		t.Fatalf("DELETE again: %d", w.Code)
	}
	if w := s.do(http.MethodGet, "/v1/conversations/c1/artifacts", "", "", nil); w.Code != http.StatusUnauthorized {
		t.Fatalf("without a token: %d", w.Code)
	}
}

// Every other identity (tenant, user; and another conversation for a
// conversation's name) can neither list, read nor delete, and forged
// names are refused without touching anything.
func TestArtifactRoutesAreBoundToTheIdentity(t *testing.T) {
	t.Parallel()
	s, arts := artifactService(t)
	id := events.Identity{Tenant: "acme", User: "alice", Conversation: "c1"}
	publishArtifact(t, s.ctx, arts, id, "secret.txt", "text/plain", "mine")
	publishArtifact(t, s.ctx, arts, id, "user:profile.txt", "text/plain", "me")
	type caller struct{ tenant, user, conv string }
	for _, c := range []caller{{"acme2", "alice", "c1"}, {"acme", "bob", "c1"}, {"acme", "alice", "c2"}} {
		tok := token(t, c.tenant, c.user)
		base := "/v1/conversations/" + c.conv + "/artifacts"
		w := s.do(http.MethodGet, base, tok, "", nil)
		if w.Code != http.StatusOK || strings.Contains(w.Body.String(), "secret") ||
			(c.user != "alice" || c.tenant != "acme") && strings.Contains(w.Body.String(), "profile") {
			t.Errorf("%v list: %d %s", c, w.Code, w.Body)
		}
		names := []string{"secret.txt"}
		if c.user != "alice" || c.tenant != "acme" {
			names = append(names, "user:profile.txt")
		}
		for _, name := range names {
			for _, m := range []string{http.MethodGet, http.MethodDelete} {
				if w := s.do(m, base+"/"+name, tok, "", nil); w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), `"not_found"`) {
					t.Errorf("%v %s %s: %d %s, want 404", c, m, name, w.Code, w.Body)
				}
			}
			if w := s.do(http.MethodGet, base+"/"+name+"?version=1", tok, "", nil); w.Code != http.StatusNotFound {
				t.Errorf("%v GET %s?version=1: %d", c, name, w.Code)
			}
		}
	}
	tok := token(t, "acme", "alice")
	for _, forged := range []string{"..%2Fsecret.txt", "%2E%2E%2Fsecret.txt", "a%2Fb", "secret.txt%00", "%00", ".secret.txt",
		"user:..%2F..%2Fbob%2Fprofile.txt", "a%23b", strings.Repeat("a", history.MaxArtifactNameBytes+1)} {
		for _, m := range []string{http.MethodGet, http.MethodDelete} {
			w := s.do(m, "/v1/conversations/c1/artifacts/"+forged, tok, "", nil)
			// 400 for a bad name; a path net/http would clean ("../"
			// decoded) is refused earlier as not canonical: 404.
			bad := w.Code == http.StatusBadRequest && strings.Contains(w.Body.String(), `"invalid_argument"`) ||
				w.Code == http.StatusNotFound && strings.Contains(w.Body.String(), "canonical")
			if !bad {
				t.Errorf("%s %s: %d %s, want 400 invalid_argument or 404 not canonical", m, forged, w.Code, w.Body)
			}
		}
	}
	// A path with ../ never reaches another conversation's artifacts.
	for _, p := range []string{"/v1/conversations/c2/artifacts/../../c1/artifacts/secret.txt", "/v1/conversations/c1%2F..%2Fc1/artifacts/secret.txt"} {
		w := s.do(http.MethodGet, p, token(t, "acme", "bob"), "", nil)
		if w.Code == http.StatusOK || strings.Contains(w.Body.String(), "mine") {
			t.Errorf("GET %s as bob: %d %s", p, w.Code, w.Body)
		}
	}
	if _, data, err := arts.OpenArtifact(s.ctx, id, "secret.txt", 0); err != nil || string(data) != "mine" {
		t.Fatalf("secret.txt after the attempts: %q, %v", data, err)
	}
	if _, _, err := arts.OpenArtifact(s.ctx, id, "user:profile.txt", 0); err != nil {
		t.Fatalf("user:profile.txt after the attempts: %v", err)
	}
}
