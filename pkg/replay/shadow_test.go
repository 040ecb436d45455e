package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// conversations produces convs conversations of msgs requests each
// ("m1", "m2", …; request ids c<i>-m<j>) and returns the identities.
func (e *env) conversations(t *testing.T, ctx context.Context, user string, convs, msgs int) []events.Identity {
	t.Helper()
	var ids []events.Identity
	var batch []kafka.Message
	for i := range convs {
		ids = append(ids, events.Identity{Tenant: "acme", User: user, Conversation: fmt.Sprintf("c%d", i)})
	}
	for j := 1; j <= msgs; j++ {
		for i, id := range ids {
			batch = append(batch, request(id, fmt.Sprintf("c%d-m%d", i, j), fmt.Sprintf("m%d", j)))
		}
	}
	e.produce(t, ctx, e.names.Requests, batch...)
	return ids
}

func echoModel(t testing.TB) *echo.Model {
	t.Helper()
	m, err := echo.New(echo.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkShadowAnswers checks that each request of the report was answered
// as the echo model answers the j-th message of a conversation whose
// history holds the j-1 before it.
func checkShadowAnswers(t *testing.T, lines []Line) {
	t.Helper()
	for _, l := range lines {
		var j int
		if _, err := fmt.Sscanf(l.Content, "m%d", &j); err != nil {
			t.Errorf("report line with content %q", l.Content)
			continue
		}
		if want := fmt.Sprintf("echo #%d: m%d", j, j); l.Answer != want || l.Status != string(events.StatusComplete) {
			t.Errorf("%s %s answered %q (%s), want %q complete", l.Conversation, l.RequestID, l.Answer, l.Status, want)
		}
	}
}

// historyText renders histories by their persisted fields, in a stable
// order.
func historyText(h map[events.Identity][]history.Message) string {
	keys := make([]string, 0, len(h))
	byKey := map[string][]history.Message{}
	for id, ms := range h {
		keys = append(keys, id.Key())
		byKey[id.Key()] = ms
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		for _, m := range byKey[k] {
			fmt.Fprintf(&b, "%s %d %s %s %q %s %s\n", k, m.Seq, m.Role, m.RequestID, m.Content, m.Status, m.CreatedAt.Format(time.RFC3339Nano))
		}
	}
	return b.String()
}

func TestShadowRebuildsHistoriesInOrderAndNeverTouchesLiveHistoryOrTheStreamTopic(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 90*time.Second)
	e := newEnv(t)
	uri := testenv.MongoURI(t)
	client := testenv.MongoClient(t, uri)
	liveDB := testenv.Name(t, "live")
	live, err := history.NewMongoStore(ctx, client.Database(liveDB), history.MongoConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ids := e.conversations(t, ctx, "dee", 3, 4)
	e.produce(t, ctx, e.names.Requests, kafka.Message{Key: []byte("acme/dee/c0"), Value: []byte(`{"not":"a request"}`)})
	want := map[events.Identity]int{}
	for _, id := range ids {
		want[id] = 4
	}
	// The live pipeline answers first.
	stop := e.startWorker(t, ctx, live, nil, nil)
	liveTurns := waitTurns(t, ctx, live, want)
	e.waitRecords(t, ctx, e.names.DLQ, 1)
	stop()
	streamBefore := e.endOffsets(t, ctx, e.names.Stream)
	requestsBefore := e.endOffsets(t, ctx, e.names.Requests)

	cfg := e.config(ModeShadow, "shadow")
	cfg.MongoURI, cfg.MongoDB = uri, liveDB
	cfg.ShadowMongoDB = liveDB
	if _, _, err := Connect(ctx, cfg, io.Discard); err == nil || !strings.Contains(err.Error(), "live database") {
		t.Fatalf("a shadow database named like the live one: %v, want a refusal", err)
	}
	cfg.ShadowMongoDB = testenv.Name(t, "shadow")
	sum, deps := connectAndRun(t, ctx, cfg)
	if sum.Completed != 12 || sum.Failed != 1 || sum.Statuses[StatusInvalid] != 1 || sum.Latency == nil {
		t.Fatalf("summary: completed %d, failed %d, statuses %v, latency %v; want 12 complete, 1 invalid", sum.Completed, sum.Failed, sum.Statuses, sum.Latency)
	}
	lines := readReport(t, cfg.Report)
	var runs []Line
	for _, l := range lines {
		if l.Status != StatusInvalid {
			runs = append(runs, l)
		}
	}
	checkShadowAnswers(t, runs)
	// The shadow answers are the live ones (the same model), request by
	// request.
	liveAnswer := map[string]string{}
	for _, ms := range liveTurns {
		for _, m := range ms {
			if m.Role == history.RoleAssistant {
				liveAnswer[m.RequestID] = m.Content
			}
		}
	}
	for _, l := range runs {
		if liveAnswer[l.RequestID] != l.Answer {
			t.Errorf("%s: shadow %q, live %q", l.RequestID, l.Answer, liveAnswer[l.RequestID])
		}
	}
	// The shadow database holds the rebuilt histories; live is as it was;
	// the stream and requests topics got nothing.
	waitTurns(t, ctx, deps.ShadowStore, want)
	if got := waitTurns(t, ctx, live, want); historyText(got) != historyText(liveTurns) {
		t.Errorf("live history changed:\n%s\n%s", historyText(got), historyText(liveTurns))
	}
	if after := e.endOffsets(t, ctx, e.names.Stream); fmt.Sprint(after) != fmt.Sprint(streamBefore) {
		t.Errorf("stream topic moved from %v to %v", streamBefore, after)
	}
	if after := e.endOffsets(t, ctx, e.names.Requests); fmt.Sprint(after) != fmt.Sprint(requestsBefore) {
		t.Errorf("requests topic moved from %v to %v", requestsBefore, after)
	}
}

func TestAnInterruptedShadowReplayResumesAndReportsEveryRecordOnce(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	e := newEnv(t)
	e.conversations(t, ctx, "eve", 20, 10)
	cfg := e.config(ModeShadow, "resume")
	cfg.Concurrency = 4

	runCtx, interrupt := context.WithCancel(ctx)
	var n atomic.Int64
	sum, err := Run(runCtx, cfg, Deps{Model: echoModel(t), afterRecord: func() {
		if n.Add(1) == 70 {
			interrupt()
		}
	}})
	if !errors.Is(err, ErrInterrupted) || sum == nil || !sum.Interrupted {
		t.Fatalf("interrupted run: %v, %+v; want ErrInterrupted", err, sum)
	}
	first := readReport(t, cfg.Report)
	if len(first) < 70 || len(first) >= 200 {
		t.Fatalf("interrupted run reported %d records, want 70..199", len(first))
	}
	cp, err := readCheckpoint(cfg.Checkpoint)
	if err != nil || cp.Complete {
		t.Fatalf("checkpoint after the interrupt: %+v, %v", cp, err)
	}

	// Starting over without -resume is refused; so is resuming with other
	// settings.
	if _, err := Run(ctx, cfg, Deps{Model: echoModel(t)}); !errors.Is(err, ErrCheckpointExists) {
		t.Errorf("a new run over the checkpoint: %v, want ErrCheckpointExists", err)
	}
	other := cfg
	other.Resume, other.Conversation = true, "c1"
	if _, err := Run(ctx, other, Deps{Model: echoModel(t)}); !errors.Is(err, ErrCheckpointMismatch) {
		t.Errorf("resuming with another filter: %v, want ErrCheckpointMismatch", err)
	}

	cfg.Resume = true
	sum, err = Run(ctx, cfg, Deps{Model: echoModel(t)})
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Resumed || sum.Interrupted {
		t.Errorf("resumed run: %+v", sum)
	}
	lines := readReport(t, cfg.Report)
	seen := map[string]int{}
	for _, l := range lines {
		seen[fmt.Sprintf("%d/%d", l.Source.Partition, l.Source.Offset)]++
	}
	if len(lines) != 200 || len(seen) != 200 {
		t.Errorf("report has %d lines for %d records, want 200 for 200", len(lines), len(seen))
	}
	for k, c := range seen {
		if c != 1 {
			t.Errorf("record %s reported %d times", k, c)
		}
	}
	// The histories continued from the report: the k-th message of a
	// conversation is answered "echo #k" on both sides of the interrupt.
	checkShadowAnswers(t, lines)
	if cp, err := readCheckpoint(cfg.Checkpoint); err != nil || !cp.Complete {
		t.Errorf("final checkpoint: complete %v, %v", cp.Complete, err)
	}
	// A complete replay resumed again does nothing.
	if sum, err := Run(ctx, cfg, Deps{Model: echoModel(t)}); err != nil || sum.Selected != 0 {
		t.Errorf("resuming a complete replay: %v, selected %d", err, sum.Selected)
	}
	if got := len(readReport(t, cfg.Report)); got != 200 {
		t.Errorf("report grew to %d lines", got)
	}
}

func TestAnInterruptedRedriveResumesAndPublishesEveryRecordOnce(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	e := newEnv(t)
	e.conversations(t, ctx, "fay", 10, 10)
	cfg := e.config(ModeRedrive, "redrive")
	cfg.RedriveBatch = 7
	live := history.NewMemoryStore()

	runCtx, interrupt := context.WithCancel(ctx)
	var n atomic.Int64
	sum, err := Run(runCtx, cfg, Deps{Decisions: live, afterRecord: func() {
		if n.Add(1) == 30 {
			interrupt()
		}
	}})
	if !errors.Is(err, ErrInterrupted) || !sum.Interrupted {
		t.Fatalf("interrupted run: %v", err)
	}
	cfg.Resume = true
	if _, err := Run(ctx, cfg, Deps{Decisions: live}); err != nil {
		t.Fatal(err)
	}
	cp, err := readCheckpoint(cfg.Checkpoint)
	if err != nil || !cp.Complete {
		t.Fatalf("checkpoint: %+v, %v", cp, err)
	}
	copies := map[string]int{}
	for _, m := range e.readAll(t, ctx, e.names.Requests) {
		if id, ok := header(m, HeaderReplayID); ok {
			if id != cp.ReplayID {
				t.Errorf("copy of replay %q, want %q", id, cp.ReplayID)
			}
			p, _ := header(m, HeaderReplaySourcePartition)
			o, _ := header(m, HeaderReplaySourceOffset)
			copies[p+"/"+o]++
		}
	}
	if len(copies) != 100 {
		t.Errorf("%d records were redriven, want 100", len(copies))
	}
	for k, c := range copies {
		if c != 1 {
			t.Errorf("record %s published %d times", k, c)
		}
	}
	if lines := readReport(t, cfg.Report); len(lines) != 100 {
		t.Errorf("report has %d lines, want 100", len(lines))
	}
}

func TestTheDirectAgentAnswersAsTheWorkersAgentDoes(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	e := newEnv(t)
	contents := []string{"hello there", "cut [[fail-after:2]] short", "[[empty]]", "[[tokens:3]]", "bad [[delay:x]] directive", "again"}
	var msgs []kafka.Message
	for c := range 2 {
		id := events.Identity{Tenant: "acme", User: "jo", Conversation: fmt.Sprintf("c%d", c)}
		for i, s := range contents {
			msgs = append(msgs, request(id, fmt.Sprintf("c%d-%d", c, i), s))
		}
	}
	e.produce(t, ctx, e.names.Requests, msgs...)
	reports := map[string]map[string]Line{}
	for _, kind := range []string{AgentADK, AgentDirect} {
		cfg := e.config(ModeShadow, kind)
		cfg.Agent, cfg.Instruction = kind, "Be brief."
		if _, err := Run(ctx, cfg, Deps{Model: echoModel(t)}); err != nil {
			t.Fatal(err)
		}
		reports[kind] = map[string]Line{}
		for _, l := range readReport(t, cfg.Report) {
			reports[kind][l.RequestID] = l
		}
	}
	if len(reports[AgentADK]) != 12 {
		t.Fatalf("adk report has %d requests, want 12", len(reports[AgentADK]))
	}
	statuses := map[string]bool{}
	for id, a := range reports[AgentADK] {
		d := reports[AgentDirect][id]
		statuses[a.Status] = true
		if a.Status != d.Status || a.Answer != d.Answer || a.Tokens != d.Tokens || (a.Error == "") != (d.Error == "") {
			t.Errorf("%s: adk %s %q %d tokens err %q; direct %s %q %d tokens err %q",
				id, a.Status, a.Answer, a.Tokens, a.Error, d.Status, d.Answer, d.Tokens, d.Error)
		}
	}
	for _, st := range []string{"complete", "incomplete", "discarded", "failed"} {
		if !statuses[st] {
			t.Errorf("no request ended %s: the comparison misses a case (%v)", st, statuses)
		}
	}
}
