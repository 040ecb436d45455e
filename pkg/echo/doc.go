// Package echo is Turnpike's built-in chat model for the local stack and
// tests: a cloudwego/eino model.ToolCallingChatModel that answers
// "echo #K: <content>", where K is the number of user messages it received
// (history window plus the new one) and content is the last user message.
// Only messages with role schema.User count, and only their Content is read
// (multi-content parts are ignored).
//
// The reply is streamed one word per chunk, each word followed by a single
// space except the last, with a configurable pause before every chunk. The
// last user message may carry directives that tests use to script the model;
// they are removed from the echoed text:
//
//	[[fail-after:N]]  stream N chunks, then fail with ErrInjectedFailure
//	[[delay:D]]       pause D (a Go duration) before each chunk, overriding Config.Delay
//	[[tokens:N]]      answer "w1 w2 … wN" instead of the echo
//	[[empty]]         answer nothing: the stream ends at once with io.EOF
//	[[call:NAME]]     call the tool NAME, then echo its result
//
// [[call:NAME]] answers with one assistant message calling the tool NAME,
// with the rest of the message as arguments when it is a JSON object (else
// {}); once the tool's result follows the user's message, the answer is
// "echo #K: <result>". The tool must have been given to the model, either
// bound by WithTools or as the model.WithTools call option (which wins;
// eino v0.9's ChatModelAgent passes its tools that way only); otherwise the
// call fails with ErrBadDirective. It takes no [[empty]], [[tokens:N]] or
// [[fail-after:N]]; [[delay:D]] is paused once before the call.
//
// Directives in earlier messages of the window are ignored. A reply shorter
// than N under [[fail-after:N]] is streamed whole before the failure.
//
// Names are case-sensitive and values take no spaces. Any other [[...]] text
// is not a directive and is echoed verbatim; a known directive with a bad
// value (or given twice) makes Generate and Stream fail with ErrBadDirective
// before any chunk.
//
// A Model is immutable and safe for concurrent use. The goroutine behind a
// stream belongs to the returned reader: it ends after the last chunk, as
// soon as the context ends, or at the next chunk after the reader is closed.
package echo
