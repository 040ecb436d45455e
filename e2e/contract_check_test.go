package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/gorilla/websocket"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// The published specifications, checked against the running stack:
// docs/openapi.yaml (every HTTP exchange of a client built by
// stack.client, and of contractDial's WebSocket handshakes) and
// docs/asyncapi.yaml with the JSON Schemas it references (every record of
// every topic, every WebSocket and event-stream frame). docs/api.md is the
// prose and wins where they disagree; a mismatch fails the test that made
// the exchange, naming the document.

// specDir is where the specifications are, from this package.
const specDir = "../docs"

// contract is the loaded specifications.
type contract struct {
	doc    *openapi3.T
	router routers.Router
	errSch *openapi3.Schema // components.schemas.Error
	// The AsyncAPI messages' payloads and headers, compiled through the
	// document's own references.
	request, streamRecord, control *jsonschema.Schema
	requestHeaders, dlqHeaders     *jsonschema.Schema
	clientFrame, serverFrame       *jsonschema.Schema
}

var loadContract = sync.OnceValues(func() (*contract, error) {
	ctx := context.Background()
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = true
	doc, err := loader.LoadFromFile(filepath.Join(specDir, "openapi.yaml"))
	if err != nil {
		return nil, fmt.Errorf("docs/openapi.yaml: %w", err)
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, fmt.Errorf("docs/openapi.yaml does not validate: %w", err)
	}
	// The stack serves on random ports: match paths, not the example servers.
	doc.Servers = nil
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("docs/openapi.yaml: %w", err)
	}
	c := &contract{doc: doc, router: router, errSch: doc.Components.Schemas["Error"].Value}

	abs, err := filepath.Abs(filepath.Join(specDir, "asyncapi.yaml"))
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(abs)
	if err != nil {
		return nil, err
	}
	var y any
	if err := yaml.Unmarshal(raw, &y); err != nil {
		return nil, fmt.Errorf("docs/asyncapi.yaml: %w", err)
	}
	j, err := json.Marshal(y)
	if err != nil {
		return nil, fmt.Errorf("docs/asyncapi.yaml: %w", err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		return nil, err
	}
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft7) // AsyncAPI 3's default schema format is a superset of draft-07
	comp.AssertFormat()
	url := "file://" + filepath.ToSlash(abs)
	if err := comp.AddResource(url, v); err != nil {
		return nil, fmt.Errorf("docs/asyncapi.yaml: %w", err)
	}
	for _, s := range []struct {
		dst **jsonschema.Schema
		ptr string
	}{
		{&c.request, "/components/messages/request/payload"},
		{&c.requestHeaders, "/components/messages/request/headers"},
		{&c.streamRecord, "/components/messages/streamRecord/payload"},
		{&c.control, "/components/messages/control/payload"},
		{&c.dlqHeaders, "/components/messages/deadLetter/headers"},
	} {
		if *s.dst, err = comp.Compile(url + "#" + s.ptr); err != nil {
			return nil, fmt.Errorf("docs/asyncapi.yaml#%s: %w", s.ptr, err)
		}
	}
	// The frames: the unions the channels' messages are drawn from.
	schemas := filepath.Join(filepath.Dir(abs), "schemas")
	if c.clientFrame, err = comp.Compile("file://" + filepath.ToSlash(filepath.Join(schemas, "ws-client-frame.json"))); err != nil {
		return nil, fmt.Errorf("docs/schemas/ws-client-frame.json: %w", err)
	}
	if c.serverFrame, err = comp.Compile("file://" + filepath.ToSlash(filepath.Join(schemas, "ws-server-frame.json"))); err != nil {
		return nil, fmt.Errorf("docs/schemas/ws-server-frame.json: %w", err)
	}
	return c, nil
})

// specContract returns the loaded specifications, failing t if they do
// not load.
func specContract(t testing.TB) *contract {
	t.Helper()
	c, err := loadContract()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// validateJSON checks b against sch.
func validateJSON(sch *jsonschema.Schema, b []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return sch.Validate(v)
}

// authenticate is the OpenAPI security check: a bearer scheme needs an
// Authorization: Bearer header, the accessToken scheme the query
// parameter. Whether the token verifies is the server's business.
func authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	r := in.RequestValidationInput.Request
	switch in.SecuritySchemeName {
	case "bearer":
		if strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			return nil
		}
	case "accessToken":
		if r.URL.Query().Get("access_token") != "" {
			return nil
		}
	}
	return errors.New("no credential for " + in.SecuritySchemeName)
}

