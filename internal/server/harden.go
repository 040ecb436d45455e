package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Error codes of the other statuses (docs/api.md, "Errors over HTTP"): each
// status has its own.
const (
	CodePermissionDenied = "permission_denied"     // 403
	CodeMethodNotAllowed = "method_not_allowed"    // 405
	CodeRequestTimeout   = "request_timeout"       // 408
	CodeHeaderTooLarge   = "header_too_large"      // 431
	CodeNotImplemented   = "not_implemented"       // 501
	CodeVersionNotSupp   = "version_not_supported" // 505
)

// CodeFor returns the error code of an HTTP error status.
func CodeFor(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return CodeUnauthenticated
	case http.StatusForbidden:
		return CodePermissionDenied
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusMethodNotAllowed:
		return CodeMethodNotAllowed
	case http.StatusRequestTimeout:
		return CodeRequestTimeout
	case http.StatusRequestEntityTooLarge:
		return CodePayloadTooLarge
	case http.StatusTooManyRequests:
		return CodeRateLimited
	case http.StatusRequestHeaderFieldsTooLarge:
		return CodeHeaderTooLarge
	case http.StatusNotImplemented:
		return CodeNotImplemented
	case http.StatusServiceUnavailable:
		return CodeUnavailable
	case http.StatusHTTPVersionNotSupported:
		return CodeVersionNotSupp
	}
	if status >= 500 {
		return CodeInternal
	}
	return CodeInvalidArgument
}

// Timeouts bound how long a client may take over a request. Zero fields
// take the defaults.
type Timeouts struct {
	// ReadHeader bounds the request line and headers. Default 10s. A client
	// slower than that is answered 408 request_timeout and disconnected.
	ReadHeader time.Duration
	// Read bounds the whole request, headers and body. Default 30s. A
	// handler reading a body past it gets an error that WriteBodyError
	// answers 408 request_timeout.
	Read time.Duration
	// Idle bounds a keep-alive connection between requests. Default 120s.
	Idle time.Duration
}

// Defaults of Timeouts.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
)

func (t Timeouts) withDefaults() Timeouts {
	if t.ReadHeader <= 0 {
		t.ReadHeader = DefaultReadHeaderTimeout
	}
	if t.Read <= 0 {
		t.Read = DefaultReadTimeout
	}
	if t.Idle <= 0 {
		t.Idle = DefaultIdleTimeout
	}
	return t
}

// NotFound answers 404 not_found.
func NotFound(w http.ResponseWriter, _ *http.Request) {
	WriteError(w, http.StatusNotFound, CodeNotFound, "no such route", 0)
}

// MethodNotAllowed answers 405 method_not_allowed with an Allow header.
func MethodNotAllowed(allow string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		WriteError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "method "+r.Method+" not allowed; allowed: "+allow, 0)
	})
}

// WriteBodyError answers a failure to read a request body: 413 for a body
// over its http.MaxBytesReader limit, 408 when the client was too slow
// (Timeouts.Read), else 400.
func WriteBodyError(w http.ResponseWriter, err error) {
	if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
		WriteError(w, http.StatusRequestEntityTooLarge, CodePayloadTooLarge, fmt.Sprintf("body over %d bytes", mbe.Limit), 0)
		return
	}
	if ne, ok := errors.AsType[net.Error](err); (ok && ne.Timeout()) || errors.Is(err, os.ErrDeadlineExceeded) {
		w.Header().Set("Connection", "close")
		WriteError(w, http.StatusRequestTimeout, CodeRequestTimeout, "request body not received in time", 0)
		return
	}
	WriteError(w, http.StatusBadRequest, CodeInvalidArgument, "read body: "+err.Error(), 0)
}

// guard is the outermost handler of every server (see Serve):
//   - A path that is not canonical ("..", ".", "//" segments) is answered
//     404 not_found: no API path redirects, and none resolves dot segments.
//   - A request with a body is answered with "Connection: close" unless the
//     handler read the body to its end, so an answer decided before the
//     body (a 401, a 405) goes out at once instead of after net/http has
//     waited to discard the rest of the body.
func guard(h http.Handler) http.Handler {
	h = CanonicalPaths(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			w.Header().Set("Connection", "close")
			r.Body = &eofBody{ReadCloser: r.Body, header: w.Header()}
		}
		h.ServeHTTP(w, r)
	})
}

