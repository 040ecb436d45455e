package ingest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

const testSecret = "0123456789abcdef0123456789abcdef-test"

// testNow is the fixed clock of every test service.
var testNow = time.Date(2026, 3, 14, 15, 9, 26, 535897932, time.FixedZone("X", 3600))

// record is one Produce call seen by fakeProducer.
type record struct {
	key, value []byte
	deadline   bool
}

// fakeProducer records what it is asked to produce; err makes it fail and
// block, when set, makes it wait for ctx to end.
type fakeProducer struct {
	err   error
	block bool

	mu      sync.Mutex // guards records
	records []record
}

func (p *fakeProducer) Produce(ctx context.Context, key, value []byte) error {
	if p.block {
		<-ctx.Done()
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.err != nil {
		return p.err
	}
	_, hasDeadline := ctx.Deadline()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.records = append(p.records, record{key: key, value: value, deadline: hasDeadline})
	return nil
}

func (p *fakeProducer) all() []record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.records)
}

// listCall is one List call seen by fakeHistory.
type listCall struct {
	id     events.Identity
	before int64
	limit  int
}

// convCall is one Conversations call seen by fakeHistory.
type convCall struct {
	tenant, user string
	before       history.ConversationCursor
	limit        int
}

// fakeHistory serves pages by identity; an identity without a page is not
// found. Conversations answers convPage (or err) to everyone.
type fakeHistory struct {
	pages    map[events.Identity]history.Page
	convPage history.ConversationPage
	err      error
	// state answers ConversationState (a real store, so that its identity
	// binding is the one tested); nil: every conversation is not found.
	state history.StateReader

	mu        sync.Mutex // guards calls and convCalls
	calls     []listCall
	convCalls []convCall
}

func (h *fakeHistory) Conversations(_ context.Context, tenant, user string, before history.ConversationCursor, limit int) (history.ConversationPage, error) {
	h.mu.Lock()
	h.convCalls = append(h.convCalls, convCall{tenant, user, before, limit})
	h.mu.Unlock()
	if h.err != nil {
		return history.ConversationPage{}, h.err
	}
	return h.convPage, nil
}

func (h *fakeHistory) lastConvCall(t *testing.T) (convCall, int) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.convCalls) == 0 {
		t.Fatal("Conversations was not called")
	}
	return h.convCalls[len(h.convCalls)-1], len(h.convCalls)
}

func (h *fakeHistory) List(_ context.Context, id events.Identity, before int64, limit int) (history.Page, error) {
	h.mu.Lock()
	h.calls = append(h.calls, listCall{id, before, limit})
	h.mu.Unlock()
	if h.err != nil {
		return history.Page{}, h.err
	}
	p, ok := h.pages[id]
	if !ok {
		return history.Page{}, history.ErrNotFound
	}
	return p, nil
}

func (h *fakeHistory) ConversationState(ctx context.Context, id events.Identity) (history.ConversationState, error) {
	if h.err != nil {
		return history.ConversationState{}, h.err
	}
	if h.state == nil {
		return history.ConversationState{}, history.ErrNotFound
	}
	return h.state.ConversationState(ctx, id)
}

func (h *fakeHistory) callCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.calls)
}

func (h *fakeHistory) lastCall(t *testing.T) listCall {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.calls) == 0 {
		t.Fatal("List was not called")
	}
	return h.calls[len(h.calls)-1]
}

type testService struct {
	*service
	producer *fakeProducer // nil unless the Service produces to a fake
	history  *fakeHistory
	reg      *prometheus.Registry
	logs     *lockedBuffer
	ctx      context.Context // of every request: ends with the test
}

// lockedBuffer is a goroutine-safe log sink.
type lockedBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newTestService builds a Service with a fixed clock and a fresh registry;
// p defaults to a new fakeProducer, h to an empty fakeHistory.
func newTestService(t testing.TB, cfg Config, p recordProducer, h *fakeHistory, random io.Reader) *testService {
	t.Helper()
	return newTestServiceWith(t, cfg, p, h, random, nil)
}

