package worker

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// Request identifies the request a run serves: who sent it, in which
// conversation, and its request id, which stays the same when the run is
// repeated (a redelivery, a retry), so tools key their side effects on it.
type Request struct {
	Tenant, User, Conversation string
	RequestID                  string
	// ResumeOf is the interrupted request this run resumes; "" for a
	// first run.
	ResumeOf string
}

// RequestFromContext returns the request of the run ctx belongs to. The
// worker puts it in every context it hands an agent, and eino passes that
// context on to models and tools.
func RequestFromContext(ctx context.Context) (Request, bool) {
	r, ok := ctx.Value(requestKey{}).(Request)
	return r, ok
}

type requestKey struct{}

// withRequest returns ctx carrying r (RequestFromContext reads it).
func withRequest(ctx context.Context, r Request) context.Context {
	return context.WithValue(ctx, requestKey{}, r)
}

// requestOf is the Request of req.
func requestOf(req events.Request) Request {
	return Request{Tenant: req.Tenant, User: req.User, Conversation: req.Conversation, RequestID: req.RequestID, ResumeOf: req.ResumeOf}
}

// AgentFactory builds the agent of one run. It is called on the run's own
// goroutine, once per run (a resume is a run too and must build the same
// agent tree, so that the checkpoint fits), concurrently for runs of
// different conversations: it must be safe for concurrent use. An error
// fails the attempt: it is retried like a transient model error, up to
// Config.MaxAttempts, then the request is dead-lettered and completes
// failed; an error wrapped with Permanent is dead-lettered at once.
type AgentFactory func(ctx context.Context, r Request) (adk.Agent, error)

// Resume is one interrupt a resume request answers.
type Resume struct {
	Request
	// Target is the interrupt's id, the key of adk.ResumeParams.Targets.
	Target string
	// Agent and Tool raised the interrupt; Question is what it asked.
	Agent, Tool, Question string
	// Answer is the user's answer, as posted.
	Answer string
}

// Permanent marks err as one that retrying cannot help: an AgentFactory
// error dead-letters the request at once, and a resume hook's error
// rejects the resume (the interrupt stays pending and the user may answer
// again). Its message is err's own, so that the dead letter's reason is the
// factory's error; it matches events.ErrInvalid under errors.Is, and an
// error of yours that wraps events.ErrInvalid is treated the same.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// permanentError is Permanent's mark.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Is makes a Permanent error match events.ErrInvalid, as it did when
// Permanent wrapped it.
func (e permanentError) Is(target error) bool { return target == events.ErrInvalid }

// isPermanent says whether err is marked Permanent or wraps
// events.ErrInvalid (a Permanent error matches it).
func isPermanent(err error) bool { return errors.Is(err, events.ErrInvalid) }

// An Option sets an agent or a hook of the worker.
type Option func(*options)

type options struct {
	factory      AgentFactory
	shared       adk.Agent
	stream       bridge.Predicate
	persist      bridge.Predicate
	notice       func(error) string
	transient    func(error) bool
	resume       func(context.Context, Resume) (any, error)
	resumeByTool map[string]func(context.Context, Resume) (any, error)
	summarizer   model.BaseChatModel
	modelLabel   func(agent string) string
	logger       *slog.Logger
	registry     *prometheus.Registry
	ready        func()
	store        history.Store
	artifacts    history.ArtifactService // WithArtifacts (artifact.go)
	listener     net.Listener
	hooks        bool // an agent hook was set
	bufferSize   int
	memory       history.MemoryService // WithMemory's
	memoryCfg    MemoryConfig
}

func collect(opts []Option) *options {
	o := &options{}
	for _, f := range opts {
		if f != nil {
			f(o)
		}
	}
	return o
}

// WithAgentFactory runs the agent factory builds for each run. This is
// the safe default for any agent: eino v0.9.21's ChatModelAgent with tools
// writes to the configuration it shares on every run (a data race between
// concurrent runs of one agent), and supervisor.New binds its agents to
// one parent; an agent built per run shares nothing. Building a
// tool-calling ChatModelAgent for a run adds tens of microseconds to it
// (BenchmarkToolCallingRun).
func WithAgentFactory(factory AgentFactory) Option {
	return func(o *options) { o.factory = factory }
}

// WithAgent runs agent, shared by every run. Only for agents safe for
// concurrent runs: a ChatModelAgent without tools is; one with tools (or
// a supervisor, whose transfers are tools) is not on eino v0.9.21, so use
// WithAgentFactory for those.
func WithAgent(agent adk.Agent) Option {
	return func(o *options) { o.shared = agent }
}

// WithBufferSize bounds, in each run of NewStep's Step, the buffer
// between the agent's events and the sink (bridge.Config.BufferSize):
// when it is full, the agent's events wait for the sink. Default
// bridge.DefaultBufferSize, sized for a sink that may block (the worker's
// consumer, whose sink is the stream topic, always has it). A sink that
// never blocks, as a shadow replay's, needs only a few items, and each run
// then allocates less. A negative n is an error of NewStep.
func WithBufferSize(n int) Option {
	return func(o *options) { o.bufferSize = n }
}

