package ingest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/internal/server"
	"github.com/turnpike-dev/turnpike/internal/tracing"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// retryAfter is the Retry-After of a 503.
const retryAfter = time.Second

// Patterns of the API's resources.
const (
	messagesPath      = "/v1/conversations/{conversation}/messages"
	conversationsPath = "/v1/conversations"
	statePath         = "/v1/conversations/{conversation}/state"
	devTokenPath      = "/v1/dev/token"
)

// serviceDeps are the Service's collaborators.
type serviceDeps struct {
	// Verifier checks bearer tokens. Required.
	Verifier *auth.Verifier
	// Producer writes request records. Required.
	Producer recordProducer
	// History reads conversations. Required.
	History historyReader
	// MintToken signs a bearer token of tenant "default" for user: POST
	// /v1/dev/token's. Required when Config.DevTokens is set, unused
	// otherwise.
	MintToken func(user string) (string, error)
	// Page serves the demo chat page: GET / and GET /ui/…. Default none:
	// those paths are 404 like any unknown one.
	Page http.Handler
	// Cancels, Control and Positions serve POST …/cancel: the durable
	// cancel record, the producer of the control topic, and where a
	// conversation's requests go. All three or none (then /cancel is not
	// served).
	Cancels   canceller
	Control   recordProducer
	Positions positionFinder
	// Completions, if set, feeds the count of queued requests (Run reads
	// it). Without it queued requests only expire after QueuedTTL.
	Completions interface {
		Run(ctx context.Context, done func(requestID string)) error
	}
	// Memory, if set, serves DELETE /v1/memories (memory.go). Default:
	// not served (404).
	Memory memoryDeleter
	// Tracing, if set, continues the caller's trace (traceparent header) in
	// a span per request. Default: none.
	Tracing *tracing.Tracing
	// Artifacts, if set, serves the artifact routes (artifact.go).
	Artifacts history.ArtifactService
	// Registerer receives the service's metrics. Default: not registered.
	Registerer prometheus.Registerer
	// Logger logs 5xx answers. Default: discard.
	Logger *slog.Logger
	// Now is the clock of request timestamps. Default time.Now.
	Now func() time.Time
	// Random is the source of random request ids; it must be safe for
	// concurrent use. Default crypto/rand.Reader.
	Random io.Reader
}

// service is the ingest HTTP API.
type service struct {
	cfg      Config
	verifier *auth.Verifier
	producer recordProducer
	history  historyReader
	mint     func(user string) (string, error)
	page     http.Handler
	log      *slog.Logger
	now      func() time.Time
	random   io.Reader
	metrics  *metrics
	handler  http.Handler

	cancels     canceller
	control     recordProducer
	positions   positionFinder
	completions interface {
		Run(ctx context.Context, done func(requestID string)) error
	}
	devOrigins server.OriginPolicy // Config.DevTokenOrigins
	limiter    *rateLimiter
	queued     *queuedRequests
	tracing    *tracing.Tracing
	memory     memoryDeleter
	artifacts  history.ArtifactService // nil: no artifact routes (artifact.go)
}

