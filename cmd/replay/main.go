// Command replay replays records of the requests topic or its DLQ:
//
//	replay -mode redrive -topic dlq            # re-publish dead letters to the requests topic
//	replay -mode shadow -since 2h -model echo  # run past traffic offline, results in a JSONL report
//
// Selection by partition, offset and time range, filters by tenant, user
// and conversation, -dry-run, a checkpoint for -resume. See the README's
// "Replaying topics" section; flags: replay -h. cmd/replay is pkg/replay's
// Main without Go agent code: a shadow replay runs the agent of the
// settings (-agent-config, else one agent on -model). A Go program replays
// through its own eino agent with replay.Main(worker.WithAgentFactory(…)).
package main

import "github.com/turnpike-dev/turnpike/pkg/replay"

func main() { replay.Main() }
