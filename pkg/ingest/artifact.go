package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// Artifact routes (docs/api.md "Artifacts over the API"), served when
// serviceDeps.Artifacts is set.
const (
	artifactsPath = "/v1/conversations/{conversation}/artifacts"
	artifactPath  = "/v1/conversations/{conversation}/artifacts/{name}"
)

// artifactJSON is one artifact of GET …/artifacts.
type artifactJSON struct {
	Name         string    `json:"name"`
	Version      int       `json:"version"`
	MIMEType     string    `json:"mime_type"`
	Size         int64     `json:"size"`
	Conversation string    `json:"conversation"`
	SavedAt      time.Time `json:"saved_at"`
}

// artifactsJSON is the 200 body of GET …/artifacts.
type artifactsJSON struct {
	Conversation string         `json:"conversation"`
	Artifacts    []artifactJSON `json:"artifacts"`
}

// artifactID is the identity and name of an artifact route: 400 (and
// false) for a bad conversation or name. The name is the path segment as
// net/http decoded it, so "%2F" arrives as '/' and is refused.
func artifactID(w http.ResponseWriter, r *http.Request, p auth.Principal) (events.Identity, string, bool) {
	id := p.Identity(r.PathValue("conversation"))
	if err := events.ValidateID("conversation", id.Conversation); err != nil {
		badRequest(w, err)
		return id, "", false
	}
	name := r.PathValue("name")
	if err := history.ValidateArtifactName(name); err != nil {
		badRequest(w, err)
		return id, "", false
	}
	return id, name, true
}

// listArtifacts serves GET …/artifacts: the newest committed version of
// each name the conversation sees (its own and the caller's user: names).
// An identity without any is answered an empty list, whatever the
// conversation: another identity's artifacts are never in it.
func (s *service) listArtifacts(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	id := p.Identity(r.PathValue("conversation"))
	if err := events.ValidateID("conversation", id.Conversation); err != nil {
		badRequest(w, err)
		return
	}
	list, err := s.artifacts.ListArtifacts(r.Context(), id)
	if err != nil {
		s.internal(w, r, id, "", fmt.Errorf("list artifacts: %w", err))
		return
	}
	out := artifactsJSON{Conversation: id.Conversation, Artifacts: make([]artifactJSON, len(list))}
	for i, a := range list {
		out.Artifacts[i] = artifactJSON{Name: a.Name, Version: a.Version, MIMEType: a.MIME, Size: a.Size,
			Conversation: a.Conversation, SavedAt: a.SavedAt}
	}
	server.WriteJSON(w, http.StatusOK, out)
}

// getArtifact serves GET …/artifacts/{name}[?version=n]: the content
// with its Content-Type, an ETag (the version's token: unique), and
// conditional and range requests (http.ServeContent).
func (s *service) getArtifact(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	id, name, ok := artifactID(w, r, p)
	if !ok {
		return
	}
	version := 0
	if v := r.URL.Query().Get("version"); v != "" || r.URL.Query().Has("version") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			badRequest(w, fmt.Errorf("%w version %q: want a positive integer", events.ErrInvalid, truncate(v, 32)))
			return
		}
		version = n
	}
	a, data, err := s.artifacts.OpenArtifact(r.Context(), id, name, version)
	switch {
	case errors.Is(err, history.ErrNotFound):
		server.WriteError(w, http.StatusNotFound, server.CodeNotFound, "artifact not found", 0)
		return
	case errors.Is(err, events.ErrInvalid):
		badRequest(w, err)
		return
	case err != nil:
		s.internal(w, r, id, "", fmt.Errorf("open artifact: %w", err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.MIME)
	h.Set("ETag", `"`+a.Token+`"`)
	h.Set("X-Artifact-Version", strconv.Itoa(a.Version))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
	h.Set("Cache-Control", "private, no-cache")
	http.ServeContent(w, r, "", a.SavedAt, bytes.NewReader(data))
}

// deleteArtifact serves DELETE …/artifacts/{name}: every version goes;
// 204, or 404 when the identity has none of that name.
func (s *service) deleteArtifact(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	id, name, ok := artifactID(w, r, p)
	if !ok {
		return
	}
	err := s.artifacts.DeleteArtifact(r.Context(), id, name)
	switch {
	case errors.Is(err, history.ErrNotFound):
		server.WriteError(w, http.StatusNotFound, server.CodeNotFound, "artifact not found", 0)
	case err != nil:
		s.internal(w, r, id, "", fmt.Errorf("delete artifact: %w", err))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}
