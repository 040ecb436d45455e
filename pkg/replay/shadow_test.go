package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/adk/prebuilt/supervisor"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"
	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
	"github.com/turnpike-dev/turnpike/pkg/worker"
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
			batch = append(batch, testenv.Request(id, fmt.Sprintf("c%d-m%d", i, j), fmt.Sprintf("m%d", j)))
		}
	}
	testenv.Produce(t, ctx, e.brokers, e.names.Requests, batch...)
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
func checkShadowAnswers(t *testing.T, lines []reportLine) {
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
	testenv.Produce(t, ctx, e.brokers, e.names.Requests, kafka.Message{Key: []byte("acme/dee/c0"), Value: []byte(`{"not":"a request"}`)})
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

	cfg := e.config(modeShadow, "shadow")
	cfg.MongoURI, cfg.MongoDB = uri, liveDB
	cfg.ShadowMongoDB = liveDB
	if _, _, err := connect(ctx, cfg, io.Discard, nil); err == nil || !strings.Contains(err.Error(), "live database") {
		t.Fatalf("a shadow database named like the live one: %v, want a refusal", err)
	}
	cfg.ShadowMongoDB = testenv.Name(t, "shadow")
	sum, deps := connectAndRun(t, ctx, cfg)
	if sum.Completed != 12 || sum.Failed != 1 || sum.Statuses[statusInvalid] != 1 || sum.Latency == nil {
		t.Fatalf("summary: completed %d, failed %d, statuses %v, latency %v; want 12 complete, 1 invalid", sum.Completed, sum.Failed, sum.Statuses, sum.Latency)
	}
	lines := readReport(t, cfg.Report)
	var runs []reportLine
	for _, l := range lines {
		if l.Status != statusInvalid {
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
	cfg := e.config(modeShadow, "resume")
	cfg.Concurrency = 4

	runCtx, interrupt := context.WithCancel(ctx)
	var n atomic.Int64
	sum, err := runReplay(runCtx, cfg, deps{afterRecord: func() {
		if n.Add(1) == 70 {
			interrupt()
		}
	}})
	if !errors.Is(err, errInterrupted) || sum == nil || !sum.Interrupted {
		t.Fatalf("interrupted run: %v, %+v; want ErrInterrupted", err, sum)
	}
	// The interrupt came as the 70th record was done: the runners start no
	// record after it, and only those already running (one a runner, the
	// others) still finish. No timing decides how many.
	first := readReport(t, cfg.Report)
	if most := 70 + cfg.Concurrency - 1; len(first) < 70 || len(first) > most {
		t.Fatalf("interrupted run reported %d records, want 70..%d", len(first), most)
	}
	cp, err := readCheckpoint(cfg.Checkpoint)
	if err != nil || cp.Complete {
		t.Fatalf("checkpoint after the interrupt: %+v, %v", cp, err)
	}

	// Starting over without -resume is refused; so is resuming with other
	// settings.
	if _, err := runReplay(ctx, cfg, deps{}); !errors.Is(err, errCheckpointExists) {
		t.Errorf("a new run over the checkpoint: %v, want ErrCheckpointExists", err)
	}
	other := cfg
	other.Resume, other.Conversation = true, "c1"
	if _, err := runReplay(ctx, other, deps{}); !errors.Is(err, errCheckpointMismatch) {
		t.Errorf("resuming with another filter: %v, want ErrCheckpointMismatch", err)
	}

	cfg.Resume = true
	sum, err = runReplay(ctx, cfg, deps{})
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
	if sum, err := runReplay(ctx, cfg, deps{}); err != nil || sum.Selected != 0 {
		t.Errorf("resuming a complete replay: %v, selected %d", err, sum.Selected)
	}
	if got := len(readReport(t, cfg.Report)); got != 200 {
		t.Errorf("report grew to %d lines", got)
	}
}

// heldStep holds each run until release is closed, then runs step.
type heldStep struct {
	step    stepRunner
	release <-chan struct{}
}

func (h heldStep) Run(ctx context.Context, req events.Request, store history.Store, sink bridge.Sink) (bridge.Result, error) {
	select {
	case <-h.release:
	case <-ctx.Done():
		return bridge.Result{}, ctx.Err()
	}
	return h.step.Run(ctx, req, store, sink)
}

// After an interrupt the runners start no record queued behind its
// conversation's running one. The first run is held until the reader has
// queued all of the conversation's records, so that the interrupt finds
// them queued whatever the timing; the conversation's records run one at a
// time, so the interrupt at the fifth leaves exactly five reported.
func TestAnInterruptedShadowReplayStartsNoQueuedRecord(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	e := newEnv(t)
	const msgs, at = 20, 5
	e.conversations(t, ctx, "ivy", 1, msgs)
	cfg := e.config(modeShadow, "queued")
	// The reader queues all 20 without waiting (MaxInflight is 4096), and
	// the runner's next record, should it start, finishes within the drain.
	cfg.DrainTimeout = time.Minute
	step, err := newStep(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	allQueued := make(chan struct{})
	var queued, done atomic.Int64
	runCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	_, err = runReplay(runCtx, cfg, deps{
		Step: heldStep{step: step, release: allQueued},
		afterDispatch: func() {
			if queued.Add(1) == msgs {
				close(allQueued)
			}
		},
		afterRecord: func() {
			if done.Add(1) == at {
				interrupt()
			}
		},
	})
	if !errors.Is(err, errInterrupted) {
		t.Fatalf("interrupted run: %v, want ErrInterrupted", err)
	}
	if got := len(readReport(t, cfg.Report)); got != at {
		t.Errorf("the interrupt at record %d of %d queued: %d reported, want %d", at, msgs, got, at)
	}
}

func TestAnInterruptedRedriveResumesAndPublishesEveryRecordOnce(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	e := newEnv(t)
	e.conversations(t, ctx, "fay", 10, 10)
	cfg := e.config(modeRedrive, "redrive")
	cfg.RedriveBatch = 7
	live := history.NewMemoryStore()

	runCtx, interrupt := context.WithCancel(ctx)
	var n atomic.Int64
	sum, err := runReplay(runCtx, cfg, deps{Decisions: live, afterRecord: func() {
		if n.Add(1) == 30 {
			interrupt()
		}
	}})
	if !errors.Is(err, errInterrupted) || !sum.Interrupted {
		t.Fatalf("interrupted run: %v", err)
	}
	cfg.Resume = true
	if _, err := runReplay(ctx, cfg, deps{Decisions: live}); err != nil {
		t.Fatal(err)
	}
	cp, err := readCheckpoint(cfg.Checkpoint)
	if err != nil || !cp.Complete {
		t.Fatalf("checkpoint: %+v, %v", cp, err)
	}
	copies := map[string]int{}
	for _, m := range e.readAll(t, ctx, e.names.Requests) {
		if id, ok := header(m, headerReplayID); ok {
			if id != cp.ReplayID {
				t.Errorf("copy of replay %q, want %q", id, cp.ReplayID)
			}
			p, _ := header(m, headerReplaySourcePartition)
			o, _ := header(m, headerReplaySourceOffset)
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
			msgs = append(msgs, testenv.Request(id, fmt.Sprintf("c%d-%d", c, i), s))
		}
	}
	testenv.Produce(t, ctx, e.brokers, e.names.Requests, msgs...)
	reports := map[string]map[string]reportLine{}
	for _, kind := range []string{agentADK, agentDirect} {
		cfg := e.config(modeShadow, kind)
		cfg.Agent, cfg.Instruction = kind, "Be brief."
		if _, err := runReplay(ctx, cfg, deps{}); err != nil {
			t.Fatal(err)
		}
		reports[kind] = map[string]reportLine{}
		for _, l := range readReport(t, cfg.Report) {
			reports[kind][l.RequestID] = l
		}
	}
	if len(reports[agentADK]) != 12 {
		t.Fatalf("adk report has %d requests, want 12", len(reports[agentADK]))
	}
	statuses := map[string]bool{}
	for id, a := range reports[agentADK] {
		d := reports[agentDirect][id]
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

// windowModel answers with the window it was given, so that two runs
// answer alike only if they saw the same window: "seen" and each message
// as role:text. A user message asking to book is answered by asking the
// user (ask_user: the run is interrupted), and the tool's result, once
// resumed, by "booked for <answer>".
type windowModel struct{}

func (windowModel) Generate(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	last := in[len(in)-1]
	switch {
	case last.Role == schema.Tool:
		return schema.AssistantMessage("booked for "+last.Content, nil), nil
	case last.Role == schema.User && strings.Contains(last.Content, "book"):
		return schema.AssistantMessage("", []schema.ToolCall{{ID: "call-ask", Type: "function",
			Function: schema.FunctionCall{Name: "ask_user", Arguments: `{"question":"For how many?"}`}}}), nil
	}
	parts := make([]string, 0, len(in))
	for _, m := range in {
		parts = append(parts, string(m.Role)[:1]+":"+m.Content)
	}
	return schema.AssistantMessage("seen "+strings.Join(parts, " | "), nil), nil
}

func (w windowModel) Stream(ctx context.Context, in []*schema.Message, opts ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	m, err := w.Generate(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	return schema.StreamReaderFromArray([]*schema.Message{m}), nil
}

func (w windowModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return w, nil }

// summaryModel condenses a conversation into the count of its messages
// and their first words.
type summaryModel struct{}

func (summaryModel) Generate(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	var words []string
	for _, m := range in {
		if f := strings.Fields(m.Content); len(f) > 0 {
			words = append(words, f[0])
		}
	}
	return schema.AssistantMessage(fmt.Sprintf("%d messages: %s", len(in), strings.Join(words, " ")), nil), nil
}

func (s summaryModel) Stream(ctx context.Context, in []*schema.Message, opts ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	m, err := s.Generate(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	return schema.StreamReaderFromArray([]*schema.Message{m}), nil
}

// persisted is a stored message by the fields both stores must agree on
// (not the times).
func persisted(m history.Message) string {
	s := fmt.Sprintf("%d %s %s %q agent=%s status=%s", m.Seq, m.Role, m.RequestID, m.Content, m.Agent, m.Status)
	if m.Interrupt != nil {
		s += fmt.Sprintf(" interrupt=%s/%s %q", m.Interrupt.Agent, m.Interrupt.Tool, m.Interrupt.Question)
	}
	return s
}

// A shadow replay runs the worker's own run step: one conversation with
// an interrupt, its resume, a message whose window holds the interrupted
// answer's question, and compactions, run live by the worker (kfake,
// FerretDB) and then replayed in shadow from the requests topic into
// another database, ends with the same stored messages (status, agent,
// interrupt), the same summaries, and a report whose every line is what
// the worker persisted for that request.
func TestAShadowReplayReportsWhatTheWorkerPersisted(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 90*time.Second)
	e := newEnv(t)
	uri := testenv.MongoURI(t)
	client := testenv.MongoClient(t, uri)
	liveDB, shadowDB := testenv.Name(t, "live"), testenv.Name(t, "shadow")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Database(liveDB).Drop(ctx)
		_ = client.Database(shadowDB).Drop(ctx)
	})
	live, err := history.NewMongoStore(ctx, client.Database(liveDB), history.MongoConfig{})
	if err != nil {
		t.Fatal(err)
	}
	const window, compactTokens, compactKeep = 6, 60, 2
	agent := []worker.Option{
		worker.WithAgentFactory(func(ctx context.Context, r worker.Request) (adk.Agent, error) {
			if r.RequestID == teamRequest {
				return deskAndOrders(ctx)
			}
			return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "concierge", Description: "books tables", Model: windowModel{},
				ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{worker.AskUser()}}}})
		}),
		worker.WithSummarizer(summaryModel{}),
	}

	id := events.Identity{Tenant: "acme", User: "ivy", Conversation: "dinner"}
	// r9 is answered by a supervisor and its sub-agent: two assistant
	// messages.
	contents := []string{"hello there", "book a table", "four", "what comes next", "and then", "tell me more", "one more thing", "last one", "ask the team"}
	var msgs []kafka.Message
	for i, c := range contents {
		r := events.Request{V: 1, RequestID: fmt.Sprintf("r%d", i+1), Tenant: id.Tenant, User: id.User, Conversation: id.Conversation, Content: c}
		if c == "four" {
			r.ResumeOf = "r2" // the answer to the interrupt of "book a table"
		}
		b, err := events.EncodeRequest(r)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Key: []byte(id.Key()), Value: b})
	}
	testenv.Produce(t, ctx, e.brokers, e.names.Requests, msgs...)

	stop := e.startWorkerWith(t, ctx, live, func(c *worker.Config) {
		c.WindowMessages, c.CompactTokens, c.CompactKeep = window, compactTokens, compactKeep
	}, agent...)
	liveMsgs := waitTurns(t, ctx, live, map[events.Identity]int{id: len(contents)})[id]
	stop()

	// The conversation has what the test is about: an interrupt, a window
	// that holds its question, and a summary.
	var interrupted, questionSeen bool
	for _, m := range liveMsgs {
		interrupted = interrupted || (m.Status == events.StatusInterrupted && m.Interrupt != nil && m.Interrupt.Question == "For how many?")
		questionSeen = questionSeen || (m.RequestID == "r4" && m.Role == history.RoleAssistant && strings.Contains(m.Content, "a:For how many?"))
	}
	liveSum, found, err := live.Summary(ctx, id)
	if err != nil || !found || !interrupted || !questionSeen {
		t.Fatalf("the live conversation lacks an interrupt (%v), its question in a window (%v) or a summary (%v, %v):\n%s",
			interrupted, questionSeen, found, err, strings.Join(mapSlice(liveMsgs, persisted), "\n"))
	}

	report := filepath.Join(e.dir, "equivalence.jsonl")
	args := []string{"-mode", "shadow", "-kafka-brokers", strings.Join(e.brokers, ","), "-topic-prefix", e.prefix,
		"-mongo-uri", uri, "-mongo-db", liveDB, "-shadow-mongo-db", shadowDB, "-report", report,
		"-window", fmt.Sprint(window), "-compact-tokens", fmt.Sprint(compactTokens), "-compact-keep", fmt.Sprint(compactKeep)}
	var stdout, stderr strings.Builder
	if code := MainArgs(args, func(string) (string, bool) { return "", false }, &stdout, &stderr, agent...); code != 0 {
		t.Fatalf("replay exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}

	shadow, err := history.NewMongoStore(ctx, client.Database(shadowDB), history.MongoConfig{})
	if err != nil {
		t.Fatal(err)
	}
	page, err := shadow.List(ctx, id, 0, history.MaxListLimit)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(mapSlice(page.Messages, persisted), "\n"), strings.Join(mapSlice(liveMsgs, persisted), "\n"); got != want {
		t.Errorf("the shadow store holds\n%s\nthe worker persisted\n%s", got, want)
	}
	if sum, found, err := shadow.Summary(ctx, id); err != nil || !found || sum.Through != liveSum.Through || sum.Text != liveSum.Text {
		t.Errorf("the shadow summary %+v (%v, %v), the worker's %+v", sum, found, err, liveSum)
	}

	// Each line: the answer as the worker persisted it, one part per
	// assistant message (a line of one part has none: answer and agent).
	answers := map[string][]history.Message{}
	for _, m := range liveMsgs {
		if m.Role == history.RoleAssistant {
			answers[m.RequestID] = append(answers[m.RequestID], m)
		}
	}
	if n := len(answers[teamRequest]); n != 2 {
		t.Fatalf("the worker persisted %d assistant messages for %s, want the sub-agent's and the supervisor's", n, teamRequest)
	}
	lines := readReport(t, report)
	if len(lines) != len(contents) {
		t.Fatalf("the report has %d lines, want %d", len(lines), len(contents))
	}
	for i, l := range lines {
		ws := answers[l.RequestID]
		w := ws[len(ws)-1]
		var want, got []string
		joined := ""
		for _, m := range ws {
			want = append(want, m.Agent+": "+m.Content)
			joined += m.Content
		}
		for _, p := range l.Parts {
			got = append(got, p.Agent+": "+p.Text)
		}
		if len(l.Parts) == 0 {
			got = []string{l.Agent + ": " + l.Answer}
		}
		if l.RequestID != fmt.Sprintf("r%d", i+1) || l.Content != contents[i] || l.Status != string(w.Status) ||
			!slices.Equal(got, want) || l.Answer != joined || l.Agent != w.Agent {
			t.Errorf("report line %d: %s %q: %s, parts %q, answer %q by %q; the worker persisted %s %q",
				i, l.RequestID, l.Content, l.Status, got, l.Answer, l.Agent, w.Status, want)
		}
	}
}

// teamRequest is the request of TestAShadowReplayReportsWhatTheWorkerPersisted
// that deskAndOrders answers.
const teamRequest = "r9"

// deskAndOrders is a supervisor "desk" that hands the question to its
// sub-agent "orders", which answers, and then answers too.
func deskAndOrders(ctx context.Context) (adk.Agent, error) {
	desk, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "desk", Description: "routes questions", Instruction: "Route.",
		Model: replyModel(func(in []*schema.Message) *schema.Message {
			for _, m := range in {
				if strings.Contains(m.Content, "[orders] said:") {
					return schema.AssistantMessage("The team says it shipped.", nil)
				}
			}
			return schema.AssistantMessage("", []schema.ToolCall{{ID: "call-transfer", Type: "function",
				Function: schema.FunctionCall{Name: "transfer_to_agent", Arguments: `{"agent_name":"orders"}`}}})
		})})
	if err != nil {
		return nil, err
	}
	orders, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "orders", Description: "knows orders", Instruction: "Answer.",
		Model: replyModel(func([]*schema.Message) *schema.Message { return schema.AssistantMessage("ORD-7 shipped. ", nil) })})
	if err != nil {
		return nil, err
	}
	return supervisor.New(ctx, &supervisor.Config{Supervisor: desk, SubAgents: []adk.Agent{orders}})
}

