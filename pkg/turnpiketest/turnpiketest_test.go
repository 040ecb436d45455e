package turnpiketest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/turnpiketest"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// The helpers on the default agent (the echo model): a run followed from
// its first event, its text and status, and the persisted turn; two
// conversations of two users, each seeing only its own.
func TestStackSendFollowHistory(t *testing.T) {
	stack := turnpiketest.Start(t, worker.WithAgentFactory(newAgent))
	alice, bob := stack.Client("alice"), stack.Client("bob")
	fa, fb := alice.Follow("c"), bob.Follow("c")
	ra := fa.Run(alice.Send("c", "one two three"))
	rb := fb.Run(bob.Send("c", "four"))
	if ra.Status != events.StatusComplete || rb.Status != events.StatusComplete || ra.Text == rb.Text {
		t.Fatalf("runs %v and %v", ra, rb)
	}
	if first, last := ra.Events[0].Type(), ra.Events[len(ra.Events)-1].Type(); first != events.TypeRunStarted || last != events.TypeRunCompleted {
		t.Errorf("events from %s to %s", first, last)
	}
	ha, hb := alice.History("c"), bob.History("c")
	if len(ha) != 2 || ha[0].Content != "one two three" || ha[1].Content != ra.Text || len(hb) != 2 || hb[1].Content != rb.Text {
		t.Errorf("histories %+v and %+v", ha, hb)
	}
}

// One Client used by many goroutines at once (run under -race): some on
// one shared conversation, the others each on its own, every one
// following, sending (all at once, after a barrier), waiting for its run
// and reading history. 40 POSTs at once for one user are twice ingest's
// default burst (20, refilled at 10 a second): the test stack has no
// per-user rate limit, so none is refused.
func TestOneClientIsSafeForConcurrentUse(t *testing.T) {
	stack := turnpiketest.Start(t, worker.WithAgentFactory(newAgent))
	c := stack.Client("carol")
	const shared, own = 16, 24 // at most 20 queued per conversation
	start := make(chan struct{})
	var followed, wg sync.WaitGroup
	for i := range shared + own {
		conv := "shared"
		if i >= shared {
			conv = fmt.Sprintf("own%d", i)
		}
		content := fmt.Sprintf("message %d", i)
		followed.Add(1)
		wg.Go(func() {
			f := c.Follow(conv)
			followed.Done()
			<-start
			r := f.Run(c.Send(conv, content))
			if r.Status != events.StatusComplete || !strings.HasSuffix(r.Text, content) {
				t.Errorf("%s: %v, want complete, ending with %q", conv, r, content)
			}
			found := false
			for _, m := range c.History(conv) {
				found = found || m.Content == r.Text
			}
			if !found {
				t.Errorf("%s: %q not in the history", conv, r.Text)
			}
		})
	}
	followed.Wait()
	close(start)
	wg.Wait()
	if h := c.History("shared"); len(h) != 2*shared {
		t.Errorf("the shared conversation holds %d messages, want %d", len(h), 2*shared)
	}
}

// IngestConfig, which Start uses, turns the per-user rate limit off
// (RatePerSecond -1, which ingest reads as no limit; pkg/ingest tests
// that). TestOneClientIsSafeForConcurrentUse sees it only when its 40
// POSTs come faster than ingest's default bucket refills.
func TestIngestConfigTurnsTheRateLimitOff(t *testing.T) {
	t.Parallel()
	if got := turnpiketest.IngestConfig().RatePerSecond; got != -1 {
		t.Fatalf("IngestConfig().RatePerSecond = %v, want -1 (no limit)", got)
	}
}

// StartWithIngest configures ingest's limits: with a per-user rate limit of
// one POST and (practically) no refill, a second POST is refused 429
// rate_limited, and another user is not.
func TestStartWithIngestSetsTheRateLimit(t *testing.T) {
	ic := turnpiketest.IngestConfig()
	ic.RatePerSecond, ic.RateBurst = 0.0001, 1
	stack := turnpiketest.StartWithIngest(t, ic, turnpiketest.Config(), worker.WithAgentFactory(newAgent))
	dan := stack.Client("dan")
	dan.Send("c", "one")
	_, err := dan.API.Send(t.Context(), "c", "two", client.SendOptions{})
	if !client.IsCode(err, "rate_limited") {
		t.Errorf("second POST: %v, want rate_limited", err)
	}
	stack.Client("erin").Send("c", "one")
}

// firstTokenModel streams "first " and then waits for the run's context
// to end: a run that stays in the middle of its answer until cancelled.
type firstTokenModel struct{}

func (firstTokenModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) {
	return firstTokenModel{}, nil
}

func (firstTokenModel) Generate(ctx context.Context, _ []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (firstTokenModel) Stream(ctx context.Context, _ []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	sr, sw := schema.Pipe[*schema.Message](1)
	go func() {
		defer sw.Close()
		sw.Send(schema.AssistantMessage("first ", nil), nil)
		<-ctx.Done()
		sw.Send(nil, ctx.Err())
	}()
	return sr, nil
}

func newFirstTokenAgent(ctx context.Context, _ worker.Request) (adk.Agent, error) {
	return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "slow", Description: "never finishes", Model: firstTokenModel{}})
}

// WaitTokens returns with the run's first token while the run goes on;
// the test cancels it there, and Run then returns the whole run, cancelled
// after that token. Nothing depends on timing: the model streams nothing
// more until it is cancelled.
func TestWaitTokensLetsATestCancelMidAnswer(t *testing.T) {
	stack := turnpiketest.Start(t, worker.WithAgentFactory(newFirstTokenAgent))
	c := stack.Client("frank")
	f := c.Follow("c1")
	id := c.Send("c1", "tell me everything")
	so := f.WaitTokens(id, 1)
	if so.Text != "first " || so.Status != "" {
		t.Fatalf("so far: %v, want the first token of a run still going", so)
	}
	c.Cancel("c1", id)
	if r := f.Run(id); r.Status != events.StatusCancelled || r.Text != "first " {
		t.Errorf("run %v, want cancelled after %q", r, "first ")
	}
}
