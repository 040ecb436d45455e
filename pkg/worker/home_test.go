package worker_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// A generation that ends without a partition change (here: a second worker
// joins the group) leaves the count it placed by for the next one, so the
// next generation starts its partitions at once: it does not take the
// count for changed and rejoin again (one needless rebalance of the whole
// group each time).
func TestAGenerationEndedByARebalanceLeavesItsCountForTheNext(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	s := newStack(t, history.NewMemoryStore())
	s.cfg.PartitionWatchInterval = time.Hour // no count change is looked for
	s.ensureTopics(t, ctx, 3)
	logs := &lockedBuffer{}
	s.run(t, ctx, s.newWorker(t, worker.Deps{Logger: slog.New(slog.NewTextHandler(logs, nil))}))
	id := events.Identity{Tenant: "acme", User: "ann", Conversation: "two-generations"}
	s.produce(t, ctx, id.Key(), request(id, "r1", "before the second worker"))
	st := s.stream(t)
	st.events(t, ctx, 1)

	s.start(t, ctx, worker.Deps{})
	testenv.Eventually(t, ctx, "the first worker's second generation", func() bool {
		return strings.Count(logs.String(), "partitions assigned") >= 2
	})
	s.produce(t, ctx, id.Key(), request(id, "r2", "after the second worker"))
	evs := st.events(t, ctx, 1)
	if txt, status := text(evs); txt != "echo #2: after the second worker" || status != events.StatusComplete {
		t.Fatalf("streamed %q (%s) after the rebalance", txt, status)
	}
	if out := logs.String(); strings.Contains(out, "partition count changed around the rebalance") {
		t.Fatalf("the first worker rejoined again after an ordinary rebalance; logs:\n%s", out)
	}
}
