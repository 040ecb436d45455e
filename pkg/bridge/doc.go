// Package bridge splits one eino agent run in two: one half streams the
// selected assistant deltas as stream events to a Sink (the stream topic),
// the other half gathers the answer and commits the turn to history.
//
// Its guarantees, each covered by a test:
//
//   - no-dangling-user: a run without assistant content persists nothing,
//     not even the user message (the turn is discarded).
//   - incomplete: an error from an event, from a message stream's Recv, or a
//     stream cut off by the model (finish reason "length" or
//     "content_filter") persists the answer so far with status incomplete.
//   - ephemeral: error notices are streamed (NoticeEvent) and never
//     persisted; tool-call messages and tool results are neither persisted
//     nor streamed as text.
//   - predicates: Predicates over agent and role choose what is streamed and
//     what is persisted; nil means the assistant text of every agent (the
//     one default: see Predicate).
//   - parts: two agents' text is never persisted as one message. The
//     answer is one part per contiguous stretch of one agent's persisted
//     text (A, B, then A again: three parts), each committed as an
//     assistant message with its agent's name (through an AnswerTurn); at
//     most history.MaxParts of them, after which the answer ends
//     incomplete. The stream is unchanged: its token events carry their
//     agent.
//   - detached: the context given to Start carries values only. Its
//     cancellation (a client going away, a request ending) aborts neither
//     the generation nor the persistence. Only Handle.Cancel (persist the
//     partial answer as cancelled) and Handle.Abort (persist nothing) stop a
//     run.
//   - agents: a transfer between agents (eino adk TransferToAgent) is
//     streamed as an agent.transfer event, in order with the tokens; an
//     interrupt (eino adk Interrupted) ends the run interrupted: the answer
//     so far and the question are committed (with a Turn that implements
//     AnswerTurn), then run.interrupted is emitted before run.completed.
//   - usage: the token usage of every model call of the run (selected or
//     not, tool-call rounds included) is summed, committed with the answer
//     and sent on run.completed; a cancelled run keeps the usage the model
//     reported before the cancel took effect, though not the text.
//
// Every emitted event carries request_id, run_id, a contiguous seq starting
// at 1, and ts. A turn is committed before its run.completed is emitted.
//
// A Bridge is immutable and safe for concurrent use by many runs. A Handle's
// methods are safe for concurrent use.
package bridge
