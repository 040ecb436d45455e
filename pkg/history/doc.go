// Package history keeps Turnpike's conversations: turns of one user message
// and the assistant's answer, one assistant message per part (each agent's
// contiguous stretch of text: Turn.Parts), bound to the identity triple
// (tenant, user, conversation). Messages are numbered 1, 2, 3 … over the
// conversation, with no gap.
//
// A turn is written atomically as one document and is idempotent per request
// id, without multi-document transactions (FerretDB has none, and the same
// code must behave identically on MongoDB). The user message of a running
// request is held pending in memory (Pending) and written only together with
// its answer, so a request that produces no assistant content leaves nothing
// behind. Pending.Start tells, before a run, whether its request id is
// already decided or cancelled, and otherwise returns the model's window:
// on a MongoStore an ordinary turn, Start then Commit, is four commands in
// three round trips, and concurrent commits are written in bulk.
//
// Besides turns, a Store keeps how requests ended without a turn
// (outcomes), durable cancels, one compaction Summary per conversation
// (messages are never deleted) and agent checkpoints of interrupted runs,
// all bound to the identity. Assistant messages carry the run's token
// usage and, when interrupted, the question asked (Interrupt).
//
// A Journal keeps the step journals of durable runs (pkg/worker's
// Durable): the steps a running request's agent completed, fenced by the
// owner token of the run that writes them, so that a re-run replays them;
// Pending.Start finds a request's journal in the query that decides it.
//
// Session state commits with the turn (Turn.State): the turn document
// keeps the conversation's state after it and the agent it left the
// conversation with, which Pending.Start reads with the window (Start.State)
// at no extra command, and the run's changes of the user's and the
// tenant's state, which Commit then rolls forward into one document per
// key with a conditional write (the newest commit wins per key); a
// ScopeStore reads those. A request that commits no turn changes no state.
//
// Implementations: MongoStore (MongoDB and FerretDB; its doc comment
// describes the storage layout and commit protocol) and MemoryStore (for
// unit tests of other packages), both Journals too. Package historytest is
// the conformance suite both pass.
//
// Store implementations are safe for concurrent use. A Pending belongs to
// one request and is not.
package history
