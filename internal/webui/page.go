package webui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/turnpike-dev/turnpike/internal/server"
)

// DefaultStreamURL is the push gateway as the page finds it by default: the
// page's own host name, port 8081 (TURNPIKE_PUSHGW_ADDR's default).
const DefaultStreamURL = "ws://" + HostPlaceholder + ":8081/v1/stream"

// HostPlaceholder in Config.StreamURL stands for the host name the browser
// loaded the page from.
const HostPlaceholder = "{host}"

//go:embed static
var static embed.FS

// Config configures the Page.
type Config struct {
	// StreamURL is the push gateway's WebSocket endpoint as browsers reach
	// it, ws:// or wss://; HostPlaceholder in it stands for the page's host
	// name. Default DefaultStreamURL.
	StreamURL string
	// DevTokens tells the page that POST /v1/dev/token mints tokens (the
	// devstack), so it offers a user picker instead of asking for a token.
	DevTokens bool
}

func (c Config) withDefaults() Config {
	if c.StreamURL == "" {
		c.StreamURL = DefaultStreamURL
	}
	return c
}

// Validate reports every problem of c (after defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	u, err := url.Parse(strings.ReplaceAll(c.StreamURL, HostPlaceholder, "example.com"))
	switch {
	case err != nil:
		return fmt.Errorf("web ui: stream url %q: %w", c.StreamURL, err)
	case u.Scheme != "ws" && u.Scheme != "wss":
		return fmt.Errorf("web ui: stream url %q: want a ws:// or wss:// URL", c.StreamURL)
	case u.Host == "":
		return fmt.Errorf("web ui: stream url %q: no host", c.StreamURL)
	}
	return nil
}

// contentType is the type of an embedded file by its extension: fixed here
// rather than read from the system's MIME database, which varies.
func contentType(ext string) (string, bool) {
	switch ext {
	case ".js":
		return "text/javascript; charset=utf-8", true
	case ".css":
		return "text/css; charset=utf-8", true
	case ".svg":
		return "image/svg+xml", true
	}
	return "", false
}

// asset is one file the Page serves, ready to send.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// Page serves the demo page: "/" is index.html (with the Config written
// into it) and "/ui/<name>" the other embedded files. Anything else is the
// API's JSON 404.
type Page struct {
	assets map[string]asset // by URL path
}

// New builds the Page, rendering the Config into index.html once.
func New(cfg Config) (*Page, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := &Page{assets: make(map[string]asset)}
	err := fs.WalkDir(static, "static", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := static.ReadFile(name)
		if err != nil {
			return err
		}
		base := path.Base(name)
		if base == "index.html" {
			if body, err = render(body, cfg); err != nil {
				return err
			}
			p.add("/", "text/html; charset=utf-8", body)
			return nil
		}
		ct, ok := contentType(path.Ext(base))
		if !ok {
			return fmt.Errorf("%s: no content type for its extension", name)
		}
		p.add("/ui/"+base, ct, body)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web ui: %w", err)
	}
	if _, ok := p.assets["/"]; !ok {
		return nil, errors.New("web ui: no index.html embedded")
	}
	return p, nil
}

func (p *Page) add(urlPath, contentType string, body []byte) {
	sum := sha256.Sum256(body)
	p.assets[urlPath] = asset{body: body, contentType: contentType, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
}

// render fills index.html's template with the page's settings.
func render(index []byte, cfg Config) ([]byte, error) {
	t, err := template.New("index.html").Parse(string(index))
	if err != nil {
		return nil, fmt.Errorf("parse index.html: %w", err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, cfg); err != nil {
		return nil, fmt.Errorf("render index.html: %w", err)
	}
	return b.Bytes(), nil
}

// contentSecurityPolicy allows the page's own files, its API on the same
// origin, WebSockets anywhere (the push gateway listens on another port or
// host), and blob: images: the artifacts it shows inline, whose bytes it
// fetches with the token in the Authorization header.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; " +
	"connect-src 'self' ws: wss:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// ServeHTTP serves GET and HEAD of the page's files, revalidated on every
// load (ETag), so a new build shows up on reload.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a, ok := p.assets[r.URL.Path]
	if !ok {
		server.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		server.MethodNotAllowed("GET, HEAD").ServeHTTP(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if r.URL.Path == "/" {
		h.Set("Content-Security-Policy", contentSecurityPolicy)
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}