// newTestServiceWith is newTestService with more dependencies set by deps.
func newTestServiceWith(t testing.TB, cfg Config, p recordProducer, h *fakeHistory, random io.Reader, deps func(*serviceDeps)) *testService {
	t.Helper()
	if p == nil {
		p = &fakeProducer{}
	}
	fake, _ := p.(*fakeProducer)
	if h == nil {
		h = &fakeHistory{}
	}
	v, err := auth.NewVerifier(testSecret, func() time.Time { return testNow })
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	logs := &lockedBuffer{}
	d := serviceDeps{
		Verifier:   v,
		Producer:   p,
		History:    h,
		Registerer: reg,
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:        func() time.Time { return testNow },
		Random:     random,
	}
	if deps != nil {
		deps(&d)
	}
	s, err := newService(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	return &testService{service: s, producer: fake, history: h, reg: reg, logs: logs, ctx: testenv.Context(t, 30*time.Second)}
}

func token(t testing.TB, tenant, user string) string {
	t.Helper()
	tok, err := auth.Mint(testSecret, tenant, user, time.Hour, testNow)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// do serves one request with a bearer token (none when tok is "").
func (s *testService) do(method, path, tok string, body string, header map[string]string) *httptest.ResponseRecorder {
	return s.doFrom("127.0.0.1:40000", method, path, tok, body, header)
}

// doFrom is do from the peer address remote.
func (s *testService) doFrom(remote, method, path, tok string, body string, header map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequestWithContext(s.ctx, method, path, strings.NewReader(body))
	r.RemoteAddr = remote
	if tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	for k, v := range header {
		r.Header.Set(k, v)
		if k == "Host" {
			r.Host = v
		}
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	return w
}

// checkError asserts the exact docs/api.md error shape:
// {"error":{"code":"<code>","message":"<non-empty>"}} and nothing else.
func checkError(t *testing.T, w *httptest.ResponseRecorder, status int, code string) string {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var body map[string]map[string]any
	dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		t.Fatalf("error body %s: %v", w.Body, err)
	}
	if len(body) != 1 || body["error"] == nil {
		t.Fatalf("error body %s: want exactly one key \"error\"", w.Body)
	}
	e := body["error"]
	keys := slices.Sorted(maps.Keys(e))
	if !slices.Equal(keys, []string{"code", "message"}) {
		t.Fatalf("error body %s: keys %v, want [code message]", w.Body, keys)
	}
	if e["code"] != code {
		t.Errorf("code %v, want %s (body %s)", e["code"], code, w.Body)
	}
	msg, ok := e["message"].(string)
	if !ok || msg == "" {
		t.Errorf("message %v: want a non-empty string", e["message"])
	}
	return msg
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		wantErr []string
	}{
		{name: "The zero config takes every default and is valid.", cfg: Config{}},
		{name: "Explicit sane values are valid.", cfg: Config{MaxContentBytes: 100, MaxBodyBytes: 200, ProduceTimeout: time.Second, HistoryDefaultLimit: 5, HistoryMaxLimit: 5}},
		{
			name:    "Every negative field is reported at once.",
			cfg:     Config{MaxContentBytes: -1, MaxBodyBytes: -1, ProduceTimeout: -1, HistoryDefaultLimit: -1, HistoryMaxLimit: -2},
			wantErr: []string{"max content bytes", "max body bytes", "produce timeout", "history default limit", "history max limit"},
		},
		{name: "A default page larger than the largest page is rejected.", cfg: Config{HistoryDefaultLimit: 300}, wantErr: []string{"exceeds max limit"}},
		{name: "A content limit above the body limit is rejected.", cfg: Config{MaxContentBytes: 1000, MaxBodyBytes: 999}, wantErr: []string{"exceeds max body bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.validateAPI()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate: nil, want an error")
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate: %v; want it to mention %q", err, want)
				}
			}
		})
	}
}

func TestNewReportsEveryMissingDependency(t *testing.T) {
	t.Parallel()
	_, err := newService(Config{HistoryDefaultLimit: -1}, serviceDeps{})
	if err == nil {
		t.Fatal("New: nil error")
	}
	for _, want := range []string{"no verifier", "no producer", "no history reader", "history default limit"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New: %v; want it to mention %q", err, want)
		}
	}
}