// checkExchange validates one HTTP exchange against docs/openapi.yaml.
// reqBody and respBody are the bodies (respBody is ignored when streamed:
// an event stream's events are checked by sseChecker). The rules:
//   - a request outside every path and method of the document is answered
//     404 or 405 (with Allow) in the error shape;
//   - a request the document refuses (a missing credential, a bad
//     parameter or body) is not answered with a success: the document is at
//     least as strict as the server;
//   - every response has a status the operation declares, with its
//     headers and body.
func (c *contract) checkExchange(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte, streamed bool) error {
	ctx := context.Background()
	// Route on the path as sent: the server's mux matches escaped
	// segments (a conversation "bad%2Fname" is one segment, a bad ID: 400),
	// where the decoded path would add one.
	if req.URL.RawPath != "" {
		req = req.Clone(ctx)
		req.URL.Path, req.URL.RawPath = req.URL.EscapedPath(), ""
	}
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			return fmt.Errorf("docs/openapi.yaml has no %s %s, but the server answered %d", req.Method, req.URL.Path, resp.StatusCode)
		}
		if resp.StatusCode == http.StatusMethodNotAllowed && resp.Header.Get("Allow") == "" {
			return fmt.Errorf("%s %s: 405 without Allow", req.Method, req.URL.Path)
		}
		var v any
		if err := json.Unmarshal(respBody, &v); err != nil {
			return fmt.Errorf("%s %s: %d body is not JSON: %q", req.Method, req.URL.Path, resp.StatusCode, respBody)
		}
		if err := c.errSch.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			return fmt.Errorf("%s %s: %d body is not docs/openapi.yaml's Error: %w", req.Method, req.URL.Path, resp.StatusCode, err)
		}
		return nil
	}
	opts := &openapi3filter.Options{AuthenticationFunc: authenticate, IncludeResponseStatus: true, ExcludeResponseBody: streamed, MultiError: true}
	r2 := req.Clone(ctx)
	r2.Body = io.NopCloser(bytes.NewReader(reqBody))
	reqIn := &openapi3filter.RequestValidationInput{Request: r2, PathParams: params, Route: route, Options: opts}
	if rerr := openapi3filter.ValidateRequest(ctx, reqIn); rerr != nil && resp.StatusCode < 400 {
		return fmt.Errorf("docs/openapi.yaml refuses %s %s, which the server answered %d: %v", req.Method, req.URL.RequestURI(), resp.StatusCode, rerr)
	}
	respIn := &openapi3filter.ResponseValidationInput{RequestValidationInput: reqIn, Status: resp.StatusCode, Header: resp.Header, Options: opts}
	respIn.SetBodyBytes(respBody)
	if err := openapi3filter.ValidateResponse(ctx, respIn); err != nil {
		return fmt.Errorf("%s %s answered %d %s: does not match docs/openapi.yaml: %v", req.Method, req.URL.RequestURI(), resp.StatusCode, bytes.TrimSpace(respBody), err)
	}
	return nil
}

// contractReport collects the mismatches of one test's exchanges and
// reports them when the test ends: an exchange may complete on a
// client's goroutine, after the code that started it has returned.
type contractReport struct {
	mu    sync.Mutex
	errs  []error
	count map[string]int // exchanges checked, by kind
}

func newContractReport(t testing.TB) *contractReport {
	r := &contractReport{count: map[string]int{}}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, err := range r.errs {
			t.Errorf("contract: %v", err)
		}
	})
	return r
}

func (r *contractReport) add(kind string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count[kind]++
	if err != nil {
		r.errs = append(r.errs, err)
	}
}

// checked returns how many exchanges of kind were checked.
func (r *contractReport) checked(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[kind]
}

// contractTransport is an http.RoundTripper that checks every exchange
// against docs/openapi.yaml, and every event of an event stream against
// docs/asyncapi.yaml's schemas, as the client reads it.
type contractTransport struct {
	c      *contract
	report *contractReport
	base   http.RoundTripper
}

func newContractTransport(t testing.TB, report *contractReport) *contractTransport {
	return &contractTransport{c: specContract(t), report: report, base: http.DefaultTransport}
}

func (ct *contractTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	out := req
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
		out = req.Clone(req.Context())
		out.Body = io.NopCloser(bytes.NewReader(b))
	}
	resp, err := ct.base.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		ct.report.add("http", ct.c.checkExchange(req, body, resp, nil, true))
		resp.Body = &sseChecker{ReadCloser: resp.Body, c: ct.c, report: ct.report, where: req.URL.Path}
		return resp, nil
	}
	rb, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(rb))
	ct.report.add("http", ct.c.checkExchange(req, body, resp, rb, false))
	return resp, nil
}

// sseChecker checks an event stream as it is read: every event's data
// against the server-frame schema, `event:` naming its type, `id:` its
// cursor (and no id on subscribed and error), the retry line first.
type sseChecker struct {
	io.ReadCloser
	c      *contract
	report *contractReport
	where  string

	buf    []byte
	lines  int
	fields map[string]string
}

