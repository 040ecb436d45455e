// Command replay replays records of the requests topic or its DLQ:
//
//	replay -mode redrive -topic dlq            # re-publish dead letters to the requests topic
//	replay -mode shadow -since 2h -model echo  # run past traffic offline, results in a JSONL report
//
// Selection by partition, offset and time range, filters by tenant, user
// and conversation, -dry-run, a checkpoint for -resume. See the README's
// "Replaying topics" section; flags: replay -h. pkg/replay runs a shadow
// replay with an agent written in Go.
package main

import (
	"os"

	"github.com/turnpike-dev/turnpike/internal/replay"
)

func main() { os.Exit(run()) }

func run() int { return replay.Main(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr, nil) }
