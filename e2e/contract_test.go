package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turnpike-dev/turnpike/internal/mongodial"
	"github.com/turnpike-dev/turnpike/internal/topic"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/devstack"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

// TestTheRunningStackMatchesThePublishedSpecs drives every route of
// docs/openapi.yaml on the running stack (successes and the refusals
// 400, 401, 403, 404, 405, 413, 429, the shard redirect, an event stream,
// a WebSocket), checking each exchange against the document, each frame
// against docs/asyncapi.yaml's schemas, and then every record the stack
// wrote on every topic (key, home partition, headers, value).
func TestTheRunningStackMatchesThePublishedSpecs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := topic.DefaultPrefix
	st := startStack(t, "", func(c *devstack.Config) {
		prefix = cmp.Or(c.Worker.TopicPrefix, prefix)
		// The token bucket does not refill within the test: the 21st
		// POST of a user is the 429.
		c.Ingest.RatePerSecond, c.Ingest.RateBurst = 0.001, 20
		c.Worker.Memory = "terms" // DELETE /v1/memories is served
	})
	spec := specContract(t)
	report := newContractReport(t)
	hc := &http.Client{Transport: newContractTransport(t, report)}
	ingest, gw := "http://"+st.IngestAddr, "http://"+st.PushgwAddr

	type answer struct {
		status int
		header http.Header
		body   []byte
	}
	do := func(method, url, token string, header map[string]string, body string) answer {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, rd)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		return answer{resp.StatusCode, resp.Header, b}
	}
	want := func(a answer, status int, what string) answer {
		t.Helper()
		if a.status != status {
			t.Fatalf("%s: status %d %s, want %d", what, a.status, a.body, status)
		}
		return a
	}
	field := func(a answer, name string) string {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal(a.body, &m); err != nil {
			t.Fatalf("%s: %v", a.body, err)
		}
		s, _ := m[name].(string)
		return s
	}

	// A development token (the demo page's way in), and its refusals.
	tok := field(want(do("POST", ingest+"/v1/dev/token", "", nil, `{"user":"alice"}`), 200, "dev token"), "token")
	want(do("POST", ingest+"/v1/dev/token", "", map[string]string{"Content-Type": "text/plain"}, `{"user":"alice"}`), 400, "dev token as text/plain")
	want(do("POST", ingest+"/v1/dev/token", "", nil, `{"user":"a!"}`), 400, "dev token of a bad user")
	want(do("POST", ingest+"/v1/dev/token", "", map[string]string{"Origin": "https://evil.example"}, `{"user":"alice"}`), 403, "dev token from a foreign page")
	want(do("GET", ingest+"/v1/dev/token", "", nil, ""), 405, "GET of the dev token")

	// Memories: deleting one conversation's and all, and the refusals.
	for _, target := range []string{"/v1/memories?conversation=c1", "/v1/memories"} {
		want(do("DELETE", ingest+target, tok, nil, ""), 200, "DELETE "+target)
	}
	want(do("DELETE", ingest+"/v1/memories", "", nil, ""), 401, "DELETE memories without a token")
	want(do("DELETE", ingest+"/v1/memories?conversation=a%2Fb", tok, nil, ""), 400, "DELETE memories of a forged conversation")
	want(do("DELETE", ingest+"/v1/memories?tenant=other", tok, nil, ""), 400, "DELETE memories naming a tenant")
	want(do("GET", ingest+"/v1/memories", tok, nil, ""), 405, "GET of memories")

	// Posts, with an idempotency key, and their refusals.
	msgs := ingest + "/v1/conversations/c1/messages"
	first := field(want(do("POST", msgs, tok, map[string]string{"Idempotency-Key": "k1"}, `{"content":"hello there"}`), 202, "post"), "request_id")
	if again := field(want(do("POST", msgs, tok, map[string]string{"Idempotency-Key": "k1"}, `{"content":"hello there"}`), 202, "post again"), "request_id"); again != first {
		t.Errorf("the same idempotency key gave %s, then %s", first, again)
	}
	want(do("POST", msgs, "", nil, `{"content":"hi"}`), 401, "post without a token")
	want(do("POST", msgs, "not.a.token", nil, `{"content":"hi"}`), 401, "post with a bad token")
	want(do("POST", msgs, tok, nil, `{"content":"hi","extra":"x"}`), 400, "post with an unknown member")
	want(do("POST", msgs, tok, nil, `{"content":"hi","strategy":""}`), 400, "post with an empty strategy")
	want(do("POST", msgs, tok, map[string]string{"Content-Type": "text/plain"}, `{"content":"hi"}`), 400, "post as text/plain")
	want(do("POST", ingest+"/v1/conversations/c%21/messages", tok, nil, `{"content":"hi"}`), 400, "post to a bad conversation")
	want(do("POST", msgs, tok, nil, `{"content":"`+strings.Repeat("x", 40000)+`"}`), 413, "post over the content limit")
	want(do("PUT", msgs, tok, nil, `{"content":"hi"}`), 405, "PUT of messages")
	want(do("GET", ingest+"/v1/nowhere", tok, nil, ""), 404, "an unknown path")

	// An event stream following the first request: redirected to its
	// shard, then every event through run.completed.
	follow := func(conversation, requestID string) []map[string]any {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "GET", gw+"/v1/conversations/"+conversation+"/events?follow="+requestID, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("event stream: %s", resp.Status)
		}
		data, err := sseData(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	data := follow("c1", first)
	if n := len(data); n < 3 || data[0]["type"] != "subscribed" || data[n-1]["type"] != "run.completed" {
		t.Fatalf("the followed stream is %v, want subscribed … run.completed", data)
	}
	events_ := gw + "/v1/conversations/c1/events"
	want(do("GET", events_+"?shard=0", "", nil, ""), 401, "event stream without a token")
	want(do("GET", events_+"?shard=0&since=nonsense", tok, nil, ""), 400, "event stream from a bad cursor")
	want(do("GET", events_+"?shard=0&bogus=1", tok, nil, ""), 400, "event stream with an unknown parameter")
	want(do("OPTIONS", events_, "", map[string]string{"Origin": "http://" + st.IngestAddr, "Access-Control-Request-Method": "GET"}, ""), 204, "event stream preflight")
	want(do("DELETE", events_, tok, nil, ""), 405, "DELETE of an event stream")

	// History, and its refusals.
	want(do("GET", msgs, tok, nil, ""), 200, "history")
	var page struct {
		NextBefore *int64 `json:"next_before"`
	}
	if err := json.Unmarshal(want(do("GET", msgs+"?limit=1", tok, nil, ""), 200, "a page of history").body, &page); err != nil || page.NextBefore == nil {
		t.Fatalf("a page of one message: next_before %v (%v), want the seq of the next page", page.NextBefore, err)
	}
	want(do("GET", msgs+"?limit=0", tok, nil, ""), 400, "history with limit 0")
	want(do("GET", msgs+"?before=x", tok, nil, ""), 400, "history before a bad seq")
	want(do("GET", ingest+"/v1/conversations/nobody/messages", tok, nil, ""), 404, "history of an unknown conversation")

	// Session state and its reset, and their refusals: bob's POSTs, since
	// alice's are counted to the 429 below.
	state := ingest + "/v1/conversations/c1/state"
	want(do("GET", state, tok, nil, ""), 200, "state")
	want(do("GET", ingest+"/v1/conversations/nobody/state", tok, nil, ""), 404, "state of an unknown conversation")
	want(do("GET", state, "", nil, ""), 401, "state without a token")
	want(do("PUT", state, tok, nil, `{}`), 405, "PUT of state")
	bob := field(want(do("POST", ingest+"/v1/dev/token", "", nil, `{"user":"bob"}`), 200, "bob's dev token"), "token")
	want(do("GET", state, bob, nil, ""), 404, "another user's state")
	reset := state + "/reset"
	want(do("POST", reset, bob, nil, ""), 202, "reset of both parts")
	want(do("POST", reset, bob, map[string]string{"Idempotency-Key": "r1"}, `{"agent":true}`), 202, "reset of the agent")
	want(do("POST", reset, bob, nil, `{"state":false,"agent":false}`), 400, "a reset of nothing")
	want(do("POST", reset, bob, nil, `{"state":true,"memory":true}`), 400, "a reset of an unknown part")
	want(do("GET", reset, bob, nil, ""), 405, "GET of reset")

	// Artifacts: two committed versions of alice's c1 notes.txt (staged
	// and published as a run's commit does), listed, read whole, by
	// version, by range and revalidated, deleted; and the refusals,
	// another user's included.
	aconn, err := mongodial.Dial(st.MongoURI, st.cfg.Worker.MongoDB, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer aconn.Close()
	arts, err := history.NewMongoArtifacts(ctx, aconn.DB, history.ArtifactConfig{})
	if err != nil {
		t.Fatal(err)
	}
	aliceC1 := events.Identity{Tenant: auth.DefaultTenant, User: "alice", Conversation: "c1"}
	for _, body := range []string{"first version", "second version, longer"} {
		token, err := arts.Stage(ctx, aliceC1, history.ArtifactSave{Name: "notes.txt", MIME: "text/plain; charset=utf-8", Data: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := arts.Publish(ctx, aliceC1, []string{token}); err != nil {
			t.Fatal(err)
		}
	}
	artsURL := ingest + "/v1/conversations/c1/artifacts"
	notes := artsURL + "/notes.txt"
	var listed struct {
		Artifacts []struct {
			Name    string `json:"name"`
			Version int    `json:"version"`
		} `json:"artifacts"`
	}
	if err := json.Unmarshal(want(do("GET", artsURL, tok, nil, ""), 200, "artifacts").body, &listed); err != nil ||
		len(listed.Artifacts) != 1 || listed.Artifacts[0].Name != "notes.txt" || listed.Artifacts[0].Version != 2 {
		t.Fatalf("the artifacts of c1: %+v (%v), want notes.txt version 2", listed, err)
	}
	if a := want(do("GET", artsURL, bob, nil, ""), 200, "another user's artifacts"); !strings.Contains(string(a.body), `"artifacts":[]`) {
		t.Fatalf("bob lists %s, want none", a.body)
	}
	want(do("GET", artsURL, "", nil, ""), 401, "artifacts without a token")
	want(do("GET", ingest+"/v1/conversations/c%21/artifacts", tok, nil, ""), 400, "artifacts of a bad conversation")
	want(do("POST", artsURL, tok, nil, `{}`), 405, "POST of artifacts")
	latest := want(do("GET", notes, tok, nil, ""), 200, "an artifact")
	if string(latest.body) != "second version, longer" || latest.header.Get("X-Artifact-Version") != "2" {
		t.Fatalf("the newest notes.txt: %q version %s, want the second", latest.body, latest.header.Get("X-Artifact-Version"))
	}
	if a := want(do("GET", notes+"?version=1", tok, nil, ""), 200, "version 1 of an artifact"); string(a.body) != "first version" {
		t.Fatalf("version 1 of notes.txt: %q", a.body)
	}
	if a := want(do("GET", notes, tok, map[string]string{"Range": "bytes=0-5"}, ""), 206, "a range of an artifact"); string(a.body) != "second" {
		t.Fatalf("bytes 0-5 of notes.txt: %q", a.body)
	}
	want(do("GET", notes, tok, map[string]string{"Range": "bytes=1000-2000"}, ""), 416, "a range beyond an artifact")
	want(do("GET", notes, tok, map[string]string{"If-None-Match": latest.header.Get("ETag")}, ""), 304, "an artifact not modified")
	want(do("GET", notes+"?version=0", tok, nil, ""), 400, "version 0 of an artifact")
	want(do("GET", notes+"?version=3", tok, nil, ""), 404, "a version never saved")
	want(do("GET", notes, bob, nil, ""), 404, "another user's artifact")
	want(do("GET", artsURL+"/a%2Fnotes.txt", tok, nil, ""), 400, "an artifact name with an escaped slash")
	want(do("GET", artsURL+"/..%2Fnotes.txt", tok, nil, ""), 404, "an artifact path out of canonical form")
	want(do("GET", artsURL+"/a%00b", tok, nil, ""), 400, "an artifact name with NUL")
	want(do("GET", notes, "", nil, ""), 401, "an artifact without a token")
	want(do("PUT", notes, tok, nil, `{}`), 405, "PUT of an artifact")
	want(do("DELETE", notes, bob, nil, ""), 404, "another user's DELETE of an artifact")
	want(do("DELETE", notes, tok, nil, ""), 204, "DELETE of an artifact")
	want(do("DELETE", notes, tok, nil, ""), 404, "DELETE of a deleted artifact")
	want(do("GET", notes+"?version=1", tok, nil, ""), 404, "a deleted artifact")

	// A WebSocket over the whole of c1: a failing run (a notice, an
	// incomplete answer), a resume with nothing to resume (rejected, a
	// notice), ping, and frames the gateway refuses.
	wsURL := "ws://" + st.PushgwAddr + "/v1/stream"
	if _, resp, err := contractDial(ctx, spec, report, wsURL, nil); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("WebSocket without a token: %v, want 401", err)
	}
	if _, resp, err := contractDial(ctx, spec, report, wsURL, http.Header{"Authorization": {"Bearer " + tok}, "Origin": {"https://evil.example"}}); err == nil || resp == nil || resp.StatusCode != 403 {
		t.Fatalf("WebSocket from a foreign origin: %v, want 403", err)
	}
	want(do("POST", gw+"/v1/stream", tok, nil, ""), 405, "POST to the WebSocket")
	want(do("GET", gw+"/v1/stream", tok, nil, ""), 400, "GET of the WebSocket without a handshake")
	ws, _, err := contractDial(ctx, spec, report, wsURL, http.Header{"Authorization": {"Bearer " + tok}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.send(`{"op":"subscribe","conversation":"c1","since":"earliest"}`, true); err != nil {
		t.Fatal(err)
	}
	failing := field(want(do("POST", msgs, tok, nil, `{"content":"[[fail-after:1]] one two three"}`), 202, "a failing post"), "request_id")
	until := func(requestID, status string) {
		t.Helper()
		for {
			f, err := ws.next()
			if err != nil {
				t.Fatalf("waiting for %s to complete %s: %v", requestID, status, err)
			}
			if f["type"] == "run.completed" && f["request_id"] == requestID {
				if f["status"] != status {
					t.Fatalf("%s completed %v, want %s", requestID, f["status"], status)
				}
				return
			}
		}
	}
	until(failing, "incomplete")
	resumed := field(want(do("POST", ingest+"/v1/conversations/c1/resume", tok, nil, `{"request_id":"`+failing+`","answer":"Friday"}`), 202, "resume"), "request_id")
	until(resumed, "rejected")
	want(do("POST", ingest+"/v1/conversations/c1/resume", tok, nil, `{"request_id":"`+failing+`"}`), 400, "resume without an answer")
	for _, f := range []struct {
		frame string
		valid bool
		want  string
	}{
		{`{"op":"ping"}`, true, "pong"},
		{`{"op":"dance"}`, false, "error"},
		{`{"op":"unsubscribe","conversation":"c9"}`, true, "error"},
		{`{"op":"subscribe","conversation":"c1"}`, true, "error"}, // already subscribed
	} {
		if err := ws.send(f.frame, f.valid); err != nil {
			t.Fatal(err)
		}
		got, err := ws.next()
		if err != nil {
			t.Fatal(err)
		}
		if got["type"] != f.want {
			t.Fatalf("%s answered %v, want %s", f.frame, got, f.want)
		}
	}

	// Cancels, and a second conversation for paging the list.
	cancelURL := ingest + "/v1/conversations/c1/cancel"
	want(do("POST", cancelURL, tok, nil, ""), 202, "cancel everything, without a body")
	want(do("POST", cancelURL, tok, nil, `{"request_id":"`+first+`"}`), 202, "cancel one request")
	want(do("POST", cancelURL, tok, nil, `{"request":"x"}`), 400, "cancel with an unknown member")
	second := field(want(do("POST", ingest+"/v1/conversations/c2/messages", tok, nil, `{"content":"hello again","strategy":"reject"}`), 202, "post to c2"), "request_id")
	follow("c2", second)
	var convs struct {
		NextBefore *string `json:"next_before"`
	}
	if err := json.Unmarshal(want(do("GET", ingest+"/v1/conversations?limit=1", tok, nil, ""), 200, "a page of conversations").body, &convs); err != nil || convs.NextBefore == nil {
		t.Fatalf("a page of one conversation: next_before %v (%v), want a cursor", convs.NextBefore, err)
	}
	want(do("GET", ingest+"/v1/conversations?before="+*convs.NextBefore, tok, nil, ""), 200, "the next page of conversations")
	want(do("GET", ingest+"/v1/conversations?before=%21%21", tok, nil, ""), 400, "conversations before a bad cursor")
	want(do("DELETE", ingest+"/v1/conversations", tok, nil, ""), 405, "DELETE of the conversations")

	// The rate limit: another user's 21st POST.
	limited, err := auth.Mint(st.AuthSecret, "default", "limited", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		a := do("POST", ingest+"/v1/conversations/busy/messages", limited, nil, `{"content":"hi"}`)
		if a.status == 429 {
			break
		}
		want(a, 202, "a post within the rate")
		if i == 40 {
			t.Fatal("no 429 after 40 posts")
		}
	}

	// Operations routes on both listeners.
	for _, base := range []string{ingest, gw} {
		for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
			want(do("GET", base+p, "", nil, ""), 200, base+p)
		}
	}

	// A dead letter: a record that does not decode, produced directly.
	cl, err := kgo.NewClient(kgo.SeedBrokers(st.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	bad := &kgo.Record{Topic: prefix + "requests", Key: []byte("default/alice/dlq"), Value: []byte(`{"v":1,"tenant":"default"}`)}
	if err := cl.ProduceSync(ctx, bad).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// Every record of every topic. The dead letter is the last record
	// written; the others were all written before their run.completed,
	// which the test saw, or before a 202.
	dlq := readTopic(ctx, t, cl, prefix+"requests.dlq", 1)
	readTopicCheck := func(name string, check func(r *kgo.Record) error) []*kgo.Record {
		recs := readTopic(ctx, t, cl, prefix+name, 0)
		for _, r := range recs {
			if !keyPattern.Match(r.Key) {
				t.Errorf("%s record at %d/%d: key %q is not <tenant>/<user>/<conversation>", name, r.Partition, r.Offset, r.Key)
			} else if home := topic.Home(r.Key, stackPartitions); int(r.Partition) != home {
				t.Errorf("%s record of %q in partition %d, not its home %d", name, r.Key, r.Partition, home)
			}
			if err := check(r); err != nil {
				t.Errorf("%s record %s at %d/%d: %v", name, r.Value, r.Partition, r.Offset, err)
			}
		}
		return recs
	}
	var deadLetters int
	readTopicCheck("requests", func(r *kgo.Record) error {
		if err := validateJSON(spec.requestHeaders, headerJSON(r)); err != nil {
			return fmt.Errorf("headers: %w", err)
		}
		err := validateJSON(spec.request, r.Value)
		if bytes.Equal(r.Value, bad.Value) {
			deadLetters++
			if err == nil {
				return fmt.Errorf("docs/asyncapi.yaml's request accepts what the worker dead-letters")
			}
			return nil
		}
		return err
	})
	if deadLetters != 1 {
		t.Errorf("the bad record is %d times in the requests topic, want 1", deadLetters)
	}
	for _, r := range dlq {
		if !bytes.Equal(r.Value, bad.Value) || !bytes.Equal(r.Key, bad.Key) {
			t.Errorf("dead letter %q=%q, want the bad record byte for byte", r.Key, r.Value)
		}
		if err := validateJSON(spec.dlqHeaders, headerJSON(r)); err != nil {
			t.Errorf("dead letter headers %s: docs/asyncapi.yaml refuses them: %v", headerJSON(r), err)
		}
	}
	types := map[string]int{}
	readTopicCheck("stream", func(r *kgo.Record) error {
		var head struct{ Type string }
		_ = json.Unmarshal(r.Value, &head)
		types[head.Type]++
		return validateJSON(spec.streamRecord, r.Value)
	})
	controls := map[string]int{}
	readTopicCheck("control", func(r *kgo.Record) error {
		var head struct{ Type string }
		_ = json.Unmarshal(r.Value, &head)
		controls[head.Type]++
		return validateJSON(spec.control, r.Value)
	})
	for _, typ := range []string{"run.started", "token", "notice", "run.completed"} {
		if types[typ] == 0 {
			t.Errorf("no %s event on the stream topic (saw %v): the test no longer covers it", typ, types)
		}
	}
	for _, typ := range []string{"cancel", "completed"} {
		if controls[typ] == 0 {
			t.Errorf("no %s record on the control topic (saw %v): the test no longer covers it", typ, controls)
		}
	}
	if n := report.checked("http"); n < 40 {
		t.Errorf("%d HTTP exchanges checked against docs/openapi.yaml, want every one the test made", n)
	}
	if report.checked("sse") == 0 || report.checked("ws") == 0 {
		t.Errorf("frames checked: %d over event streams, %d over the WebSocket; want both", report.checked("sse"), report.checked("ws"))
	}
}

// keyPattern is the key of every record of a conversation.
var keyPattern = regexp.MustCompile(`^[A-Za-z0-9._:@-]{1,128}/[A-Za-z0-9._:@-]{1,128}/[A-Za-z0-9._:@-]{1,128}$`)

// headerJSON is a record's headers as a JSON object of strings.
func headerJSON(r *kgo.Record) []byte {
	m := map[string]string{}
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	b, _ := json.Marshal(m)
	return b
}

// readTopic reads every record of a topic of stackPartitions partitions,
// up to the ends its partitions have now, or, with atLeast > 0, until it
// has read that many.
func readTopic(ctx context.Context, t *testing.T, cl *kgo.Client, name string, atLeast int) []*kgo.Record {
	t.Helper()
	offsets := map[int32]kgo.Offset{}
	for p := range int32(stackPartitions) {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	ends := map[int32]int64{}
	if atLeast == 0 {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = name
		for p := range int32(stackPartitions) {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = p, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("%s: end offsets: %v", name, err)
		}
		for _, tp := range resp.Topics {
			for _, p := range tp.Partitions {
				if p.ErrorCode != 0 {
					t.Fatalf("%s: end offset of %d: error %d", name, p.Partition, p.ErrorCode)
				}
				if p.Offset > 0 {
					ends[p.Partition] = p.Offset
				}
			}
		}
		if len(ends) == 0 {
			return nil
		}
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(cl.OptValue(kgo.SeedBrokers).([]string)...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{name: offsets}))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var out []*kgo.Record
	done := func() bool {
		if atLeast > 0 {
			return len(out) >= atLeast
		}
		return len(ends) == 0
	}
	for !done() {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("%s: %d records read, the rest did not come: %v", name, len(out), err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			if end, ok := ends[r.Partition]; ok && r.Offset+1 >= end {
				delete(ends, r.Partition)
			}
		})
	}
	return out
}

// TestTheSchemasSayWhatTheDecodersSay runs pkg/events' strict decoders
// and the JSON Schemas of docs/schemas over the same records: each
// accepts exactly what the other accepts, for every event type (those the
// echo model never emits included) and for the refusals the contract
// names.
func TestTheSchemasSayWhatTheDecodersSay(t *testing.T) {
	t.Parallel()
	spec := specContract(t)
	const meta = `"conversation":"c1","request_id":"r-1","run_id":"u-1","seq":1,"ts":1764463061123000000`
	for _, tc := range []struct {
		name, value string
	}{
		{"A run.started is valid.", `{"type":"run.started",` + meta + `}`},
		{"A run.started from a sub-agent is valid.", `{"type":"run.started",` + meta + `,"agent":"billing"}`},
		{"A run.started with an empty agent is invalid.", `{"type":"run.started",` + meta + `,"agent":""}`},
		{"A token is valid.", `{"type":"token",` + meta + `,"delta":"echo ","agent":"assistant","role":"assistant"}`},
		{"A token without a role is invalid.", `{"type":"token",` + meta + `,"delta":"echo ","agent":"assistant"}`},
		{"A token with an empty role is invalid.", `{"type":"token",` + meta + `,"delta":"echo ","agent":"assistant","role":""}`},
		{"A notice is valid.", `{"type":"notice",` + meta + `,"message":"the model failed"}`},
		{"A notice with a status is invalid.", `{"type":"notice",` + meta + `,"message":"x","status":"complete"}`},
		{"An agent.transfer is valid.", `{"type":"agent.transfer",` + meta + `,"from":"","to":"billing"}`},
		{"An agent.transfer to nobody is invalid.", `{"type":"agent.transfer",` + meta + `,"from":"a","to":""}`},
		{"A run.interrupted is valid.", `{"type":"run.interrupted",` + meta + `,"interrupt":{"agent":"a","tool":"","question":"Which day?"}}`},
		{"A run.interrupted without a question is invalid.", `{"type":"run.interrupted",` + meta + `,"interrupt":{"agent":"a","tool":""}}`},
		{"A run.completed with usage is valid.", `{"type":"run.completed",` + meta + `,"status":"complete","usage":{"prompt_tokens":2,"completion_tokens":4,"total_tokens":6}}`},
		{"A run.completed of every status is valid.", `{"type":"run.completed",` + meta + `,"status":"interrupted"}`},
		{"A run.completed of an unknown status is invalid.", `{"type":"run.completed",` + meta + `,"status":"done"}`},
		{"A run.completed with a negative usage is invalid.", `{"type":"run.completed",` + meta + `,"status":"complete","usage":{"prompt_tokens":-1,"completion_tokens":4,"total_tokens":6}}`},
		{"A run.completed with usage on a token is invalid.", `{"type":"token",` + meta + `,"delta":"","agent":"","role":"assistant","usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`},
		{"A state.changed is valid.", `{"type":"state.changed",` + meta + `,"keys":{"conversation":["cart"],"user":[]}}`},
		{"A truncated state.changed is valid.", `{"type":"state.changed",` + meta + `,"keys":{"conversation":[],"user":["lang"]},"truncated":true}`},
		{"A state.changed of no key is invalid.", `{"type":"state.changed",` + meta + `,"keys":{"conversation":[],"user":[]}}`},
		{"A state.changed without its user list is invalid.", `{"type":"state.changed",` + meta + `,"keys":{"conversation":["cart"]}}`},
		{"A state.changed listing a key twice is invalid.", `{"type":"state.changed",` + meta + `,"keys":{"conversation":["cart","cart"],"user":[]}}`},
		{"A state.changed with truncated false is invalid.", `{"type":"state.changed",` + meta + `,"keys":{"conversation":["cart"],"user":[]},"truncated":false}`},
		{"A state.changed with an empty key is invalid.", `{"type":"state.changed",` + meta + `,"keys":{"conversation":[""],"user":[]}}`},
		{"An artifact.saved is valid.", `{"type":"artifact.saved",` + meta + `,"artifact":{"name":"chart.png","version":2,"mime_type":"image/png","size":5120}}`},
		{"An artifact.saved of an empty user: artifact is valid.", `{"type":"artifact.saved",` + meta + `,"artifact":{"name":"user:a.txt","version":1,"mime_type":"text/plain; charset=utf-8","size":0}}`},
		{"An artifact.saved of version 0 is invalid.", `{"type":"artifact.saved",` + meta + `,"artifact":{"name":"chart.png","version":0,"mime_type":"image/png","size":1}}`},
		{"An artifact.saved without a size is invalid.", `{"type":"artifact.saved",` + meta + `,"artifact":{"name":"chart.png","version":1,"mime_type":"image/png"}}`},
		{"An artifact.saved with an unknown artifact member is invalid.", `{"type":"artifact.saved",` + meta + `,"artifact":{"name":"chart.png","version":1,"mime_type":"image/png","size":1,"etag":"x"}}`},
		{"An artifact.saved with an empty name is invalid.", `{"type":"artifact.saved",` + meta + `,"artifact":{"name":"","version":1,"mime_type":"image/png","size":1}}`},
		{"An artifact.saved with a negative size is invalid.", `{"type":"artifact.saved",` + meta + `,"artifact":{"name":"a","version":1,"mime_type":"image/png","size":-1}}`},
		{"An artifact.saved with flat members is invalid.", `{"type":"artifact.saved",` + meta + `,"name":"a","version":1,"mime_type":"image/png","size":1}`},
		{"An event of an unknown type is invalid.", `{"type":"run.paused",` + meta + `}`},
		{"An event with an unknown member is invalid.", `{"type":"run.started",` + meta + `,"extra":"x"}`},
		{"An event with seq 0 is invalid.", `{"type":"run.started","conversation":"c1","request_id":"r-1","run_id":"u-1","seq":0,"ts":1}`},
		{"An event of a bad conversation is invalid.", `{"type":"run.started","conversation":"c 1","request_id":"r-1","run_id":"u-1","seq":1,"ts":1}`},
		{"An event without ts is invalid.", `{"type":"run.started","conversation":"c1","request_id":"r-1","run_id":"u-1","seq":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, derr := events.DecodeEvent([]byte(tc.value))
			serr := validateJSON(spec.streamRecord, []byte(tc.value))
			if (derr == nil) != (serr == nil) {
				t.Errorf("pkg/events says %v, docs/schemas/stream-record.json says %v", derr, serr)
			}
			if derr != nil {
				return
			}
			// With a cursor: the frame the gateway sends (and not a record).
			framed := strings.TrimSuffix(tc.value, "}") + `,"cursor":"1-0-5"}`
			if err := validateJSON(spec.serverFrame, []byte(framed)); err != nil {
				t.Errorf("docs/schemas/ws-server-frame.json refuses %s: %v", framed, err)
			}
			if err := validateJSON(spec.streamRecord, []byte(framed)); err == nil {
				t.Errorf("docs/schemas/stream-record.json accepts a record with a cursor")
			}
			if err := validateJSON(spec.serverFrame, []byte(tc.value)); err == nil {
				t.Errorf("docs/schemas/ws-server-frame.json accepts an event without its cursor")
			}
		})
	}
	for _, tc := range []struct {
		name, value string
		control     bool
	}{
		{"A request record is valid.", `{"v":1,"request_id":"r-1","tenant":"default","user":"dev","conversation":"c1","content":"hello there","strategy":"enqueue","created_at":"2026-11-30T00:37:41.123456789Z"}`, false},
		{"A request record without request_id is valid.", `{"v":1,"tenant":"default","user":"dev","conversation":"c1","content":"hi"}`, false},
		{"A resume record is valid.", `{"v":1,"tenant":"default","user":"dev","conversation":"c1","content":"Friday","resume_of":"r-1"}`, false},
		{"A reset record is valid.", `{"v":1,"tenant":"default","user":"dev","conversation":"c1","content":"","reset":{"state":true,"agent":false}}`, false},
		{"A reset record without content is valid.", `{"v":1,"tenant":"default","user":"dev","conversation":"c1","reset":{"agent":true}}`, false},
		{"A reset record that clears nothing is invalid.", `{"v":1,"tenant":"default","user":"dev","conversation":"c1","reset":{"state":false,"agent":false}}`, false},
		{"A reset record with content is invalid.", `{"v":1,"tenant":"default","user":"dev","conversation":"c1","content":"hi","reset":{"state":true}}`, false},
		{"A reset record that resumes is invalid.", `{"v":1,"tenant":"default","user":"dev","conversation":"c1","reset":{"state":true},"resume_of":"r-1"}`, false},
		{"A reset record of the interrupt strategy is invalid.", `{"v":1,"tenant":"default","user":"dev","conversation":"c1","reset":{"state":true},"strategy":"interrupt"}`, false},
		{"A reset record with an unknown part is invalid.", `{"v":1,"tenant":"default","user":"dev","conversation":"c1","reset":{"state":true,"memory":true}}`, false},
		{"A request record of version 2 is invalid.", `{"v":2,"tenant":"default","user":"dev","conversation":"c1","content":"hi"}`, false},
		{"A request record without content is invalid.", `{"v":1,"tenant":"default","user":"dev","conversation":"c1"}`, false},
		{"A request record with empty content is invalid.", `{"v":1,"tenant":"default","user":"dev","conversation":"c1","content":""}`, false},
		{"A request record with NUL in its content is invalid.", `{"v":1,"tenant":"default","user":"dev","conversation":"c1","content":"a\u0000b"}`, false},
		{"A request record with a case-variant member is invalid.", `{"v":1,"tenant":"default","user":"dev","Conversation":"c1","content":"hi"}`, false},
		{"A request record of an unknown strategy is invalid.", `{"v":1,"tenant":"default","user":"dev","conversation":"c1","content":"hi","strategy":"drop"}`, false},
		{"A cancel of a partition is valid.", `{"v":1,"type":"cancel","tenant":"default","user":"dev","conversation":"c1","partition":5,"before":42,"at":"2026-11-30T00:37:41.123Z"}`, true},
		{"A cancel of a request is valid.", `{"v":1,"type":"cancel","tenant":"default","user":"dev","conversation":"c1","request_id":"r-1","at":"2026-11-30T00:37:41.123Z"}`, true},
		{"A completion is valid.", `{"v":1,"type":"completed","tenant":"default","user":"dev","conversation":"c1","request_id":"r-1","status":"complete","at":"2026-11-30T00:37:41.123Z"}`, true},
		{"A completion without a request is invalid.", `{"v":1,"type":"completed","tenant":"default","user":"dev","conversation":"c1","status":"complete","at":"2026-11-30T00:37:41.123Z"}`, true},
		{"A control record of an unknown type is invalid.", `{"v":1,"type":"pause","tenant":"default","user":"dev","conversation":"c1","at":"2026-11-30T00:37:41.123Z"}`, true},
		{"A cancel at a negative offset is invalid.", `{"v":1,"type":"cancel","tenant":"default","user":"dev","conversation":"c1","before":-1,"at":"2026-11-30T00:37:41.123Z"}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var derr, serr error
			if tc.control {
				_, derr = events.DecodeControl([]byte(tc.value))
				serr = validateJSON(spec.control, []byte(tc.value))
			} else {
				_, derr = events.DecodeRequest([]byte(tc.value), 0)
				serr = validateJSON(spec.request, []byte(tc.value))
			}
			if (derr == nil) != (serr == nil) {
				t.Errorf("pkg/events says %v, docs/asyncapi.yaml's schema says %v", derr, serr)
			}
		})
	}
}
