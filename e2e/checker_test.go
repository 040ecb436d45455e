package e2e

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/embedded"
	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// The checker reads everything a client sees of a load — every
// conversation's history and the whole stream topic — and counts
// violations of the pipeline's promises (docs/api.md, "Runs and
// completions", states the stream's): each message persisted once, in
// order, with its answer; each request completed at least once, every
// completion with the status persisted, the last run of a request whole
// (seqs 1…n, run.started to run.completed, or a lone run.completed
// re-announcing a decided request, after the artifact.saved of its turn's
// artifacts if any), and nothing of a request after its
// last completion.
//
// It also counts the evidence that a fault exercised recovery: runs
// superseded by a re-run (a new run id) and completions re-announced by a
// redelivery.

// verdict counts invariant violations and recovery evidence.
type verdict struct {
	// History.
	lost, duplicate, dangling, outOfOrder, wrong int
	// Stream topic.
	uncompleted   int // a persisted request with no run.completed
	conflicting   int // a run.completed whose status is not the persisted one
	brokenRun     int // the last run of a request is not whole
	afterFinal    int // an event of a request after its last run.completed
	streamOrder   int // a conversation's requests streamed out of order
	stray         int // an event of a request history does not know, or undecodable
	runIDReused   int // one run id on two requests
	seqRegression int // a seq a run already used or skipped, other than an exact repeat

	// Evidence of recovery.
	reruns       int // runs that started, never completed and were superseded by a later run
	redeliveries int // run.completed beyond the first of a request
	repeats      int // events written twice (same run, same seq)

	detail []string
}

func (v *verdict) note(s string, args ...any) {
	if len(v.detail) < 8 {
		v.detail = append(v.detail, fmt.Sprintf(s, args...))
	}
}

func (v *verdict) violations() int {
	return v.lost + v.duplicate + v.dangling + v.outOfOrder + v.wrong +
		v.uncompleted + v.conflicting + v.brokenRun + v.afterFinal + v.streamOrder + v.stray + v.runIDReused + v.seqRegression
}

func (v *verdict) ok() bool { return v.violations() == 0 }

// counts is every count of v, for comparisons.
func (v *verdict) counts() [16]int {
	return [16]int{v.lost, v.duplicate, v.dangling, v.outOfOrder, v.wrong,
		v.uncompleted, v.conflicting, v.brokenRun, v.afterFinal, v.streamOrder, v.stray, v.runIDReused, v.seqRegression,
		v.reruns, v.redeliveries, v.repeats}
}

func (v *verdict) String() string {
	return fmt.Sprintf("history: lost %d, duplicate %d, dangling %d, out of order %d, wrong %d; "+
		"stream: uncompleted %d, conflicting %d, broken last run %d, after final %d, order %d, stray %d, run id reused %d, seq regression %d; "+
		"evidence: re-runs %d, redeliveries %d, repeats %d; %s",
		v.lost, v.duplicate, v.dangling, v.outOfOrder, v.wrong,
		v.uncompleted, v.conflicting, v.brokenRun, v.afterFinal, v.streamOrder, v.stray, v.runIDReused, v.seqRegression,
		v.reruns, v.redeliveries, v.repeats, strings.Join(v.detail, "; "))
}

// persisted is what history holds of one request.
type persisted struct {
	id     events.Identity
	j      int // the message's marker
	status events.Status
}