// replyModel answers every call with its function of the input.
type replyModel func(in []*schema.Message) *schema.Message

func (f replyModel) Generate(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	return f(in), nil
}

func (f replyModel) Stream(_ context.Context, in []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	return schema.StreamReaderFromArray([]*schema.Message{f(in)}), nil
}

func (f replyModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return f, nil }

// mapSlice applies f to each element of s.
func mapSlice[T, U any](s []T, f func(T) U) []U {
	out := make([]U, 0, len(s))
	for _, v := range s {
		out = append(out, f(v))
	}
	return out
}

// A resumed shadow replay rebuilds its in-memory history from the report:
// a turn of several agents as the worker persisted it (one assistant
// message per part), and a line written before parts (answer and agent
// only) as one message, seqs following on.
func TestAResumedShadowReplayRebuildsTurnsOfSeveralPartsFromTheReport(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 10*time.Second)
	path := filepath.Join(t.TempDir(), "seed.jsonl")
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	lineOf := func(rid, content string) reportLine {
		return reportLine{Source: coordinates{Topic: "requests", Time: at}, Key: "acme/ivy/c", Tenant: "acme", User: "ivy", Conversation: "c",
			RequestID: rid, Content: content, Status: string(events.StatusComplete)}
	}
	team := lineOf("r1", "ask the team")
	team.Answer, team.Agent = "ORD-7 shipped. The team says it shipped.", "desk"
	team.Parts = reportParts([]history.Part{{Agent: "orders", Text: "ORD-7 shipped. "}, {Agent: "desk", Text: "The team says it shipped."}})
	single := lineOf("r2", "thanks")
	single.Answer, single.Agent = "You are welcome.", "desk"
	rep, err := openReport(path, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []reportLine{team, single} {
		if err := rep.write(&l); err != nil {
			t.Fatal(err)
		}
	}
	// A line of a report written before parts.
	if _, err := rep.w.WriteString(`{"source":{"topic":"requests","partition":0,"offset":3,"time":"2026-12-01T10:00:00Z"},"key":"acme/ivy/c",` +
		`"tenant":"acme","user":"ivy","conversation":"c","request_id":"r3","status":"complete","content":"and?","answer":"Old joined answer.","agent":"desk"}` + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := rep.close(); err != nil {
		t.Fatal(err)
	}
	var lines []reportLine
	rep, err = openReport(path, true, func(l reportLine) error {
		if sl, ok := seedLine(l); ok {
			lines = append(lines, sl)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rep.close() })
	store := history.NewMemoryStore()
	if err := seed(ctx, store, lines); err != nil {
		t.Fatal(err)
	}
	page, err := store.List(ctx, events.Identity{Tenant: "acme", User: "ivy", Conversation: "c"}, 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range page.Messages {
		got = append(got, fmt.Sprintf("%d %s %s: %s", m.Seq, m.Role, m.Agent, m.Content))
	}
	want := []string{"1 user : ask the team", "2 assistant orders: ORD-7 shipped. ", "3 assistant desk: The team says it shipped.",
		"4 user : thanks", "5 assistant desk: You are welcome.", "6 user : and?", "7 assistant desk: Old joined answer."}
	if !slices.Equal(got, want) {
		t.Errorf("the rebuilt history\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// prefsTool is a tool on the run's session state: it reports the
// conversation's "topic" and the user's "user:lang" as it found them,
// then sets those given as "set topic=… lang=…" in its arguments.
type prefsTool struct{}

func (prefsTool) Info(context.Context) (*schema.ToolInfo, error) {
	return &schema.ToolInfo{Name: "prefs", Desc: "remembers the topic and the language"}, nil
}

func (prefsTool) InvokableRun(ctx context.Context, args string, _ ...tool.Option) (string, error) {
	st := worker.StateFromContext(ctx)
	var topic, lang string
	if _, err := st.Get(ctx, "topic", &topic); err != nil {
		return "", err
	}
	if _, err := st.Get(ctx, worker.UserPrefix+"lang", &lang); err != nil {
		return "", err
	}
	if rest, ok := strings.CutPrefix(args, "set "); ok {
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			if k == "lang" {
				k = worker.UserPrefix + k
			}
			if err := st.Set(k, v); err != nil {
				return "", err
			}
		}
	}
	return fmt.Sprintf("topic=%s lang=%s", topic, lang), nil
}

// prefsAgent calls prefs with the user's message, then answers with what
// it said.
func prefsAgent(ctx context.Context, _ worker.Request) (adk.Agent, error) {
	m := replyModel(func(in []*schema.Message) *schema.Message {
		last := in[len(in)-1]
		if last.Role == schema.Tool {
			return schema.AssistantMessage("I knew "+last.Content, nil)
		}
		return schema.AssistantMessage("", []schema.ToolCall{{ID: "call-prefs", Type: "function",
			Function: schema.FunctionCall{Name: "prefs", Arguments: last.Content}}})
	})
	return adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "assistant", Description: "remembers", Model: m,
		ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{Tools: []tool.BaseTool{prefsTool{}}}}})
}

// A shadow replay restores the session state each request saw: a
// conversation whose turns 2 and 3 answer from the state turn 1 set (its
// own key and a user: key), run live and then replayed in shadow, gives
// each request the answer the worker persisted.
func TestAShadowReplayRestoresTheStateEachRequestSaw(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 60*time.Second)
	e := newEnv(t)
	id := events.Identity{Tenant: "acme", User: "ivy", Conversation: "prefs"}
	contents := []string{"set topic=trains lang=fr", "what do you know?", "set topic=boats"}
	var msgs []kafka.Message
	for i, c := range contents {
		msgs = append(msgs, testenv.Request(id, fmt.Sprintf("s%d", i+1), c))
	}
	testenv.Produce(t, ctx, e.brokers, e.names.Requests, msgs...)
	live := history.NewMemoryStore()
	stop := e.startWorkerWith(t, ctx, live, nil, worker.WithAgentFactory(prefsAgent))
	liveMsgs := waitTurns(t, ctx, live, map[events.Identity]int{id: len(contents)})[id]
	stop()
	persisted := map[string]string{}
	for _, m := range liveMsgs {
		if m.Role == history.RoleAssistant {
			persisted[m.RequestID] = m.Content
		}
	}
	// What the test is about: the worker's turn 2 read turn 1's state.
	if got := persisted["s2"]; got != "I knew topic=trains lang=fr" {
		t.Fatalf("the worker answered turn 2 %q, want it from the state turn 1 set", got)
	}

	cfg := e.config(modeShadow, "state")
	deps, closeDeps, err := connect(ctx, cfg, io.Discard, []worker.Option{worker.WithAgentFactory(prefsAgent)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeDeps)
	if _, err := runReplay(ctx, cfg, deps); err != nil {
		t.Fatal(err)
	}
	lines := readReport(t, cfg.Report)
	if len(lines) != len(contents) {
		t.Fatalf("the report has %d lines, want %d", len(lines), len(contents))
	}
	for _, l := range lines {
		if l.Status != string(events.StatusComplete) || l.Answer != persisted[l.RequestID] {
			t.Errorf("%s %q: the shadow replay answered %q (%s), the worker persisted %q", l.RequestID, l.Content, l.Answer, l.Status, persisted[l.RequestID])
		}
	}
}