func (s *sseChecker) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	s.buf = append(s.buf, p[:n]...)
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			break
		}
		s.line(string(s.buf[:i]))
		s.buf = s.buf[i+1:]
	}
	return n, err
}

func (s *sseChecker) line(l string) {
	s.lines++
	if s.lines == 1 && !strings.HasPrefix(l, "retry: ") {
		s.report.add("sse", fmt.Errorf("%s: the stream begins %q, not retry:", s.where, l))
	}
	switch {
	case l == "":
		if s.fields != nil {
			s.event(s.fields)
		}
		s.fields = nil
	case strings.HasPrefix(l, ":"), strings.HasPrefix(l, "retry: "):
	default:
		name, value, _ := strings.Cut(l, ": ")
		if s.fields == nil {
			s.fields = map[string]string{}
		}
		if _, dup := s.fields[name]; dup {
			s.report.add("sse", fmt.Errorf("%s: field %s twice in one event (data must be one line)", s.where, name))
		}
		s.fields[name] = value
	}
}

func (s *sseChecker) event(f map[string]string) {
	data := []byte(f["data"])
	if err := validateJSON(s.c.serverFrame, data); err != nil {
		s.report.add("sse", fmt.Errorf("%s: event %s: docs/schemas/ws-server-frame.json refuses %s: %v", s.where, f["event"], data, err))
		return
	}
	var head struct {
		Type   string  `json:"type"`
		Cursor *string `json:"cursor"`
	}
	_ = json.Unmarshal(data, &head)
	var err error
	id, hasID := f["id"]
	switch {
	case f["event"] != head.Type:
		err = fmt.Errorf("event: %q, data of type %q", f["event"], head.Type)
	case head.Cursor == nil && hasID:
		err = fmt.Errorf("a %s event with id %q", head.Type, id)
	case head.Cursor != nil && id != *head.Cursor:
		err = fmt.Errorf("a %s event with id %q and cursor %q", head.Type, id, *head.Cursor)
	}
	if err != nil {
		err = fmt.Errorf("%s: %w", s.where, err)
	}
	s.report.add("sse", err)
}

// contractConn is a WebSocket whose frames are checked against
// docs/asyncapi.yaml's schemas, both ways.
type contractConn struct {
	*websocket.Conn
	c      *contract
	report *contractReport
}

// contractDial opens a WebSocket, checking the handshake's answer against
// docs/openapi.yaml (GET /v1/stream), refused or not.
func contractDial(ctx context.Context, c *contract, report *contractReport, url string, h http.Header) (*contractConn, *http.Response, error) {
	conn, resp, err := websocket.DefaultDialer.DialContext(ctx, url, h)
	if resp != nil {
		req, rerr := http.NewRequest(http.MethodGet, strings.Replace(url, "ws", "http", 1), nil)
		if rerr != nil {
			return nil, nil, rerr
		}
		for k, v := range h {
			req.Header[k] = v
		}
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Connection", "Upgrade")
		var body []byte
		if resp.Body != nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		report.add("http", c.checkExchange(req, nil, resp, body, resp.StatusCode == http.StatusSwitchingProtocols))
	}
	if err != nil {
		return nil, resp, err
	}
	return &contractConn{Conn: conn, c: c, report: report}, resp, nil
}

// send writes a frame the client frame schema accepts (or, with valid
// false, one it must refuse: the test sends a bad frame on purpose).
func (cc *contractConn) send(frame string, valid bool) error {
	err := validateJSON(cc.c.clientFrame, []byte(frame))
	if (err == nil) != valid {
		cc.report.add("ws", fmt.Errorf("docs/schemas/ws-client-frame.json on %s: got %v, want valid=%v", frame, err, valid))
	}
	return cc.WriteMessage(websocket.TextMessage, []byte(frame))
}

// next reads one frame, checked against the server frame schema.
func (cc *contractConn) next() (map[string]any, error) {
	_, b, err := cc.ReadMessage()
	if err != nil {
		return nil, err
	}
	if verr := validateJSON(cc.c.serverFrame, b); verr != nil {
		cc.report.add("ws", fmt.Errorf("docs/schemas/ws-server-frame.json refuses the frame %s: %v", b, verr))
	} else {
		cc.report.add("ws", nil)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// sseData reads an event stream's body to its end (through sseChecker,
// when the client's transport is a contractTransport) and returns its
// events' data, in order.
func sseData(r io.Reader) ([]map[string]any, error) {
	var out []map[string]any
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(d), &m); err != nil {
				return out, err
			}
			out = append(out, m)
		}
	}
	return out, sc.Err()
}