// WithStream selects the messages whose tokens are streamed to clients
// (bridge.Role, AgentRole, And, Or, Not). Default: the assistant text of
// every agent (the one default, see bridge.Predicate). Tool calls and tool
// results are never streamed.
func WithStream(p bridge.Predicate) Option {
	return func(o *options) { o.stream, o.hooks = p, true }
}

// WithPersist selects the messages whose text makes the persisted answer.
// Default: the assistant text of every agent (the one default, see
// bridge.Predicate). Each agent's words are kept apart: one assistant
// message per contiguous stretch of one agent's text. Tool calls and tool
// results are never persisted.
func WithPersist(p bridge.Predicate) Option {
	return func(o *options) { o.persist, o.hooks = p, true }
}

// WithNotice maps a model error to the notice streamed to clients (never
// persisted). Default: bridge.DefaultNotice. It is called on the run's
// goroutine, concurrently for different runs.
func WithNotice(notice func(err error) string) Option {
	return func(o *options) { o.notice, o.hooks = notice, true }
}

// WithTransientErrors classifies a custom model's errors: transient says
// whether an error that ended a run before any content is worth running
// the request again (with backoff, up to Config.MaxAttempts, then the
// request is dead-lettered). The worker itself recognises timeouts,
// refused and reset connections, errors with Temporary() or Retriable()
// true, and HTTP 408, 429 and 5xx of errors with a StatusCode() method or
// of the OpenAI client. It is called on the run's goroutine, concurrently
// for different runs.
func WithTransientErrors(transient func(err error) bool) Option {
	return func(o *options) { o.transient, o.hooks = transient, true }
}

// WithResume turns the user's answer into the value an interrupt resumes
// with: eino's tool.GetResumeContext[T] is a type assertion, so a tool
// that interrupted expecting a T must get a T. Default: the answer as a
// string. An error wrapped with Permanent rejects the resume with a notice
// (the interrupt stays pending); other errors are retried like a transient
// model error (up to Config.MaxAttempts, then the resume is dead-lettered
// and completes failed). Interrupts of a
// tool with its own WithResumeAs do not reach it. It is called on the
// run's goroutine, once per interrupt target.
func WithResume(resume func(ctx context.Context, r Resume) (any, error)) Option {
	return func(o *options) { o.resume, o.hooks = resume, true }
}

// WithResumeAs resumes the interrupts raised by the tool named tool with
// the value parse makes of the user's answer; a parse error rejects the
// resume (the user may answer again).
func WithResumeAs[T any](tool string, parse func(answer string) (T, error)) Option {
	return func(o *options) {
		if o.resumeByTool == nil {
			o.resumeByTool = map[string]func(context.Context, Resume) (any, error){}
		}
		o.resumeByTool[tool] = func(_ context.Context, r Resume) (any, error) {
			v, err := parse(r.Answer)
			if err != nil {
				return nil, Permanent(err)
			}
			return v, nil
		}
		o.hooks = true
	}
}

// WithSummarizer writes the summaries of context compaction
// (Config.CompactTokens). Default: the model of Config.Model.
func WithSummarizer(m model.BaseChatModel) Option {
	return func(o *options) { o.summarizer, o.hooks = m, true }
}

// WithModelLabel labels each agent's token usage in the metrics
// (turnpike_worker_model_tokens_total{kind,model}). Default "custom".
func WithModelLabel(label func(agent string) string) Option {
	return func(o *options) { o.modelLabel, o.hooks = label, true }
}

// WithLogger logs there. Default: Config.LogLevel and LogFormat on stderr.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithRegistry registers the worker's metrics there (served on
// Config.Addr's /metrics). Default: a registry of its own, with the Go and
// process collectors.
func WithRegistry(r *prometheus.Registry) Option { return func(o *options) { o.registry = r } }

// WithReady calls ready once the worker runs (after its topics exist).
func WithReady(ready func()) Option { return func(o *options) { o.ready = ready } }

// WithStore runs the worker on store instead of the MongoDB of
// Config.MongoURI (which may then be empty), for a store of your own or a
// history.MemoryStore in tests. The worker does not close it, and
// /readyz checks no store.
func WithStore(store history.Store) Option { return func(o *options) { o.store = store } }

// WithListener serves /healthz, /readyz and /metrics on ln instead of
// listening on Config.Addr (socket activation; a test's port 0). Run
// closes it.
func WithListener(ln net.Listener) Option { return func(o *options) { o.listener = ln } }

// goAgent reports whether the options bring an agent written in Go.
func (o *options) goAgent() bool { return o.factory != nil || o.shared != nil }

// checkAgent reports conflicting agent options, and hooks without an
// agent written in Go.
func (o *options) checkAgent() error {
	switch {
	case o.factory != nil && o.shared != nil:
		return errors.New("worker: WithAgent and WithAgentFactory both set")
	case !o.goAgent() && o.hooks:
		return errNoAgentForHooks
	}
	return nil
}

var errNoAgentForHooks = errors.New("worker: hooks (WithStream, WithPersist, WithNotice, WithTransientErrors, WithResume…) need WithAgent or WithAgentFactory")

// AskUser returns the ask_user tool of the agent configuration: it stops
// the run to ask the user its "question" argument (an eino interrupt,
// checkpointed by the worker) and, resumed, returns the user's answer as
// its result (a string). A Go agent may use it as it is.
func AskUser() tool.InvokableTool { return askUser{} }