func TestNewRefusesARegistererThatAlreadyHoldsTheMetrics(t *testing.T) {
	t.Parallel()
	s := newTestService(t, Config{}, nil, nil, nil)
	_, err := newService(Config{}, serviceDeps{Verifier: s.verifier, Producer: s.producer, History: s.history, Registerer: s.reg})
	if err == nil {
		t.Fatal("New with the same registerer twice: nil error")
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	expired, err := auth.Mint(testSecret, "acme", "alice", time.Hour, testNow.Add(-2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	otherSecret, err := auth.Mint("another-secret-another-secret-another", "acme", "alice", time.Hour, testNow)
	if err != nil {
		t.Fatal(err)
	}
	noSub, err := auth.Mint(testSecret, "acme", "", time.Hour, testNow)
	if err != nil {
		t.Fatal(err)
	}
	valid := token(t, "acme", "alice")
	tests := []struct {
		name   string
		header string
		path   string
	}{
		{name: "A request without Authorization is unauthenticated.", header: ""},
		{name: "A valid token in ?access_token is not accepted on the API.", path: messagesURL + "?access_token=" + valid},
		{name: "A bad conversation without a token is unauthenticated first.", path: "/v1/conversations/a%24b/messages"},
		{name: "A token without sub is unauthenticated.", header: "Bearer " + noSub},
		{name: "A token with alg none is unauthenticated.", header: "Bearer " + algNoneToken(testNow.Add(time.Hour))},
		{name: "An expired token is unauthenticated.", header: "Bearer " + expired},
		{name: "A token signed with another secret is unauthenticated.", header: "Bearer " + otherSecret},
		{name: "Garbage is unauthenticated.", header: "Bearer not.a.jwt"},
		{name: "A Basic credential is unauthenticated.", header: "Basic YWxpY2U6c2VjcmV0"},
	}
	for _, tt := range tests {
		for _, method := range []string{http.MethodPost, http.MethodGet} {
			t.Run(tt.name+" "+method, func(t *testing.T) {
				t.Parallel()
				s := newTestService(t, Config{}, nil, &fakeHistory{}, nil)
				path := cmp.Or(tt.path, messagesURL)
				r := httptest.NewRequestWithContext(s.ctx, method, path, strings.NewReader(`{"content":"hi"}`))
				if tt.header != "" {
					r.Header.Set("Authorization", tt.header)
				}
				w := httptest.NewRecorder()
				s.Handler().ServeHTTP(w, r)
				checkError(t, w, http.StatusUnauthorized, server.CodeUnauthenticated)
				if w.Header().Get("WWW-Authenticate") == "" {
					t.Error("no WWW-Authenticate header")
				}
				if n := len(s.producer.all()); n != 0 {
					t.Errorf("%d records produced, want 0", n)
				}
				if n := s.history.callCount(); n != 0 {
					t.Errorf("history read %d times without a valid token", n)
				}
			})
		}
	}
}

// algNoneToken crafts an unsigned token by hand.
func algNoneToken(exp time.Time) string {
	enc := base64.RawURLEncoding
	header := enc.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
	claims, _ := json.Marshal(map[string]any{"sub": "alice", "tenant": "acme", "exp": exp.Unix()})
	return header + "." + enc.EncodeToString(claims) + "."
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	tok := token(t, "acme", "alice")
	tests := []struct {
		name      string
		method    string
		path      string
		status    int
		code      string
		wantAllow string
	}{
		{name: "An unknown path is a JSON 404.", method: http.MethodGet, path: "/nope", status: 404, code: server.CodeNotFound},
		{name: "An unknown path under /v1 is a JSON 404.", method: http.MethodGet, path: "/v1/conversations/c1", status: 404, code: server.CodeNotFound},
		{name: "Cancel without its dependencies is not served.", method: http.MethodPost, path: "/v1/conversations/c1/cancel", status: 404, code: server.CodeNotFound},
		{name: "PUT on messages is a JSON 405 with Allow.", method: http.MethodPut, path: "/v1/conversations/c1/messages", status: 405, code: server.CodeMethodNotAllowed, wantAllow: "GET, HEAD, POST"},
		{name: "DELETE on messages is a JSON 405 with Allow.", method: http.MethodDelete, path: "/v1/conversations/c1/messages", status: 405, code: server.CodeMethodNotAllowed, wantAllow: "GET, HEAD, POST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newTestService(t, Config{}, nil, nil, nil)
			w := s.do(tt.method, tt.path, tok, "", nil)
			checkError(t, w, tt.status, tt.code)
			if got := w.Header().Get("Allow"); got != tt.wantAllow {
				t.Errorf("Allow %q, want %q", got, tt.wantAllow)
			}
		})
	}
}

func TestRegisterMountsTheAPIUnderV1NextToTheOpsEndpoints(t *testing.T) {
	t.Parallel()
	s := newTestService(t, Config{}, nil, nil, nil)
	mux := http.NewServeMux()
	server.HandleOps(mux, s.reg)
	s.Register(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "demo page") })

	tests := []struct {
		name, method, path string
		status             int
		bodyHas            string
	}{
		{"The ops endpoints are served without a token.", http.MethodGet, "/healthz", 200, `"ok"`},
		{"Metrics carry the ingest metrics.", http.MethodGet, "/metrics", 200, "turnpike_ingest_produce_errors_total"},
		{"The API is served under /v1/.", http.MethodPost, "/v1/conversations/c1/messages", 202, `"queued"`},
		{"An unknown /v1/ path is the API's JSON 404.", http.MethodGet, "/v1/nope", 404, `"not_found"`},
		{"Other paths are left to the caller.", http.MethodGet, "/", 200, "demo page"},
	}
	for _, tt := range tests {
		r := httptest.NewRequestWithContext(s.ctx, tt.method, tt.path, strings.NewReader(`{"content":"hi"}`))
		r.Header.Set("Authorization", "Bearer "+token(t, "acme", "alice"))
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != tt.status || !strings.Contains(w.Body.String(), tt.bodyHas) {
			t.Errorf("%s %s %s: %d %s; want %d containing %s", tt.name, tt.method, tt.path, w.Code, w.Body, tt.status, tt.bodyHas)
		}
	}
}

