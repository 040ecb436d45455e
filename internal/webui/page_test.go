package webui_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/turnpike-dev/turnpike/internal/webui"
)

func newPage(t *testing.T, cfg webui.Config) *webui.Page {
	t.Helper()
	p, err := webui.New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return p
}

func get(t *testing.T, h http.Handler, method, path string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestIndexCarriesTheSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		cfg           webui.Config
		wantStream    string
		wantDevTokens string
	}{
		{"By default the page finds the gateway on its own host, port 8081, and asks for a token.", webui.Config{},
			`content="ws://{host}:8081/v1/stream"`, `content="off"`},
		{"The devstack's settings reach the page.", webui.Config{StreamURL: "ws://{host}:39001/v1/stream", DevTokens: true},
			`content="ws://{host}:39001/v1/stream"`, `content="on"`},
		{"A URL with a query is escaped in the attribute.", webui.Config{StreamURL: `wss://push.example.com/v1/stream?a=1&b="x"`},
			`content="wss://push.example.com/v1/stream?a=1&amp;b=&#34;x&#34;"`, `content="off"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := get(t, newPage(t, tt.cfg), http.MethodGet, "/", nil)
			if w.Code != http.StatusOK {
				t.Fatalf("GET /: %d", w.Code)
			}
			body := w.Body.String()
			for _, want := range []string{`<meta name="turnpike-stream-url" ` + tt.wantStream, `<meta name="turnpike-dev-tokens" ` + tt.wantDevTokens} {
				if !strings.Contains(body, want) {
					t.Errorf("index.html lacks %s", want)
				}
			}
		})
	}
}

func TestHeadersAndRevalidation(t *testing.T) {
	t.Parallel()
	p := newPage(t, webui.Config{})
	tests := []struct {
		path, contentType string
		csp               bool
	}{
		{"/", "text/html; charset=utf-8", true},
		{"/ui/app.js", "text/javascript; charset=utf-8", false},
		{"/ui/turnpike.js", "text/javascript; charset=utf-8", false},
		{"/ui/app.css", "text/css; charset=utf-8", false},
		{"/ui/icon.svg", "image/svg+xml", false},
	}
	for _, tt := range tests {
		w := get(t, p, http.MethodGet, tt.path, nil)
		if w.Code != http.StatusOK || w.Body.Len() == 0 {
			t.Errorf("GET %s: %d, %d bytes", tt.path, w.Code, w.Body.Len())
			continue
		}
		h := w.Header()
		if got := h.Get("Content-Type"); got != tt.contentType {
			t.Errorf("GET %s: Content-Type %q, want %q", tt.path, got, tt.contentType)
		}
		if h.Get("Cache-Control") != "no-cache" || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: Cache-Control %q, X-Content-Type-Options %q", tt.path, h.Get("Cache-Control"), h.Get("X-Content-Type-Options"))
		}
		if csp := h.Get("Content-Security-Policy"); (csp != "") != tt.csp || (tt.csp && !strings.Contains(csp, "script-src 'self'")) {
			t.Errorf("GET %s: Content-Security-Policy %q", tt.path, csp)
		}
		etag := h.Get("ETag")
		if etag == "" {
			t.Errorf("GET %s: no ETag", tt.path)
			continue
		}
		if w := get(t, p, http.MethodGet, tt.path, map[string]string{"If-None-Match": etag}); w.Code != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %d, want 304", tt.path, w.Code)
		}
		if w := get(t, p, http.MethodHead, tt.path, nil); w.Code != http.StatusOK || w.Body.Len() != 0 {
			t.Errorf("HEAD %s: %d with %d bytes, want 200 without a body", tt.path, w.Code, w.Body.Len())
		}
	}
}

func TestUnknownPathsAndMethodsGetTheAPIErrorShape(t *testing.T) {
	t.Parallel()
	p := newPage(t, webui.Config{})
	tests := []struct {
		name, method, path string
		status             int
		code               string
	}{
		{"An unknown asset is a JSON 404.", http.MethodGet, "/ui/nope.js", 404, "not_found"},
		{"The directory of the assets is a JSON 404.", http.MethodGet, "/ui/", 404, "not_found"},
		{"index.html by name is a JSON 404.", http.MethodGet, "/index.html", 404, "not_found"},
		{"An embedded path is not served as such.", http.MethodGet, "/static/app.js", 404, "not_found"},
		{"POST is a JSON 405.", http.MethodPost, "/", 405, "method_not_allowed"},
	}
	for _, tt := range tests {
		w := get(t, p, tt.method, tt.path, nil)
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != tt.status || body.Error.Code != tt.code {
			t.Errorf("%s %s %s: %d %s, want %d %s", tt.name, tt.method, tt.path, w.Code, w.Body, tt.status, tt.code)
		}
		if tt.status == http.StatusMethodNotAllowed && w.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("%s Allow: %q, want GET, HEAD", tt.name, w.Header().Get("Allow"))
		}
	}
}

func TestEveryFileThePageLoadsIsServed(t *testing.T) {
	t.Parallel()
	p := newPage(t, webui.Config{})
	index := get(t, p, http.MethodGet, "/", nil).Body.String()
	refs := regexp.MustCompile(`(?:src|href)="(/ui/[^"]+)"`).FindAllStringSubmatch(index, -1)
	if len(refs) < 3 {
		t.Fatalf("index.html references %d files under /ui/, want the script, the stylesheet and the icon", len(refs))
	}
	app := get(t, p, http.MethodGet, "/ui/app.js", nil).Body.String()
	for _, m := range regexp.MustCompile(`from '\./([^']+)'`).FindAllStringSubmatch(app, -1) {
		refs = append(refs, []string{"", "/ui/" + m[1]})
	}
	for _, ref := range refs {
		if w := get(t, p, http.MethodGet, ref[1], nil); w.Code != http.StatusOK {
			t.Errorf("the page loads %s, which is %d", ref[1], w.Code)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		url     string
		wantErr string
	}{
		{"The default is valid.", "", ""},
		{"A wss URL is valid.", "wss://push.example.com/v1/stream", ""},
		{"A host placeholder is valid.", "ws://{host}:8081/v1/stream", ""},
		{"An http URL is refused.", "http://localhost:8081/v1/stream", "ws:// or wss://"},
		{"A URL without a host is refused.", "ws:///v1/stream", "no host"},
		{"A relative path is refused.", "/v1/stream", "ws:// or wss://"},
		{"An unparsable URL is refused.", "ws://[::1", "stream url"},
	}
	for _, tt := range tests {
		err := webui.Config{StreamURL: tt.url}.Validate()
		if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s Validate(%q) = %v, want an error with %q", tt.name, tt.url, err, tt.wantErr)
		}
		if _, nerr := webui.New(webui.Config{StreamURL: tt.url}); (nerr == nil) != (err == nil) {
			t.Errorf("%s New and Validate disagree: %v vs %v", tt.name, nerr, err)
		}
	}
}
