// Command worker consumes the requests topic in a consumer group, runs the
// agent for each request, streams its tokens to the stream topic and
// persists the turn. The agent is the agent configuration file's
// (TURNPIKE_AGENT_CONFIG), else one agent on TURNPIKE_MODEL: cmd/worker is
// pkg/worker's Main without Go agent code. A Go program runs its own eino
// agent the same way with worker.Main(worker.WithAgentFactory(…)).
//
// Settings are flags or TURNPIKE_* environment variables (-h lists them).
package main

import "github.com/turnpike-dev/turnpike/pkg/worker"

func main() { worker.Main() }