// newService returns a Service. It registers the metrics with d.Registerer, so a
// Registerer takes one Service.
func newService(cfg Config, d serviceDeps) (*service, error) {
	var errs []error
	if err := cfg.validateAPI(); err != nil {
		errs = append(errs, err)
	}
	if d.Verifier == nil {
		errs = append(errs, errors.New("no verifier"))
	}
	if d.Producer == nil {
		errs = append(errs, errors.New("no producer"))
	}
	if d.History == nil {
		errs = append(errs, errors.New("no history reader"))
	}
	if cfg.DevTokens && d.MintToken == nil {
		errs = append(errs, errors.New("dev tokens enabled without a token minter"))
	}
	if set := count(d.Cancels != nil, d.Control != nil, d.Positions != nil); set != 0 && set != 3 {
		errs = append(errs, errors.New("cancel needs Cancels, Control and Positions together"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("new ingest service: %w", errors.Join(errs...))
	}
	m, err := newMetrics(d.Registerer)
	if err != nil {
		return nil, fmt.Errorf("new ingest service: %w", err)
	}
	s := &service{
		cfg:      cfg.withDefaults(),
		verifier: d.Verifier,
		producer: d.Producer,
		history:  d.History,
		mint:     d.MintToken,
		page:     d.Page,
		log:      d.Logger,
		now:      d.Now,
		random:   d.Random,
		metrics:  m,

		cancels:     d.Cancels,
		control:     d.Control,
		positions:   d.Positions,
		completions: d.Completions,
		tracing:     d.Tracing,
		memory:      d.Memory,
		artifacts:   d.Artifacts,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.random == nil {
		s.random = rand.Reader
	}
	if s.cfg.RatePerSecond > 0 {
		s.limiter = newRateLimiter(s.cfg.RatePerSecond, s.cfg.RateBurst, s.now)
	}
	s.queued = newQueuedRequests(s.cfg.QueuedTTL, s.now)
	s.devOrigins, _ = server.NewOriginPolicy(s.cfg.DevTokenOrigins) // Validate has checked them
	s.handler = s.routes()
	return s, nil
}

// Handler serves the API routes, the demo page if Deps.Page is set, and a
// JSON 404 for any other path. Mount it at "/" next to server.HandleOps (its
// more specific patterns win), or use Register to mount it under /v1/ only.
func (s *service) Handler() http.Handler { return s.handler }

// Register mounts the API on mux under /v1/, leaving every other path
// (the demo page's too) to the caller.
func (s *service) Register(mux *http.ServeMux) { mux.Handle("/v1/", s.handler) }

// routes is the route table. Each row runs metrics → auth → handler; the
// pattern without a method answers the methods the others do not serve.
func (s *service) routes() http.Handler {
	type route struct {
		pattern string
		h       http.Handler
	}
	table := []route{
		{"POST " + messagesPath, s.authed(s.postMessage)},
		{"GET " + messagesPath, s.authed(s.listMessages)},
		{messagesPath, server.MethodNotAllowed("GET, HEAD, POST")},
		{"GET " + conversationsPath, s.authed(s.listConversations)},
		{conversationsPath, server.MethodNotAllowed("GET, HEAD")},
		{"GET " + statePath, s.authed(s.getState)},
		{statePath, server.MethodNotAllowed("GET, HEAD")},
		{"POST " + resumePath, s.authed(s.postResume)},
		{resumePath, server.MethodNotAllowed("POST")},
		{"POST " + resetPath, s.authed(s.postReset)},
		{resetPath, server.MethodNotAllowed("POST")},
		{"/", http.HandlerFunc(server.NotFound)},
	}
	if s.artifacts != nil { // artifact.go
		table = append(table,
			route{"GET " + artifactsPath, s.authed(s.listArtifacts)},
			route{artifactsPath, server.MethodNotAllowed("GET, HEAD")},
			route{"GET " + artifactPath, s.authed(s.getArtifact)},
			route{"DELETE " + artifactPath, s.authed(s.deleteArtifact)},
			route{artifactPath, server.MethodNotAllowed("GET, HEAD, DELETE")},
		)
	}
	if s.cancels != nil {
		table = append(table, route{"POST " + cancelPath, s.authed(s.postCancel)}, route{cancelPath, server.MethodNotAllowed("POST")})
	}
	if s.memory != nil {
		table = append(table, route{"DELETE " + memoriesPath, s.authed(s.deleteMemories)}, route{memoriesPath, server.MethodNotAllowed("DELETE")})
	}
	if s.cfg.DevTokens {
		table = append(table,
			route{"POST " + devTokenPath, http.HandlerFunc(s.devToken)},
			route{devTokenPath, server.MethodNotAllowed("POST")},
		)
	}
	if s.page != nil {
		// The page is static: no auth (it asks for a token itself).
		table = append(table, route{"GET /{$}", s.page}, route{"GET /ui/", s.page})
	}
	mux := http.NewServeMux()
	for _, r := range table {
		mux.Handle(r.pattern, s.metrics.instrument(r.pattern, r.h))
	}
	return server.CanonicalPaths(mux)
}

// principalHandler serves a request of an authenticated caller.
type principalHandler func(w http.ResponseWriter, r *http.Request, p auth.Principal)

// authed verifies the bearer token before h; tenant and user come only from it.
func (s *service) authed(h principalHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.verifier.Verify(auth.BearerToken(r, false))
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="turnpike"`)
			server.WriteError(w, http.StatusUnauthorized, server.CodeUnauthenticated, "missing or invalid bearer token", 0)
			return
		}
		h(w, r, p)
	})
}

func badRequest(w http.ResponseWriter, err error) {
	server.WriteError(w, http.StatusBadRequest, server.CodeInvalidArgument, err.Error(), 0)
}

// Run follows the completions workers announce, for the count of queued
// requests, until ctx ends. Without Deps.Completions it only waits.
func (s *service) Run(ctx context.Context) error {
	if s.completions == nil {
		<-ctx.Done()
		return nil
	}
	return s.completions.Run(ctx, s.queued.forget)
}

func count(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