func TestMetricsCountEveryRouteAndCode(t *testing.T) {
	t.Parallel()
	p := &fakeProducer{}
	s := newTestService(t, Config{}, p, &fakeHistory{}, nil)
	tok := token(t, "acme", "alice")
	s.do(http.MethodPost, "/v1/conversations/c1/messages", tok, `{"content":"hi"}`, nil)
	s.do(http.MethodPost, "/v1/conversations/c1/messages", tok, `{"content":"hi"}`, nil)
	s.do(http.MethodPost, "/v1/conversations/c1/messages", "", `{"content":"hi"}`, nil)
	s.do(http.MethodGet, "/v1/conversations/c1/messages", tok, "", nil)
	s.do(http.MethodGet, "/elsewhere", tok, "", nil)
	p.err = errors.New("broker down")
	s.do(http.MethodPost, "/v1/conversations/c1/messages", tok, `{"content":"hi"}`, nil)

	post, get := "POST "+messagesPath, "GET "+messagesPath
	for _, c := range []struct {
		route, code string
		want        float64
	}{
		{post, "202", 2}, {post, "401", 1}, {post, "503", 1}, {get, "404", 1}, {"/", "404", 1},
	} {
		m := findMetric(t, s.reg, "turnpike_ingest_http_requests_total", map[string]string{"route": c.route, "code": c.code})
		if got := m.GetCounter().GetValue(); got != c.want {
			t.Errorf("http_requests_total{route=%q,code=%q} = %v, want %v", c.route, c.code, got, c.want)
		}
	}
	if got := findMetric(t, s.reg, "turnpike_ingest_produce_errors_total", nil).GetCounter().GetValue(); got != 1 {
		t.Errorf("produce_errors_total = %v, want 1", got)
	}
	for route, want := range map[string]uint64{post: 4, get: 1, "/": 1} {
		m := findMetric(t, s.reg, "turnpike_ingest_http_request_duration_seconds", map[string]string{"route": route})
		if got := m.GetHistogram().GetSampleCount(); got != want {
			t.Errorf("http_request_duration_seconds{route=%q} count = %d, want %d", route, got, want)
		}
	}
}

// findMetric gathers reg and returns the series of name with exactly labels.
func findMetric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if maps.Equal(got, labels) || (len(got) == 0 && len(labels) == 0) {
				return m
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return nil
}

func newAuthedRequest(t *testing.T, ctx context.Context, method, path string) *http.Request {
	t.Helper()
	r := httptest.NewRequestWithContext(ctx, method, path, nil)
	r.Header.Set("Authorization", "Bearer "+token(t, "acme", "alice"))
	return r
}

// discardWriter is a ResponseWriter for a client that is gone.
type discardWriter struct{}

func (discardWriter) Header() http.Header         { return http.Header{} }
func (discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (discardWriter) WriteHeader(int)             {}
