package replay

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

func header(m kafka.Message, key string) (string, bool) {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

func TestRedrivingTheSameRecordsTwiceAddsOneTurnPerRequest(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	e := newEnv(t)
	// Four conversations, three requests each; every other request has no
	// request id (a direct producer), so the worker derives one from the
	// record's coordinates.
	want := map[events.Identity]int{}
	var msgs []kafka.Message
	for c := range 4 {
		id := events.Identity{Tenant: "acme", User: "ann", Conversation: fmt.Sprintf("c%d", c)}
		want[id] = 3
		for j := 1; j <= 3; j++ {
			rid := ""
			if j%2 == 1 {
				rid = fmt.Sprintf("c%d-m%d", c, j)
			}
			msgs = append(msgs, testenv.Request(id, rid, fmt.Sprintf("m%d", j)))
		}
	}
	testenv.Produce(t, ctx, e.brokers, e.names.Requests, msgs...)

	// No worker yet: both redrives find every request undecided and
	// publish it, under the id the worker would give the original.
	live := history.NewMemoryStore()
	for i, name := range []string{"first", "second"} {
		cfg := e.config(modeRedrive, name)
		sum, err := runReplay(ctx, cfg, deps{Decisions: live})
		if err != nil {
			t.Fatalf("redrive %s: %v", name, err)
		}
		// The second selection also holds the first one's copies.
		if wantPub := int64(12 * (i + 1)); sum.Published != wantPub || sum.Skipped != 0 {
			t.Fatalf("redrive %s: published %d, skipped %d; want %d, 0", name, sum.Published, sum.Skipped, wantPub)
		}
	}
	all := e.readAll(t, ctx, e.names.Requests)
	if len(all) != 12+12+24 {
		t.Fatalf("requests topic holds %d records, want 48", len(all))
	}
	// Every copy names its source and this replay, and carries the
	// request id of its original.
	idOf := map[string]string{} // "partition/offset" -> request id the worker gives it
	for _, m := range all {
		if _, ok := header(m, headerReplayID); ok {
			continue
		}
		req, err := events.DecodeRequest(m.Value, 0)
		if err != nil {
			t.Fatal(err)
		}
		if req.RequestID == "" {
			req.RequestID = events.DerivedRequestID(m.Partition, m.Offset, m.Time)
		}
		idOf[fmt.Sprintf("%d/%d", m.Partition, m.Offset)] = req.RequestID
	}
	for _, m := range all {
		srcP, ok := header(m, headerReplaySourcePartition)
		if !ok {
			continue
		}
		srcO, _ := header(m, headerReplaySourceOffset)
		req, err := events.DecodeRequest(m.Value, 0)
		if err != nil {
			t.Fatalf("a redriven record does not decode: %v", err)
		}
		if orig, isOrig := idOf[srcP+"/"+srcO]; isOrig && req.RequestID != orig {
			t.Errorf("copy of %s/%s carries request id %q, want the original's %q", srcP, srcO, req.RequestID, orig)
		}
		if req.RequestID == "" {
			t.Errorf("copy of %s/%s carries no request id", srcP, srcO)
		}
	}

	// The worker runs the originals and both redrives' copies: one turn
	// per request, in order.
	e.startWorker(t, ctx, live, nil, nil)
	waitTurns(t, ctx, live, want)
	e.waitHandled(t, ctx) // every copy handled: a duplicate turn would show now
	got := waitTurns(t, ctx, live, want)
	for id, ms := range got {
		for k := 0; k < len(ms); k += 2 {
			n := k/2 + 1
			if ms[k].Content != fmt.Sprintf("m%d", n) || ms[k+1].Content != fmt.Sprintf("echo #%d: m%d", n, n) {
				t.Errorf("%s turn %d: %q → %q", id, n, ms[k].Content, ms[k+1].Content)
			}
		}
	}

	// A third redrive, now that everything is decided, publishes nothing.
	sum, err := runReplay(ctx, e.config(modeRedrive, "third"), deps{Decisions: live})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Published != 0 || sum.Skipped != 48 {
		t.Errorf("third redrive: published %d, skipped %d; want 0, 48", sum.Published, sum.Skipped)
	}
	for _, l := range readReport(t, e.config(modeRedrive, "third").Report) {
		if l.Action != actionSkipped || l.Status != string(events.StatusComplete) {
			t.Errorf("third redrive reports %s/%d as %s %s, want skipped complete", l.Source.Topic, l.Source.Offset, l.Action, l.Status)
		}
	}
}

func TestRedrivingDeadLettersAfterAFixRunsThemOnceUnderTheirOriginalIDs(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	e := newEnv(t)
	live := history.NewMemoryStore()
	// The bug: a content limit of 10 bytes dead-letters longer messages
	// as invalid (nothing is recorded for them).
	stop := e.startWorker(t, ctx, live, nil, func(c *worker.Config) { c.MaxContentBytes = 10 })
	id := events.Identity{Tenant: "acme", User: "bob", Conversation: "dlq"}
	testenv.Produce(t, ctx, e.brokers, e.names.Requests,
		testenv.Request(id, "", "a message longer than ten bytes"),
		testenv.Request(id, "with-id", "another long message"))
	e.waitRecords(t, ctx, e.names.DLQ, 2)
	stop()
	originals := e.readAll(t, ctx, e.names.Requests)
	derived := events.DerivedRequestID(originals[0].Partition, originals[0].Offset, originals[0].Time)

	// The fix: the default limit. Redrive the DLQ.
	e.startWorker(t, ctx, live, nil, nil)
	cfg := e.config(modeRedrive, "dlq")
	cfg.Topic = topicDLQ
	sum, err := runReplay(ctx, cfg, deps{Decisions: live})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Published != 2 || sum.Derived != 1 {
		t.Fatalf("published %d (derived %d), want 2 (1); %+v", sum.Published, sum.Derived, *sum)
	}
	got := waitTurns(t, ctx, live, map[events.Identity]int{id: 2})[id]
	if got[0].RequestID != derived || got[2].RequestID != "with-id" {
		t.Errorf("turns ran as %q and %q, want %q (derived from the original coordinates) and %q", got[0].RequestID, got[2].RequestID, derived, "with-id")
	}
	lines := readReport(t, cfg.Report)
	if len(lines) != 2 || lines[0].Origin == nil || lines[0].Origin.Topic != e.names.Requests || lines[0].Origin.Offset != originals[0].Offset {
		t.Errorf("report does not name the dead letters' origins: %+v", lines)
	}
	// The copies carry no DLQ header.
	for _, m := range e.readAll(t, ctx, e.names.Requests) {
		if _, replayed := header(m, headerReplayID); !replayed {
			continue
		}
		for _, h := range []string{headerDLQReason, headerSourceTopic, headerSourcePartition, headerSourceOffset, headerDLQAttempts} {
			if _, ok := header(m, h); ok {
				t.Errorf("redriven record keeps DLQ header %s", h)
			}
		}
	}

	// Again: both are decided now, nothing is published, no turn is added.
	cfg = e.config(modeRedrive, "dlq-again")
	cfg.Topic = topicDLQ
	if sum, err = runReplay(ctx, cfg, deps{Decisions: live}); err != nil {
		t.Fatal(err)
	}
	if sum.Published != 0 || sum.Skipped != 2 {
		t.Errorf("second redrive: published %d, skipped %d; want 0, 2", sum.Published, sum.Skipped)
	}
	e.waitHandled(t, ctx)
	waitTurns(t, ctx, live, map[events.Identity]int{id: 2})
}

func TestRedriveReRunsFailedRequestsOnlyWhenAskedAndOnlyOnce(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	e := newEnv(t)
	live := history.NewMemoryStore()
	m := newFlakyModel(t)
	e.startWorker(t, ctx, live, m, func(c *worker.Config) { c.MaxAttempts = 2 })
	id := events.Identity{Tenant: "acme", User: "cy", Conversation: "flaky"}
	testenv.Produce(t, ctx, e.brokers, e.names.Requests, testenv.Request(id, "req-1", "a flaky one"))
	e.waitRecords(t, ctx, e.names.DLQ, 1)
	for {
		if c, ok, _ := live.Lookup(ctx, id, "req-1"); ok && c.Status == events.StatusFailed {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("req-1 never recorded failed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	dlq := e.readAll(t, ctx, e.names.DLQ)
	if a, _ := header(dlq[0], headerDLQAttempts); a != "2" {
		t.Fatalf("dead letter attempts %q, want 2", a)
	}

	// Without -rerun-failed the failed request is skipped: republishing it
	// would only complete it failed again.
	cfg := e.config(modeRedrive, "plain")
	cfg.Topic = topicDLQ
	sum, err := runReplay(ctx, cfg, deps{Decisions: live})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Published != 0 || sum.Skipped != 1 {
		t.Fatalf("without rerun-failed: published %d, skipped %d; want 0, 1", sum.Published, sum.Skipped)
	}
	if l := readReport(t, cfg.Report)[0]; l.Status != string(events.StatusFailed) || l.Action != actionSkipped {
		t.Errorf("report: %s %s, want skipped failed", l.Action, l.Status)
	}

	// The fix, then the re-run under a fresh id, twice: one turn.
	m.broken.Store(false)
	for i := range 2 {
		cfg := e.config(modeRedrive, "rerun"+strconv.Itoa(i))
		cfg.Topic, cfg.RerunFailed = topicDLQ, true
		sum, err := runReplay(ctx, cfg, deps{Decisions: live})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if sum.Published != 1 || sum.Reruns != 1 {
				t.Fatalf("rerun: published %d, reruns %d; want 1, 1", sum.Published, sum.Reruns)
			}
			l := readReport(t, cfg.Report)[0]
			if l.RequestID != "req-1-rd1" || l.OriginalRequestID != "req-1" {
				t.Errorf("re-run id %q (original %q), want req-1-rd1 (req-1)", l.RequestID, l.OriginalRequestID)
			}
			got := waitTurns(t, ctx, live, map[events.Identity]int{id: 1})[id]
			if got[1].Content != "echo #1: a flaky one" || got[1].RequestID != "req-1-rd1" {
				t.Errorf("re-run answered %q as %s", got[1].Content, got[1].RequestID)
			}
		} else if sum.Published != 0 || sum.Skipped != 1 {
			t.Errorf("second rerun: published %d, skipped %d; want 0, 1 (already re-run)", sum.Published, sum.Skipped)
		}
	}
	e.waitHandled(t, ctx)
	waitTurns(t, ctx, live, map[events.Identity]int{id: 1})
}

// docs/api.md, "The home partition": a redrive places each copy in the
// home partition of its key (topic.Home: murmur2, the Java client's
// default), wherever the original was. The originals here all sit in
// partition 0, as a producer that ignores the key would leave them; no
// worker runs, so nothing moves them afterwards.
func TestRedrivePlacesEveryCopyInItsHomePartition(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	e := newEnv(t)
	var msgs []kafka.Message
	homes := map[int]int{}
	for c := range 12 {
		id := events.Identity{Tenant: "acme", User: "dee", Conversation: fmt.Sprintf("home-%d", c)}
		homes[topic.Home([]byte(id.Key()), testPartitions)]++
		msgs = append(msgs, testenv.Request(id, fmt.Sprintf("home-%d-r", c), "placed"))
	}
	if len(homes) < 2 {
		t.Fatalf("the keys' homes %v: want keys of several homes", homes)
	}
	w := &kafka.Writer{Addr: kafka.TCP(e.brokers...), Topic: e.names.Requests, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll,
		Balancer: kafka.BalancerFunc(func(kafka.Message, ...int) int { return 0 })}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	sum, err := runReplay(ctx, e.config(modeRedrive, "home"), deps{Decisions: history.NewMemoryStore()})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Published != int64(len(msgs)) {
		t.Fatalf("published %d, want %d", sum.Published, len(msgs))
	}
	copies := 0
	for _, m := range e.readAll(t, ctx, e.names.Requests) {
		if _, ok := header(m, headerReplayID); !ok {
			continue
		}
		copies++
		if home := topic.Home(m.Key, testPartitions); m.Partition != home {
			t.Errorf("the copy of %s is in partition %d, its home is %d", m.Key, m.Partition, home)
		}
	}
	if copies != len(msgs) {
		t.Fatalf("%d copies in the requests topic, want %d", copies, len(msgs))
	}
}
