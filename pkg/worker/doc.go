// Package worker runs an eino agent written in Go on Turnpike's pipeline:
// it consumes the requests topic in a Kafka consumer group, runs the agent
// for each request, streams its tokens to the stream topic (which the push
// gateway serves to WebSocket clients) and persists each turn in MongoDB.
// cmd/worker is this package's Main without Go code:
//
//	func main() { worker.Main(worker.WithAgentFactory(newAgent)) }
//
// newAgent is an AgentFactory: it gets the request's identity (tenant,
// user, conversation) and request id, and returns any adk.Agent (a
// ChatModelAgent with tools from utils.InferTool or MCP, a supervisor and
// its sub-agents, a workflow agent, your own), so tenants can get
// different agents, tools and models. The worker owns the adk.Runner, the
// checkpoint store and the checkpoint ids: interrupts are checkpointed in
// MongoDB and resumed by POST …/resume.
//
// This package is the worker itself, not a wrapper: cmd/worker is
// Main() with no options, and the consumer group, the partitions and their
// per-conversation queues, offsets, home moves, the run step, compaction,
// the control reader, dead letters, the stream sink, the agent file and
// its built-in tools and the metrics are this package's (unexported where
// they are not API).
//
// # Configuration
//
// Config holds cmd/worker's settings, read by LoadConfig from flags and
// TURNPIKE_* environment variables, with the defaults documented on each
// field (DefaultConfig) and checked by Validate (which reports every
// problem at once). Config.RegisterFlags puts the same settings on another
// program's flag set (pkg/devstack's). The options (With…) hold what is Go
// code: the agent and the hooks, listed with their defaults on each
// function.
//
// # The process and the run step
//
// Worker.Run is the whole process: it listens on Config.Addr (/healthz,
// /readyz, /metrics) and Config.PprofAddr first, so that a taken address
// stops it before anything starts, then opens the MongoDB store (or the
// one of WithStore), tracing, the models and the consumer, and returns
// once every goroutine it started has ended. Main is a binary's body
// around it.
//
// Step is one request's run without Kafka: the window (with the pending
// interrupt's question), compaction, the agent's first run or resume, and
// what is streamed and persisted. The worker runs every request through
// it; a shadow replay runs the same code against another store.
//
// # Guarantees
//
// Everything the pipeline guarantees holds for a Go agent as for the agent
// file's: the requests of one conversation run strictly one after the
// other, in topic order; a worker that lost its partition cannot commit
// (fencing); each request is committed exactly once (a re-delivered or
// duplicate record completes as it did the first time); cancels and the
// send strategies (enqueue, reject, interrupt) apply; a transient model
// error is retried (WithTransientErrors classifies a custom model's) up to
// Config.MaxAttempts, then the record is dead-lettered; metrics, trace
// spans and token usage are the same.
//
// A request may run more than once: a re-delivery after a crash, a run
// aborted when its partition moves, or a retry after a transient error
// runs it again, with a new run id and the same request id. The turn's
// commit is exactly once. A durable agent's steps are journaled (durable
// runs, DESIGN.md): each model output that asks for tools is recorded
// before any of its tools starts, each tool result before the next model
// call reads it, and a re-run replays them (the model is not called, the
// tool does not run) and goes on live from the first step not recorded.
// The agents of the agent file are durable; a Go agent opts in with
// Durable on each ChatModelAgentConfig (the supervisor's and every
// sub-agent's). What stays at least once: agents that do not opt in, and
// agents that are not ChatModelAgents; streamable tools; a tool killed
// while it runs, or after its side effect and before its result was
// recorded; a final answer cut short; a step over the journal's size
// limits; the steps a worker that lost its partition makes before the new
// owner claims the journal. A tool with a side effect keys it on its
// ToolStep (ToolStepFromContext: the same key on every run that replays
// the model output that asked for it, and the run's attempt), or on the
// request id (RequestFromContext), so that its service can deduplicate
// what the journal cannot.
//
// # Concurrency
//
// Many runs execute at once: one per conversation with work, across the
// worker's partitions. Each run has its own goroutines; the hooks run on
// them, concurrently for runs of different conversations, and must be
// safe for concurrent use:
//
//   - the AgentFactory, once per run (first runs and resumes), on the
//     goroutine that runs the request;
//   - the agent, its models and tools, on the goroutines eino starts for
//     the run, under a context carrying the Request;
//   - the stream and persist predicates, on the run's event reader
//     goroutine, once per message;
//   - the notice builder and the transient-error classifier, on a
//     goroutine of the run, when a model error ends it;
//   - the resume hooks, on the goroutine that runs the resume, once per
//     interrupt target;
//   - the summarizer, before the run, on the same goroutine;
//   - the model label, once per agent after the run.
//
// WithAgentFactory is the default to reach for: an agent built per run
// shares nothing between runs. eino v0.9.21's ChatModelAgent with tools
// writes its run's cancel context into the configuration all runs share
// (a data race when runs share it: TestEinoRacesWhenRunsShareAToolCallingAgent,
// run with TURNPIKE_EINO_SHARED_AGENT=1 and -race), and
// supervisor.New binds its sub-agents to one parent. WithAgent shares one
// agent between all runs: only for agents safe for that, such as a
// ChatModelAgent without tools.
//
// # Session state and the active agent
//
// An agent's tools keep state across turns through StateFromContext, the
// one way to do it (eino's session values still live for one run): Get,
// Set and Delete JSON values under keys scoped by prefix: none for the
// conversation, UserPrefix ("user:") for every conversation of the user,
// TenantPrefix ("tenant:") for the tenant's, TempPrefix ("temp:") for the
// run only. The run's changes commit with its turn (a run that persists
// nothing changes nothing) and the next run of the conversation starts
// from them; user: and tenant: keys are read on their first use in a run
// and rolled forward per key after the commit, the newest commit winning
// per key. Limits (history.MaxStateKeys, MaxStateKeyBytes,
// MaxStateValueBytes, MaxStateBytes) make Set fail with ErrStateLimit;
// nothing is truncated. A State is safe for concurrent use.
//
// A run that ends transferred to a sub-agent (adk.SetSubAgents, without a
// supervisor's hand-back) leaves the conversation with it: the next run
// starts from that agent, found in the agent tree by name (run.started
// names it), or from the root when the tree no longer has it. A transfer
// back to the root returns the conversation to it. In an agent file, a
// sub-agent with "sticky": true is built that way. See DESIGN.md "Session
// state and the active agent" and docs/api.md.
//
// # Interrupts
//
// A tool interrupts with eino's tool.Interrupt (or uses AskUser). The run
// ends interrupted with the interrupt's info as the question; the user's
// answer (POST …/resume) resumes it. eino's tool.GetResumeContext[T] is a
// type assertion, so a tool expecting a T must be resumed with a T:
// WithResumeAs (per tool) and WithResume turn the answer, a string, into
// the value; an answer they refuse rejects the resume with a notice, and
// the interrupt stays pending.
//
// A Worker's methods are not safe for concurrent use: call Run once.
package worker