// check reads every conversation's history and counts violations; it
// returns what each request id persisted, for checkStream.
func check(ctx context.Context, store history.Store, l load) (*verdict, map[string]persisted, error) {
	v := &verdict{}
	reqs := map[string]persisted{}
	for i := 1; i <= l.convs; i++ {
		id := l.id(i)
		page, err := store.List(ctx, id, 0, 200)
		if errors.Is(err, history.ErrNotFound) {
			v.lost += l.msgs
			v.note("%s: nothing persisted", id)
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		checkHistory(v, reqs, id, page.Messages, l.msgs)
	}
	return v, reqs, nil
}

// checkHistory checks one conversation's messages: msgs questions m1…mN,
// each once, in order, each followed by its complete answer.
func checkHistory(v *verdict, reqs map[string]persisted, id events.Identity, messages []history.Message, msgs int) {
	seen := map[int]int{}
	last := 0
	for k := 0; k < len(messages); k++ {
		u := messages[k]
		if u.Role != history.RoleUser {
			v.dangling++
			v.note("%s: message %d is an answer without its question", id, u.Seq)
			continue
		}
		if k+1 >= len(messages) || messages[k+1].Role != history.RoleAssistant || messages[k+1].RequestID != u.RequestID {
			v.dangling++
			v.note("%s: question %d has no answer", id, u.Seq)
			continue
		}
		a := messages[k+1]
		k++
		var j int
		if _, err := fmt.Sscanf(u.Content, "m%d", &j); err != nil {
			v.wrong++
			v.note("%s: question %q has no marker", id, u.Content)
			continue
		}
		// Messages are told apart by their marker: a request may come
		// with its own id, an idempotency key's or a derived one.
		seen[j]++
		if seen[j] > 1 {
			v.duplicate++
			v.note("%s: m%d persisted twice", id, j)
		}
		if j <= last {
			v.outOfOrder++
			v.note("%s: m%d after m%d", id, j, last)
		}
		last = max(last, j)
		if a.Content != "w1 w2 w3 w4 w5" || a.Status != events.StatusComplete {
			v.wrong++
			v.note("%s: m%d answered %q (%s)", id, j, a.Content, a.Status)
		}
		reqs[u.RequestID] = persisted{id: id, j: j, status: a.Status}
	}
	for j := 1; j <= msgs; j++ {
		if seen[j] == 0 {
			v.lost++
			v.note("%s: m%d lost", id, j)
		}
	}
}

// streamRecord is one record of the stream topic; ev is nil when it did
// not decode.
type streamRecord struct {
	partition int
	offset    int64
	ev        events.Event
	raw       []byte
}

// readStream reads every partition of topic from its first record to its
// end as of the call.
func readStream(ctx context.Context, broker, topic string) ([]streamRecord, error) {
	conn, err := kafka.DialContext(ctx, "tcp", broker)
	if err != nil {
		return nil, err
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	var out []streamRecord
	for _, p := range parts {
		msgs, err := readPartition(ctx, broker, topic, p.ID)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			e, err := events.DecodeEvent(m.Value)
			if err != nil {
				e = nil
			}
			out = append(out, streamRecord{partition: p.ID, offset: m.Offset, ev: e, raw: m.Value})
		}
	}
	return out, nil
}

// readPartition reads one partition of topic from its first record to its
// end as of the call.
func readPartition(ctx context.Context, broker, topic string, partition int) ([]kafka.Message, error) {
	conn, err := kafka.DialLeader(ctx, "tcp", broker, topic, partition)
	if err != nil {
		return nil, err
	}
	first, last, err := conn.ReadOffsets()
	conn.Close()
	if err != nil {
		return nil, fmt.Errorf("offsets of %s/%d: %w", topic, partition, err)
	}
	if first >= last {
		return nil, nil
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{broker}, Topic: topic, Partition: partition, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	if err := r.SetOffset(first); err != nil {
		return nil, err
	}
	var out []kafka.Message
	for {
		m, err := r.ReadMessage(ctx) // a reader without a group commits nothing
		if err != nil {
			return nil, fmt.Errorf("read %s/%d: %w", topic, partition, err)
		}
		out = append(out, m)
		if m.Offset >= last-1 {
			return out, nil
		}
	}
}

// runTrace is what the stream showed of one run.
type runTrace struct {
	id        string
	maxSeq    int64
	seqs      []int64          // first occurrences, in stream order
	events    map[int64]string // the encoding of each seq's first occurrence
	started   bool
	completed bool
	// others counts its events other than run.started, run.completed and
	// artifact.saved: a re-announcement has none.
	others int
}

// requestTrace is what the stream showed of one request.
type requestTrace struct {
	runs      map[string]*runTrace
	runOrder  []string
	first     int // position of its first event
	lastDone  int // position of its last run.completed, -1 if none
	finalRun  string
	lastEvent int // position of its last event
	// lastNew is the position of its last event other than an exact
	// repeat of an event already seen.
	lastNew     int
	completions int
}

// checkStream checks the stream topic's records against what history
// persisted (reqs, from check) and adds to v.
func checkStream(v *verdict, recs []streamRecord, reqs map[string]persisted) {
	traces := map[string]*requestTrace{}
	runOwner := map[string]string{}
	// Records of one partition are in order; partitions are independent,
	// and a conversation lives in one.
	sort.SliceStable(recs, func(a, b int) bool {
		if recs[a].partition != recs[b].partition {
			return recs[a].partition < recs[b].partition
		}
		return recs[a].offset < recs[b].offset
	})
	for pos, rec := range recs {
		if rec.ev == nil {
			v.stray++
			v.note("stream record %d/%d does not decode: %.80s", rec.partition, rec.offset, rec.raw)
			continue
		}
		h := rec.ev.Header()
		want, known := reqs[h.RequestID]
		if !known || want.id.Conversation != h.Conversation {
			v.stray++
			v.note("stream event of unknown request %s (%s)", h.RequestID, h.Conversation)
			continue
		}
		if owner, ok := runOwner[h.RunID]; ok && owner != h.RequestID {
			v.runIDReused++
			v.note("run %s carries requests %s and %s", h.RunID, owner, h.RequestID)
		}
		runOwner[h.RunID] = h.RequestID
		tr := traces[h.RequestID]
		if tr == nil {
			tr = &requestTrace{runs: map[string]*runTrace{}, first: pos, lastDone: -1}
			traces[h.RequestID] = tr
		}
		tr.lastEvent = pos
		run := tr.runs[h.RunID]
		if run == nil {
			run = &runTrace{id: h.RunID, events: map[int64]string{}}
			tr.runs[h.RunID] = run
			tr.runOrder = append(tr.runOrder, h.RunID)
		}
		enc := string(events.AppendEvent(nil, rec.ev))
		if h.Seq <= run.maxSeq {
			if run.events[h.Seq] == enc {
				v.repeats++ // a writer's retry; clients drop seqs they saw
			} else {
				// Another event under a seq the run already used (or
				// skipped): clients would drop it.
				v.seqRegression++
				v.note("%s run %s: seq %d after %d", h.RequestID, h.RunID, h.Seq, run.maxSeq)
			}
			continue
		}
		tr.lastNew = pos
		run.maxSeq = h.Seq
		run.seqs = append(run.seqs, h.Seq)
		run.events[h.Seq] = enc
		switch e := rec.ev.(type) {
		case *events.ArtifactSavedEvent:
			// A re-announcement announces its turn's artifacts again.
		case *events.RunStartedEvent:
			run.started = true
		case *events.RunCompletedEvent:
			run.completed = true
			tr.completions++
			tr.lastDone, tr.finalRun = pos, h.RunID
			if e.Status != want.status {
				v.conflicting++
				v.note("%s run %s completed %s, persisted %s", h.RequestID, h.RunID, e.Status, want.status)
			}
		default:
			run.others++
		}
	}
	byConv := map[string][]string{}
	for reqID, want := range reqs {
		tr := traces[reqID]
		if tr == nil || tr.lastDone < 0 {
			v.uncompleted++
			v.note("%s (%s m%d): no run.completed", reqID, want.id.Conversation, want.j)
			continue
		}
		byConv[want.id.Key()] = append(byConv[want.id.Key()], reqID)
		v.redeliveries += tr.completions - 1
		if tr.lastNew > tr.lastDone {
			v.afterFinal++
			v.note("%s: events after its last run.completed", reqID)
		}
		for _, id := range tr.runOrder {
			if r := tr.runs[id]; id != tr.finalRun && r.started && !r.completed {
				v.reruns++
			}
		}
		final := tr.runs[tr.finalRun]
		// A re-announcement of a decided request is a lone run.completed,
		// after its turn's artifact.saved when it saved artifacts.
		whole := final.seqs[0] == 1 && int64(len(final.seqs)) == final.maxSeq &&
			(final.started || final.others == 0)
		if !whole {
			v.brokenRun++
			v.note("%s: last run %s has seqs %v (started %v)", reqID, final.id, final.seqs, final.started)
		}
	}
	// A conversation's requests first appear, and finally complete, in
	// message order.
	for _, ids := range byConv {
		sort.Slice(ids, func(a, b int) bool { return reqs[ids[a]].j < reqs[ids[b]].j })
		for k := 1; k < len(ids); k++ {
			prev, cur := traces[ids[k-1]], traces[ids[k]]
			if cur.first < prev.first || cur.lastDone < prev.lastDone {
				v.streamOrder++
				v.note("%s m%d streamed before m%d", reqs[ids[k]].id, reqs[ids[k]].j, reqs[ids[k-1]].j)
			}
		}
	}
}

// The checker itself must be able to fail: every kind of violation is
// planted once, next to a conversation that is right.
func TestTheInvariantCheckerCountsEveryKindOfViolation(t *testing.T) {
	t.Parallel()
	id := func(c string) events.Identity { return events.Identity{Tenant: "acme", User: "check", Conversation: c} }
	q := func(seq int64, req string, j int) history.Message {
		return history.Message{Seq: seq, Role: history.RoleUser, RequestID: req, Content: fmt.Sprintf("m%d [[tokens:5]]", j)}
	}
	a := func(seq int64, req, text string) history.Message {
		return history.Message{Seq: seq, Role: history.RoleAssistant, RequestID: req, Content: text, Status: events.StatusComplete}
	}
	const ok = "w1 w2 w3 w4 w5"
	hist := []struct {
		name string
		msgs []history.Message
		want verdict
	}{
		{"A conversation persisted whole and in order passes.", []history.Message{q(1, "r1", 1), a(2, "r1", ok), q(3, "r2", 2), a(4, "r2", ok)}, verdict{}},
		{"A message never persisted is lost.", []history.Message{q(1, "r1", 1), a(2, "r1", ok)}, verdict{lost: 1}},
		{"A message persisted twice is a duplicate.", []history.Message{q(1, "r1", 1), a(2, "r1", ok), q(3, "r1b", 1), a(4, "r1b", ok), q(5, "r2", 2), a(6, "r2", ok)},
			verdict{duplicate: 1, outOfOrder: 1}},
		{"A question without its answer dangles.", []history.Message{q(1, "r1", 1), q(2, "r2", 2), a(3, "r2", ok)}, verdict{dangling: 1, lost: 1}},
		{"An answer without its question dangles.", []history.Message{a(1, "r0", ok), q(2, "r1", 1), a(3, "r1", ok), q(4, "r2", 2), a(5, "r2", ok)}, verdict{dangling: 1}},
		{"Messages persisted out of order are counted.", []history.Message{q(1, "r2", 2), a(2, "r2", ok), q(3, "r1", 1), a(4, "r1", ok)}, verdict{outOfOrder: 1}},
		{"A wrong answer is counted.", []history.Message{q(1, "r1", 1), a(2, "r1", "w1 w2"), q(3, "r2", 2), a(4, "r2", ok)}, verdict{wrong: 1}},
	}
	for _, tt := range hist {
		t.Run(tt.name, func(t *testing.T) {
			v := &verdict{}
			checkHistory(v, map[string]persisted{}, id("c"), tt.msgs, 2)
			if v.counts() != tt.want.counts() {
				t.Fatalf("got %s, want %s", v, &tt.want)
			}
		})
	}

	// Stream cases: requests r1 (m1) and r2 (m2) of conversation c, both
	// persisted complete.
	reqs := map[string]persisted{"r1": {id: id("c"), j: 1, status: events.StatusComplete}, "r2": {id: id("c"), j: 2, status: events.StatusComplete}}
	meta := func(req, run string, seq int64) events.Meta {
		return events.Meta{Conversation: "c", RequestID: req, RunID: run, Seq: seq, TS: 1}
	}
	started := func(req, run string, seq int64) events.Event {
		return &events.RunStartedEvent{Meta: meta(req, run, seq)}
	}
	token := func(req, run string, seq int64) events.Event {
		return &events.TokenEvent{Meta: meta(req, run, seq), Delta: "w"}
	}
	done := func(req, run string, seq int64, st events.Status) events.Event {
		return &events.RunCompletedEvent{Meta: meta(req, run, seq), Status: st}
	}
	whole := func(req, run string) []events.Event {
		return []events.Event{started(req, run, 1), token(req, run, 2), done(req, run, 3, events.StatusComplete)}
	}
	cat := func(parts ...[]events.Event) []events.Event {
		var out []events.Event
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	one := func(e ...events.Event) []events.Event { return e }
	stream := []struct {
		name string
		evs  []events.Event
		want verdict
	}{
		{"Two requests streamed whole and in order pass.", cat(whole("r1", "a"), whole("r2", "b")), verdict{}},
		{"A re-run after a run that died, and a redelivery's lone completion, pass and count as evidence.",
			cat(one(started("r1", "a", 1), token("r1", "a", 2)), whole("r1", "a2"), whole("r2", "b"), one(done("r2", "b2", 1, events.StatusComplete))),
			verdict{reruns: 1, redeliveries: 1}},
		{"An event written twice passes and is counted.", cat(whole("r1", "a"), one(started("r2", "b", 1), started("r2", "b", 1), token("r2", "b", 2), done("r2", "b", 3, events.StatusComplete))),
			verdict{repeats: 1}},
		{"A request that never completed is counted.", cat(whole("r1", "a"), one(started("r2", "b", 1), token("r2", "b", 2))), verdict{uncompleted: 1}},
		{"A completion with another status than the persisted one conflicts.", cat(whole("r1", "a"), whole("r2", "b"), one(done("r2", "b2", 1, events.StatusFailed))),
			verdict{conflicting: 1, redeliveries: 1}},
		{"A gap in the last run breaks it.", cat(whole("r1", "a"), one(started("r2", "b", 1), done("r2", "b", 3, events.StatusComplete))), verdict{brokenRun: 1}},
		{"A redelivery's completion after the artifact.saved of its turn passes.",
			cat(whole("r1", "a"), one(&events.ArtifactSavedEvent{Meta: meta("r1", "a2", 1), Artifact: events.ArtifactInfo{Name: "chart.png", Version: 1, MIME: "image/png", Size: 3}},
				done("r1", "a2", 2, events.StatusComplete)), whole("r2", "b")),
			verdict{redeliveries: 1}},
		{"A last run without its run.started breaks it.", cat(whole("r1", "a"), one(token("r2", "b", 1), done("r2", "b", 2, events.StatusComplete))), verdict{brokenRun: 1}},
		{"An event after the last completion is counted.", cat(whole("r1", "a"), one(token("r1", "a0", 5)), whole("r2", "b")), verdict{afterFinal: 1}},
		{"A re-run started after the request completed is counted (its first run is superseded).",
			cat(whole("r1", "a"), one(started("r1", "a2", 1)), whole("r2", "b")), verdict{afterFinal: 1, reruns: 1}},
		{"Requests streamed out of order are counted.", cat(whole("r2", "b"), whole("r1", "a")), verdict{streamOrder: 1}},
		{"An event of a request history does not know is stray.", cat(whole("r1", "a"), whole("r2", "b"), whole("r9", "z")), verdict{stray: 3}},
		{"A run id on two requests is counted.", cat(whole("r1", "a"), whole("r2", "a")), verdict{runIDReused: 1}},
		{"Another event under a seq the run already used is counted (a run id reused by a re-run).",
			cat(whole("r1", "a"), one(started("r2", "b", 1), token("r2", "b", 2), done("r2", "b", 3, events.StatusComplete),
				&events.TokenEvent{Meta: meta("r2", "b", 2), Delta: "another"})),
			verdict{seqRegression: 1}},
		{"A seq going backwards is counted.", cat(whole("r1", "a"), one(started("r2", "b", 1), token("r2", "b", 3), token("r2", "b", 2), done("r2", "b", 4, events.StatusComplete))),
			verdict{seqRegression: 1, brokenRun: 1}},
	}
	for _, tt := range stream {
		t.Run(tt.name, func(t *testing.T) {
			var recs []streamRecord
			for k, e := range tt.evs {
				recs = append(recs, streamRecord{partition: 0, offset: int64(k), ev: e})
			}
			v := &verdict{}
			checkStream(v, recs, reqs)
			if v.counts() != tt.want.counts() {
				t.Fatalf("got %s, want %s", v, &tt.want)
			}
			if (tt.want.violations() == 0) != v.ok() {
				t.Fatalf("ok() is %v for %s", v.ok(), v)
			}
		})
	}
	t.Run("A record that does not decode is stray.", func(t *testing.T) {
		v := &verdict{}
		checkStream(v, []streamRecord{{raw: []byte("{nope")}}, map[string]persisted{})
		if v.stray != 1 || v.ok() {
			t.Fatalf("verdict %s", v)
		}
	})
}

// The whole path of the checker, store and broker included: a request
// persisted and streamed whole passes, one never persisted is lost, and
// one whose run.completed is missing from the topic is uncompleted.
func TestTheCheckerReadsTheStoreAndTheStreamTopic(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t, 30*time.Second)
	store := history.NewMemoryStore()
	l := load{convs: 2, msgs: 1, user: "check"}
	id := l.id(1)
	if _, err := store.Commit(ctx, id, history.Turn{RequestID: "c1-m1", User: l.content(1), Answer: "w1 w2 w3 w4 w5", Status: events.StatusComplete}); err != nil {
		t.Fatal(err)
	}
	v, reqs, err := check(ctx, store, l)
	if err != nil {
		t.Fatal(err)
	}
	broker := testenv.EmbeddedKafka(t, embedded.KafkaConfig{}).Addr()
	name := testenv.Name(t, "s")
	if err := topic.Ensure(ctx, []string{broker}, 2, name); err != nil {
		t.Fatal(err)
	}
	meta := func(seq int64) events.Meta {
		return events.Meta{Conversation: id.Conversation, RequestID: "c1-m1", RunID: "run-1", Seq: seq, TS: 1}
	}
	w := testenv.Producer(t, []string{broker}, name)
	for _, e := range []events.Event{&events.RunStartedEvent{Meta: meta(1)}, &events.TokenEvent{Meta: meta(2), Delta: "w1", Agent: "assistant", Role: "assistant"},
		&events.RunCompletedEvent{Meta: meta(3), Status: events.StatusComplete}} {
		if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(id.Key()), Value: events.AppendEvent(nil, e)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := readStream(ctx, broker, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("read %d records, wrote 3", len(got))
	}
	checkStream(v, got, reqs)
	if v.lost != 1 || v.violations() != 1 {
		t.Fatalf("verdict %s: want only c2's m1 lost", v)
	}
	v2 := &verdict{}
	checkStream(v2, got[:2], reqs)
	if v2.uncompleted != 1 || v2.violations() != 1 {
		t.Fatalf("verdict %s: want c1's m1 uncompleted without its run.completed", v2)
	}
}