// CanonicalPaths answers a request whose path is not canonical ("..", "."
// or "//" segments) 404 not_found instead of passing it to h, whose
// ServeMux would redirect it: no API path redirects or resolves dot
// segments.
func CanonicalPaths(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !canonicalPath(r.URL.Path) && r.Method != http.MethodConnect {
			WriteError(w, http.StatusNotFound, CodeNotFound, "no such route: the path is not in canonical form", 0)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// canonicalPath reports whether p is what path.Clean makes of it (a
// trailing slash allowed).
func canonicalPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	if c != "/" && strings.HasSuffix(p, "/") {
		c += "/"
	}
	return c == p
}

// eofBody drops the "Connection: close" guard set when the body has been
// read to its end: the connection can then be reused.
type eofBody struct {
	io.ReadCloser
	header http.Header
	done   bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.header.Del("Connection")
	}
	return n, err
}

// jsonErrorListener accepts connections whose answers written by net/http
// itself, before any handler (431 for headers too large, 400 for a
// malformed request, 501, 505), are rewritten in the JSON error shape. A
// client too slow with its request line or headers gets 408
// request_timeout where net/http would answer 400 or hang up silently.
type jsonErrorListener struct{ net.Listener }

func (l jsonErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &jsonErrorConn{Conn: c}, nil
}

type jsonErrorConn struct {
	net.Conn

	mu sync.Mutex
	// Guarded by mu.
	pending  bool // bytes of a request were read since the last answer
	timedOut bool // and then a read hit its deadline
	upgraded bool // a 101 went out: the connection speaks another protocol
}

func (c *jsonErrorConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	if n > 0 {
		c.pending = true
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		c.timedOut = true
	}
	c.mu.Unlock()
	return n, err
}

// CloseWrite lets net/http half-close as it would the TCP connection.
func (c *jsonErrorConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close answers 408 first when net/http hangs up on a request whose
// headers did not arrive in time.
func (c *jsonErrorConn) Close() error {
	c.mu.Lock()
	slow := c.pending && c.timedOut && !c.upgraded
	c.pending = false
	c.mu.Unlock()
	if slow {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Conn.Write(jsonErrorResponse(http.StatusRequestTimeout, "request headers not received in time"))
	}
	return c.Conn.Close()
}

// cannedHeaders are the headers of net/http's own error answers; its
// handlers' answers always carry a Date header as well, so they never look
// like this.
const cannedHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c *jsonErrorConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	upgraded, timedOut := c.upgraded, c.timedOut
	c.pending, c.timedOut = false, false
	if bytes.HasPrefix(p, []byte("HTTP/1.1 101 ")) {
		c.upgraded = true
	}
	c.mu.Unlock()
	if upgraded || !bytes.HasPrefix(p, []byte("HTTP/1.1 ")) {
		return c.Conn.Write(p)
	}
	status, msg, ok := parseCanned(p)
	if !ok {
		return c.Conn.Write(p)
	}
	if status == http.StatusBadRequest && timedOut {
		status, msg = http.StatusRequestTimeout, "request headers not received in time"
	}
	if _, err := c.Conn.Write(jsonErrorResponse(status, msg)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// jsonErrorResponse is a whole HTTP/1.1 error answer in the JSON shape,
// closing the connection.
func jsonErrorResponse(status int, msg string) []byte {
	var b errorBody
	b.Error.Code, b.Error.Message = CodeFor(status), msg
	body, _ := json.Marshal(b)
	head := "HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) +
		"\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n"
	return append([]byte(head), body...)
}

// parseCanned recognises "HTTP/1.1 <status> <text>" + cannedHeaders + body.
func parseCanned(p []byte) (status int, msg string, ok bool) {
	line, rest, found := bytes.Cut(p, []byte("\r\n"))
	if !found || len(line) < len("HTTP/1.1 400") {
		return 0, "", false
	}
	status, err := strconv.Atoi(string(line[len("HTTP/1.1 "):len("HTTP/1.1 400")]))
	if err != nil || status < 400 || status > 599 {
		return 0, "", false
	}
	body, found := bytes.CutPrefix(append([]byte("\r\n"), rest...), []byte(cannedHeaders))
	if !found {
		return 0, "", false
	}
	return status, string(body), true
}
