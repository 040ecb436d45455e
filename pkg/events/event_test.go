package events_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

func testMeta() events.Meta {
	return events.Meta{Conversation: "c1", RequestID: "r-1", RunID: "run-1", Seq: 3, TS: 1_700_000_000_123_456_789}
}

// Real examples of every event type, as workers write them to the stream
// topic and as the push gateway sends them (with a cursor).
var (
	runStartedJSON   = `{"type":"run.started","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":1,"ts":1700000000123456789}`
	tokenJSON        = `{"type":"token","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":2,"ts":1700000000123456789,"delta":"echo ","agent":"echo","role":"assistant"}`
	noticeJSON       = `{"type":"notice","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":3,"ts":1700000000123456789,"message":"model failed: injected failure"}`
	runCompletedJSON = `{"type":"run.completed","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":4,"ts":1700000000123456789,"status":"incomplete"}`
	tokenCursorJSON  = `{"type":"token","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":2,"ts":1700000000123456789,"delta":"echo ","agent":"echo","role":"assistant","cursor":"0-17"}`
	// Extensions of the contract (docs/api.md).
	transferJSON    = `{"type":"agent.transfer","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":2,"ts":1700000000123456789,"from":"supervisor","to":"researcher"}`
	interruptedJSON = `{"type":"run.interrupted","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":3,"ts":1700000000123456789,"interrupt":{"agent":"assistant","tool":"ask_user","question":"Which city?"}}`
	usageJSON       = `{"type":"run.completed","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":4,"ts":1700000000123456789,"status":"complete","usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}`
	stateJSON       = `{"type":"state.changed","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":3,"ts":1700000000123456789,"keys":{"conversation":["cart","step"],"user":["language"]}}`
	artifactJSON    = `{"type":"artifact.saved","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":3,"ts":1700000000123456789,"artifact":{"name":"chart.png","version":2,"mime_type":"image/png","size":5120}}`
)

// splice replaces the first occurrence of old in s, failing loudly when the
// test table is out of date.
func splice(s, old, new string) string {
	if !strings.Contains(s, old) {
		panic(fmt.Sprintf("test table: %q not in %s", old, s))
	}
	return strings.Replace(s, old, new, 1)
}

func TestDecodeEventAcceptsEveryType(t *testing.T) {
	t.Parallel()
	meta := func(seq int64, cursor string) events.Meta {
		return events.Meta{Conversation: "c1", RequestID: "r-1", RunID: "run-1", Seq: seq, TS: 1700000000123456789, Cursor: cursor}
	}
	tests := []struct {
		name string
		in   string
		want events.Event
	}{
		{"A run.started event decodes.", runStartedJSON, &events.RunStartedEvent{Meta: meta(1, "")}},
		{"A token event decodes.", tokenJSON, &events.TokenEvent{Meta: meta(2, ""), Delta: "echo ", Agent: "echo", Role: "assistant"}},
		{"A notice event decodes.", noticeJSON, &events.NoticeEvent{Meta: meta(3, ""), Message: "model failed: injected failure"}},
		{"A run.completed event decodes.", runCompletedJSON, &events.RunCompletedEvent{Meta: meta(4, ""), Status: events.StatusIncomplete}},
		{"A token event with a cursor decodes with the cursor.", tokenCursorJSON,
			&events.TokenEvent{Meta: meta(2, "0-17"), Delta: "echo ", Agent: "echo", Role: "assistant"}},
		{"A run.started event with a cursor decodes with the cursor.", splice(runStartedJSON, `}`, `,"cursor":"x"}`),
			&events.RunStartedEvent{Meta: meta(1, "x")}},
		{"A null cursor counts as absent.", splice(runStartedJSON, `}`, `,"cursor":null}`), &events.RunStartedEvent{Meta: meta(1, "")}},
		{"A run.started event of a run starting from a sub-agent decodes with the agent.", splice(runStartedJSON, `}`, `,"agent":"billing"}`),
			&events.RunStartedEvent{Meta: meta(1, ""), Agent: "billing"}},
		{"A cursor of 128 bytes is accepted.", splice(runStartedJSON, `}`, `,"cursor":"`+strings.Repeat("k", 128)+`"}`),
			&events.RunStartedEvent{Meta: meta(1, strings.Repeat("k", 128))}},
		{"An empty delta is accepted.", splice(tokenJSON, `"delta":"echo "`, `"delta":""`),
			&events.TokenEvent{Meta: meta(2, ""), Delta: "", Agent: "echo", Role: "assistant"}},
		{"An empty agent is accepted.", splice(tokenJSON, `"agent":"echo"`, `"agent":""`),
			&events.TokenEvent{Meta: meta(2, ""), Delta: "echo ", Agent: "", Role: "assistant"}},
		{"A delta of exactly the limit is accepted.", splice(tokenJSON, `"delta":"echo "`, `"delta":"`+strings.Repeat("d", events.MaxDeltaBytes)+`"`),
			&events.TokenEvent{Meta: meta(2, ""), Delta: strings.Repeat("d", events.MaxDeltaBytes), Agent: "echo", Role: "assistant"}},
		{"An empty notice message is accepted.", splice(noticeJSON, `"message":"model failed: injected failure"`, `"message":""`),
			&events.NoticeEvent{Meta: meta(3, "")}},
		{"Fields in another order are accepted.", `{"ts":1700000000123456789,"status":"complete","seq":4,"run_id":"run-1","request_id":"r-1","conversation":"c1","type":"run.completed"}`,
			&events.RunCompletedEvent{Meta: meta(4, ""), Status: events.StatusComplete}},
		{"Escaped text decodes to the unescaped text.", splice(tokenJSON, `"delta":"echo "`, `"delta":"a\"\\\/\b\f\n\r\t\u0001\u2028\ud83d\ude00é"`),
			&events.TokenEvent{Meta: meta(2, ""), Delta: "a\"\\/\b\f\n\r\t\x01\u2028😀é", Agent: "echo", Role: "assistant"}},
		{"An agent.transfer event decodes.", transferJSON, &events.AgentTransferEvent{Meta: meta(2, ""), From: "supervisor", To: "researcher"}},
		{"A transfer from an unnamed agent decodes.", splice(transferJSON, `"supervisor"`, `""`), &events.AgentTransferEvent{Meta: meta(2, ""), To: "researcher"}},
		{"A run.interrupted event decodes.", interruptedJSON,
			&events.RunInterruptedEvent{Meta: meta(3, ""), Interrupt: events.Interrupt{Agent: "assistant", Tool: "ask_user", Question: "Which city?"}}},
		{"An interrupt of an agent without a tool or question decodes.", splice(interruptedJSON, `"tool":"ask_user","question":"Which city?"`, `"tool":"","question":""`),
			&events.RunInterruptedEvent{Meta: meta(3, ""), Interrupt: events.Interrupt{Agent: "assistant"}}},
		{"run.completed with usage decodes with it.", usageJSON,
			&events.RunCompletedEvent{Meta: meta(4, ""), Status: events.StatusComplete, Usage: &events.Usage{PromptTokens: 12, CompletionTokens: 5, TotalTokens: 17}}},
		{"A null usage counts as absent.", splice(runCompletedJSON, `}`, `,"usage":null}`), &events.RunCompletedEvent{Meta: meta(4, ""), Status: events.StatusIncomplete}},
		{"Usage members may come in any order.", splice(usageJSON, `"prompt_tokens":12,"completion_tokens":5,"total_tokens":17`, `"total_tokens":17,"prompt_tokens":12,"completion_tokens":5`),
			&events.RunCompletedEvent{Meta: meta(4, ""), Status: events.StatusComplete, Usage: &events.Usage{PromptTokens: 12, CompletionTokens: 5, TotalTokens: 17}}},
		{"A state.changed event decodes with its keys.", stateJSON,
			&events.StateChangedEvent{Meta: meta(3, ""), Conversation: []string{"cart", "step"}, User: []string{"language"}}},
		{"A state.changed event with an empty list decodes it as none.", splice(stateJSON, `["cart","step"]`, `[]`),
			&events.StateChangedEvent{Meta: meta(3, ""), User: []string{"language"}}},
		{"A truncated state.changed event decodes truncated.", splice(stateJSON, `}}`, `},"truncated":true}`),
			&events.StateChangedEvent{Meta: meta(3, ""), Conversation: []string{"cart", "step"}, User: []string{"language"}, Truncated: true}},
		{"A state key of 128 bytes is accepted.", splice(stateJSON, `"language"`, `"`+strings.Repeat("k", 128)+`"`),
			&events.StateChangedEvent{Meta: meta(3, ""), Conversation: []string{"cart", "step"}, User: []string{strings.Repeat("k", 128)}}},
		{"An artifact.saved event decodes with its artifact.", artifactJSON,
			&events.ArtifactSavedEvent{Meta: meta(3, ""), Artifact: events.ArtifactInfo{Name: "chart.png", Version: 2, MIME: "image/png", Size: 5120}}},
		{"An artifact.saved event of an empty user: artifact with MIME parameters decodes.",
			splice(splice(splice(artifactJSON, `"chart.png"`, `"user:notes.txt"`), `"image/png"`, `"text/plain; charset=utf-8"`), `5120`, `0`),
			&events.ArtifactSavedEvent{Meta: meta(3, ""), Artifact: events.ArtifactInfo{Name: "user:notes.txt", Version: 2, MIME: "text/plain; charset=utf-8"}}},
		{"An artifact.saved event with a name and a MIME type of 128 bytes decodes.",
			splice(splice(artifactJSON, `"chart.png"`, `"`+strings.Repeat("n", 128)+`"`), `"image/png"`, `"`+strings.Repeat("m", 128)+`"`),
			&events.ArtifactSavedEvent{Meta: meta(3, ""), Artifact: events.ArtifactInfo{Name: strings.Repeat("n", 128), Version: 2, MIME: strings.Repeat("m", 128), Size: 5120}}},
		{"A state key with a space is accepted (only control characters are not).", splice(stateJSON, `"language"`, `"my language"`),
			&events.StateChangedEvent{Meta: meta(3, ""), Conversation: []string{"cart", "step"}, User: []string{"my language"}}},
		{"A state.changed event with an empty user list decodes it as none.", splice(stateJSON, `["language"]`, `[]`),
			&events.StateChangedEvent{Meta: meta(3, ""), Conversation: []string{"cart", "step"}}},
		{"An artifact name with a space decodes (only control characters are refused).", splice(artifactJSON, `"chart.png"`, `"my chart.png"`),
			&events.ArtifactSavedEvent{Meta: meta(3, ""), Artifact: events.ArtifactInfo{Name: "my chart.png", Version: 2, MIME: "image/png", Size: 5120}}},
		{"A run.started event with an agent of 256 bytes decodes.", splice(runStartedJSON, `}`, `,"agent":"`+strings.Repeat("a", events.MaxAgentBytes)+`"}`),
			&events.RunStartedEvent{Meta: meta(1, ""), Agent: strings.Repeat("a", events.MaxAgentBytes)}},
		{"An artifact.saved event with a cursor decodes with the cursor.", splice(artifactJSON, `}}`, `},"cursor":"0-9"}`),
			&events.ArtifactSavedEvent{Meta: meta(3, "0-9"), Artifact: events.ArtifactInfo{Name: "chart.png", Version: 2, MIME: "image/png", Size: 5120}}},
		{"The largest seq and ts are accepted.", splice(splice(runStartedJSON, `"seq":1`, `"seq":9223372036854775807`), `"ts":1700000000123456789`, `"ts":9223372036854775807`),
			&events.RunStartedEvent{Meta: events.Meta{Conversation: "c1", RequestID: "r-1", RunID: "run-1", Seq: 1<<63 - 1, TS: 1<<63 - 1}}},
	}
	for _, s := range []events.Status{events.StatusComplete, events.StatusIncomplete, events.StatusCancelled,
		events.StatusDiscarded, events.StatusRejected, events.StatusFailed, events.StatusInterrupted} {
		tests = append(tests, struct {
			name string
			in   string
			want events.Event
		}{fmt.Sprintf("The status %s is accepted.", s), splice(runCompletedJSON, `"incomplete"`, `"`+string(s)+`"`),
			&events.RunCompletedEvent{Meta: meta(4, ""), Status: s}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := events.DecodeEvent([]byte(tt.in))
			if err != nil {
				t.Fatalf("DecodeEvent(%s): %v", truncateForLog(tt.in), err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("DecodeEvent = %#v, want %#v", got, tt.want)
			}
			if got.Type() != tt.want.Type() {
				t.Errorf("Type() = %q, want %q", got.Type(), tt.want.Type())
			}
		})
	}
}

func TestDecodeEventRejectsBadEvents(t *testing.T) {
	t.Parallel()
	type tc struct {
		name string
		in   string
	}
	tests := []tc{
		{"Empty input is rejected.", ""},
		{"null is rejected.", "null"},
		{"An array is rejected.", "[" + runStartedJSON + "]"},
		{"A truncated event is rejected.", runStartedJSON[:len(runStartedJSON)-1]},
		{"A second object after the event is rejected.", runStartedJSON + runStartedJSON},
		{"Trailing text after the event is rejected.", runStartedJSON + "x"},
		{"A missing type is rejected.", splice(runStartedJSON, `"type":"run.started",`, ``)},
		{"A run.started event with an empty agent is rejected.", splice(runStartedJSON, `}`, `,"agent":""}`)},
		{"A run.started event with an agent over 256 bytes is rejected.", splice(runStartedJSON, `}`, `,"agent":"`+strings.Repeat("a", events.MaxAgentBytes+1)+`"}`)},
		{"A run.started event with a role is rejected.", splice(runStartedJSON, `}`, `,"role":"assistant"}`)},
		{"An empty type is rejected.", splice(runStartedJSON, `"run.started"`, `""`)},
		{"An unknown type is rejected.", splice(runStartedJSON, `"run.started"`, `"run.paused"`)},
		{"A capitalised type is rejected.", splice(tokenJSON, `"token"`, `"Token"`)},
		{"The subscribed control frame is not an event.", `{"type":"subscribed","conversation":"c1"}`},
		{"An unknown field is rejected.", splice(runStartedJSON, `}`, `,"extra":1}`)},
		{"A case-variant field name is rejected.", splice(runStartedJSON, `"conversation"`, `"Conversation"`)},
		{"A duplicated field is rejected.", splice(runStartedJSON, `}`, `,"seq":1}`)},
		{"A duplicated type that changes the type is rejected.", splice(runStartedJSON, `}`, `,"type":"token"}`)},
		{"A missing conversation is rejected.", splice(runStartedJSON, `"conversation":"c1",`, ``)},
		{"A conversation breaking the ID rule is rejected.", splice(runStartedJSON, `"c1"`, `"c/1"`)},
		{"A missing request_id is rejected.", splice(runStartedJSON, `"request_id":"r-1",`, ``)},
		{"A request_id breaking the ID rule is rejected.", splice(runStartedJSON, `"r-1"`, `"r 1"`)},
		{"A missing run_id is rejected.", splice(runStartedJSON, `"run_id":"run-1",`, ``)},
		{"A run_id of 129 bytes is rejected.", splice(runStartedJSON, `"run-1"`, `"`+strings.Repeat("r", 129)+`"`)},
		{"A missing seq is rejected.", splice(runStartedJSON, `"seq":1,`, ``)},
		{"A seq of 0 is rejected.", splice(runStartedJSON, `"seq":1`, `"seq":0`)},
		{"A negative seq is rejected.", splice(runStartedJSON, `"seq":1`, `"seq":-1`)},
		{"A fractional seq is rejected.", splice(runStartedJSON, `"seq":1`, `"seq":1.5`)},
		{"A seq given as a string is rejected.", splice(runStartedJSON, `"seq":1`, `"seq":"1"`)},
		{"A seq over int64 is rejected.", splice(runStartedJSON, `"seq":1`, `"seq":9223372036854775808`)},
		{"A missing ts is rejected.", splice(runStartedJSON, `,"ts":1700000000123456789`, ``)},
		{"A ts of 0 is rejected.", splice(runStartedJSON, `1700000000123456789`, `0`)},
		{"A negative ts is rejected.", splice(runStartedJSON, `1700000000123456789`, `-5`)},
		{"A ts in exponent form is rejected.", splice(runStartedJSON, `1700000000123456789`, `1.7e18`)},
		{"A ts given as an RFC 3339 string is rejected.", splice(runStartedJSON, `1700000000123456789`, `"2023-11-14T22:13:20Z"`)},
		{"An empty cursor is rejected.", splice(runStartedJSON, `}`, `,"cursor":""}`)},
		{"A cursor of 129 bytes is rejected.", splice(runStartedJSON, `}`, `,"cursor":"`+strings.Repeat("k", 129)+`"}`)},
		{"A numeric cursor is rejected.", splice(runStartedJSON, `}`, `,"cursor":17}`)},
		{"run.started with a delta is rejected.", splice(runStartedJSON, `}`, `,"delta":"x"}`)},
		{"run.started with a status is rejected.", splice(runStartedJSON, `}`, `,"status":"complete"}`)},
		{"run.started with a message is rejected.", splice(runStartedJSON, `}`, `,"message":"x"}`)},
		{"A token without delta is rejected.", splice(tokenJSON, `"delta":"echo ",`, ``)},
		{"A token without agent is rejected.", splice(tokenJSON, `"agent":"echo",`, ``)},
		{"A token without role is rejected.", splice(tokenJSON, `,"role":"assistant"`, ``)},
		{"A token with a null delta is rejected.", splice(tokenJSON, `"echo "`, `null`)},
		{"A token with an empty role is rejected.", splice(tokenJSON, `"assistant"`, `""`)},
		{"A token with a role of 33 bytes is rejected.", splice(tokenJSON, `"assistant"`, `"`+strings.Repeat("r", 33)+`"`)},
		{"A token with an agent of 257 bytes is rejected.", splice(tokenJSON, `"agent":"echo"`, `"agent":"`+strings.Repeat("a", 257)+`"`)},
		{"A token with a delta one byte over the limit is rejected.", splice(tokenJSON, `"echo "`, `"`+strings.Repeat("d", events.MaxDeltaBytes+1)+`"`)},
		{"A token with a message is rejected.", splice(tokenJSON, `}`, `,"message":"x"}`)},
		{"A token with a status is rejected.", splice(tokenJSON, `}`, `,"status":"complete"}`)},
		{"A token with a numeric delta is rejected.", splice(tokenJSON, `"echo "`, `5`)},
		{"A token with invalid UTF-8 in the delta is rejected.", splice(tokenJSON, `"echo "`, "\"ec\xffho\"")},
		{"A token with an unpaired surrogate in the delta is rejected.", splice(tokenJSON, `"echo "`, `"\ud83d"`)},
		{"A notice without message is rejected.", splice(noticeJSON, `,"message":"model failed: injected failure"`, ``)},
		{"A notice with a delta is rejected.", splice(noticeJSON, `}`, `,"delta":"x"}`)},
		{"A notice message one byte over the limit is rejected.", splice(noticeJSON, `"model failed: injected failure"`, `"`+strings.Repeat("m", events.MaxNoticeBytes+1)+`"`)},
		{"run.completed without status is rejected.", splice(runCompletedJSON, `,"status":"incomplete"`, ``)},
		{"run.completed with a null status is rejected.", splice(runCompletedJSON, `"incomplete"`, `null`)},
		{"run.completed with an unknown status is rejected.", splice(runCompletedJSON, `"incomplete"`, `"done"`)},
		{"run.completed with a capitalised status is rejected.", splice(runCompletedJSON, `"incomplete"`, `"Complete"`)},
		{"run.completed with an empty status is rejected.", splice(runCompletedJSON, `"incomplete"`, `""`)},
		{"run.completed with a delta is rejected.", splice(runCompletedJSON, `}`, `,"delta":""}`)},
		{"agent.transfer without to is rejected.", splice(transferJSON, `,"to":"researcher"`, ``)},
		{"agent.transfer without from is rejected.", splice(transferJSON, `"from":"supervisor",`, ``)},
		{"agent.transfer to an empty agent is rejected.", splice(transferJSON, `"researcher"`, `""`)},
		{"agent.transfer to an agent of 257 bytes is rejected.", splice(transferJSON, `"researcher"`, `"`+strings.Repeat("a", 257)+`"`)},
		{"agent.transfer with a delta is rejected.", splice(transferJSON, `}`, `,"delta":"x"}`)},
		{"state.changed without keys is rejected.", splice(stateJSON, `,"keys":{"conversation":["cart","step"],"user":["language"]}`, ``)},
		{"state.changed with null keys is rejected.", splice(stateJSON, `{"conversation":["cart","step"],"user":["language"]}`, `null`)},
		{"state.changed without the user list is rejected.", splice(stateJSON, `,"user":["language"]`, ``)},
		{"state.changed without the conversation list is rejected.", splice(stateJSON, `"conversation":["cart","step"],`, ``)},
		{"state.changed with a null list is rejected.", splice(stateJSON, `["language"]`, `null`)},
		{"state.changed listing no key at all is rejected.", splice(splice(stateJSON, `["cart","step"]`, `[]`), `["language"]`, `[]`)},
		{"state.changed with a value is rejected.", splice(stateJSON, `"user":["language"]`, `"user":["language"],"values":{"language":"fr"}`)},
		{"state.changed with a key object instead of a name is rejected.", splice(stateJSON, `"language"`, `{"k":"language","v":"fr"}`)},
		{"state.changed with a tenant list is rejected.", splice(stateJSON, `"user":["language"]`, `"user":["language"],"tenant":["plan"]`)},
		{"state.changed with a duplicated list is rejected.", splice(stateJSON, `"user":["language"]`, `"user":["language"],"user":["x"]`)},
		{"state.changed with a case variant of a list is rejected.", splice(stateJSON, `"user":`, `"User":`)},
		{"state.changed listing a key twice is rejected.", splice(stateJSON, `["cart","step"]`, `["cart","cart"]`)},
		{"state.changed with an empty key is rejected.", splice(stateJSON, `"step"`, `""`)},
		{"state.changed with a key of 129 bytes is rejected.", splice(stateJSON, `"step"`, `"`+strings.Repeat("k", 129)+`"`)},
		{"state.changed with a key holding a control character is rejected.", splice(stateJSON, `"step"`, `"st\u0001ep"`)},
		{"state.changed with 129 keys of a scope is rejected.", splice(stateJSON, `["language"]`, keyList(129, 8))},
		{"state.changed with more than 16 KiB of keys is rejected.", splice(splice(stateJSON, `["language"]`, keyList(128, 100)), `["cart","step"]`, keyList(128, 100))},
		{"state.changed with truncated false is rejected.", splice(stateJSON, `}}`, `},"truncated":false}`)},
		{"state.changed with a status is rejected.", splice(stateJSON, `}}`, `},"status":"complete"}`)},
		{"artifact.saved without artifact is rejected.", splice(artifactJSON, `,"artifact":{"name":"chart.png","version":2,"mime_type":"image/png","size":5120}`, ``)},
		{"artifact.saved with a null artifact is rejected.", splice(artifactJSON, `{"name":"chart.png","version":2,"mime_type":"image/png","size":5120}`, `null`)},
		{"artifact.saved with an artifact that is not an object is rejected.", splice(artifactJSON, `{"name":"chart.png","version":2,"mime_type":"image/png","size":5120}`, `"chart.png"`)},
		{"artifact.saved with flat members instead of an artifact is rejected.", splice(artifactJSON, `"artifact":{"name":"chart.png","version":2,"mime_type":"image/png","size":5120}`, `"name":"chart.png","version":2,"mime_type":"image/png","size":5120`)},
		{"An artifact without a name is rejected.", splice(artifactJSON, `"name":"chart.png",`, ``)},
		{"An artifact without a version is rejected.", splice(artifactJSON, `"version":2,`, ``)},
		{"An artifact without a mime_type is rejected.", splice(artifactJSON, `"mime_type":"image/png",`, ``)},
		{"An artifact without a size is rejected.", splice(artifactJSON, `,"size":5120`, ``)},
		{"An artifact with an unknown member is rejected.", splice(artifactJSON, `"size":5120`, `"size":5120,"etag":"x"`)},
		{"An artifact with a duplicated member is rejected.", splice(artifactJSON, `"version":2`, `"version":2,"version":3`)},
		{"An artifact with a case-variant member is rejected.", splice(artifactJSON, `"mime_type"`, `"MIME_Type"`)},
		{"An artifact with an empty name is rejected.", splice(artifactJSON, `"chart.png"`, `""`)},
		{"An artifact with a name of 129 bytes is rejected.", splice(artifactJSON, `"chart.png"`, `"`+strings.Repeat("n", 129)+`"`)},
		{"An artifact with a control character in its name is rejected.", splice(artifactJSON, `"chart.png"`, `"chart\u0000.png"`)},
		{"An artifact with invalid UTF-8 in its name is rejected.", splice(artifactJSON, `"chart.png"`, "\"ch\xffart\"")},
		{"An artifact of version 0 is rejected.", splice(artifactJSON, `"version":2`, `"version":0`)},
		{"An artifact of a negative version is rejected.", splice(artifactJSON, `"version":2`, `"version":-1`)},
		{"An artifact of a fractional version is rejected.", splice(artifactJSON, `"version":2`, `"version":2.5`)},
		{"An artifact with a version given as a string is rejected.", splice(artifactJSON, `"version":2`, `"version":"2"`)},
		{"An artifact with an empty MIME type is rejected.", splice(artifactJSON, `"image/png"`, `""`)},
		{"An artifact with a MIME type of 129 bytes is rejected.", splice(artifactJSON, `"image/png"`, `"`+strings.Repeat("m", 129)+`"`)},
		{"An artifact with a non-ASCII MIME type is rejected.", splice(artifactJSON, `"image/png"`, `"image/pngé"`)},
		{"An artifact with a negative size is rejected.", splice(artifactJSON, `"size":5120`, `"size":-1`)},
		{"artifact.saved with a DEL in its MIME type is rejected.", splice(artifactJSON, `"image/png"`, `"image/png\u007f"`)},
		{"artifact.saved with a status is rejected.", splice(artifactJSON, `}}`, `},"status":"complete"}`)},
		{"artifact.saved with keys is rejected.", splice(artifactJSON, `}}`, `},"keys":{"conversation":["a"],"user":[]}}`)},
		{"artifact on another event type is rejected.", splice(runCompletedJSON, `}`, `,"artifact":{"name":"a","version":1,"mime_type":"text/plain","size":1}}`)},
		{"A case variant of the artifact member is rejected.", splice(artifactJSON, `"artifact"`, `"Artifact"`)},
		{"A duplicated artifact member is rejected.", splice(artifactJSON, `}}`, `},"artifact":{"name":"b","version":1,"mime_type":"text/plain","size":1}}`)},
		{"truncated on another event type is rejected.", splice(runCompletedJSON, `}`, `,"truncated":true}`)},
		{"keys on another event type is rejected.", splice(runCompletedJSON, `}`, `,"keys":{"conversation":["a"],"user":[]}}`)},
		{"A token with a to field is rejected.", splice(tokenJSON, `}`, `,"to":"x"}`)},
		{"run.interrupted without interrupt is rejected.", splice(interruptedJSON, `,"interrupt":{"agent":"assistant","tool":"ask_user","question":"Which city?"}`, ``)},
		{"run.interrupted with a null interrupt is rejected.", splice(interruptedJSON, `{"agent":"assistant","tool":"ask_user","question":"Which city?"}`, `null`)},
		{"An interrupt that is not an object is rejected.", splice(interruptedJSON, `{"agent":"assistant","tool":"ask_user","question":"Which city?"}`, `"ask"`)},
		{"An interrupt without a question is rejected.", splice(interruptedJSON, `,"question":"Which city?"`, ``)},
		{"An interrupt with an unknown field is rejected.", splice(interruptedJSON, `"question":"Which city?"`, `"question":"Which city?","id":"x"`)},
		{"An interrupt with a duplicated field is rejected.", splice(interruptedJSON, `"question":"Which city?"`, `"question":"Which city?","question":"x"`)},
		{"An interrupt with a case-variant field is rejected.", splice(interruptedJSON, `"question"`, `"Question"`)},
		{"An interrupt question one byte over the limit is rejected.", splice(interruptedJSON, `"Which city?"`, `"`+strings.Repeat("q", events.MaxQuestionBytes+1)+`"`)},
		{"An interrupt with invalid UTF-8 is rejected.", splice(interruptedJSON, `"Which city?"`, "\"Wh\xffich\"")},
		{"run.interrupted with a status is rejected.", splice(interruptedJSON, `}}`, `},"status":"interrupted"}`)},
		{"A notice with an interrupt is rejected.", splice(noticeJSON, `}`, `,"interrupt":{"agent":"a","tool":"","question":""}}`)},
		{"Usage on a token event is rejected.", splice(tokenJSON, `}`, `,"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)},
		{"Usage without total_tokens is rejected.", splice(usageJSON, `,"total_tokens":17`, ``)},
		{"Usage with a negative count is rejected.", splice(usageJSON, `"completion_tokens":5`, `"completion_tokens":-5`)},
		{"Usage with a fractional count is rejected.", splice(usageJSON, `"completion_tokens":5`, `"completion_tokens":5.5`)},
		{"Usage with an unknown field is rejected.", splice(usageJSON, `"total_tokens":17`, `"total_tokens":17,"cached_tokens":1`)},
		{"Usage with a case-variant field is rejected.", splice(usageJSON, `"total_tokens"`, `"Total_Tokens"`)},
		{"Usage with a duplicated field is rejected.", splice(usageJSON, `"total_tokens":17`, `"total_tokens":17,"total_tokens":18`)},
		{"Usage given as an array is rejected.", splice(usageJSON, `{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}`, `[12,5,17]`)},
		{"An event over the event size limit is rejected.", splice(runStartedJSON, `}`, strings.Repeat(" ", events.MaxEventBytes)+`}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := events.DecodeEvent([]byte(tt.in))
			if err == nil {
				t.Fatalf("DecodeEvent(%s) = %#v, want an error", truncateForLog(tt.in), got)
			}
			if got != nil {
				t.Errorf("DecodeEvent returned %#v with an error, want nil", got)
			}
			if !errors.Is(err, events.ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
}

func TestAppendEventWritesTheDocumentedShape(t *testing.T) {
	t.Parallel()
	meta := func(seq int64) events.Meta {
		return events.Meta{Conversation: "c1", RequestID: "r-1", RunID: "run-1", Seq: seq, TS: 1700000000123456789}
	}
	tests := []struct {
		name string
		e    events.Event
		want string
	}{
		{"run.started has only the common fields.", &events.RunStartedEvent{Meta: meta(1)}, runStartedJSON},
		{"run.started from a sub-agent carries the agent.", &events.RunStartedEvent{Meta: meta(1), Agent: "billing"}, splice(runStartedJSON, `}`, `,"agent":"billing"}`)},
		{"token carries delta, agent and role.", &events.TokenEvent{Meta: meta(2), Delta: "echo ", Agent: "echo", Role: "assistant"}, tokenJSON},
		{"notice carries a message.", &events.NoticeEvent{Meta: meta(3), Message: "model failed: injected failure"}, noticeJSON},
		{"run.completed carries a status.", &events.RunCompletedEvent{Meta: meta(4), Status: events.StatusIncomplete}, runCompletedJSON},
		{"agent.transfer carries from and to.", &events.AgentTransferEvent{Meta: meta(2), From: "supervisor", To: "researcher"}, transferJSON},
		{"run.interrupted carries the interrupt.", &events.RunInterruptedEvent{Meta: meta(3),
			Interrupt: events.Interrupt{Agent: "assistant", Tool: "ask_user", Question: "Which city?"}}, interruptedJSON},
		{"run.completed carries usage when it is known.", &events.RunCompletedEvent{Meta: meta(4), Status: events.StatusComplete,
			Usage: &events.Usage{PromptTokens: 12, CompletionTokens: 5, TotalTokens: 17}}, usageJSON},
		{"state.changed carries the keys of each scope.", &events.StateChangedEvent{Meta: meta(3), Conversation: []string{"cart", "step"},
			User: []string{"language"}}, stateJSON},
		{"state.changed writes an empty scope as an empty list.", &events.StateChangedEvent{Meta: meta(3), User: []string{"language"}},
			splice(stateJSON, `["cart","step"]`, `[]`)},
		{"state.changed writes truncated only when set.", &events.StateChangedEvent{Meta: meta(3), Conversation: []string{"cart", "step"},
			User: []string{"language"}, Truncated: true}, splice(stateJSON, `}}`, `},"truncated":true}`)},
		{"artifact.saved carries the artifact's name, version, MIME type and size.", &events.ArtifactSavedEvent{Meta: meta(3),
			Artifact: events.ArtifactInfo{Name: "chart.png", Version: 2, MIME: "image/png", Size: 5120}}, artifactJSON},
		{"A cursor in the header is written last.", &events.TokenEvent{Meta: events.Meta{Conversation: "c1", RequestID: "r-1", RunID: "run-1",
			Seq: 2, TS: 1700000000123456789, Cursor: "0-17"}, Delta: "echo ", Agent: "echo", Role: "assistant"}, tokenCursorJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := string(events.MarshalEvent(tt.e)); got != tt.want {
				t.Fatalf("MarshalEvent =\n%s\nwant\n%s", got, tt.want)
			}
			prefix := []byte("prefix:")
			if got := string(events.AppendEvent(prefix, tt.e)); got != "prefix:"+tt.want {
				t.Fatalf("AppendEvent did not append to dst: %s", got)
			}
		})
	}
}

func TestAppendCursorStampsAnEncodedEvent(t *testing.T) {
	t.Parallel()
	e := &events.TokenEvent{Meta: testMeta(), Delta: "hi", Agent: "echo", Role: "assistant"}
	value := events.MarshalEvent(e)
	for _, cursor := range []string{"0-17", `we"ird\cursor` + "\u2028"} {
		frame := events.AppendCursor(append([]byte(nil), value[:len(value)-1]...), cursor)
		got, err := events.DecodeEvent(frame)
		if err != nil {
			t.Fatalf("DecodeEvent(%s): %v", frame, err)
		}
		want := *e
		want.Cursor = cursor
		if !reflect.DeepEqual(got, &want) {
			t.Fatalf("stamped event = %#v, want %#v", got, &want)
		}
		// The stamped frame is exactly what AppendEvent writes for an
		// event carrying that cursor, so clients see one encoding.
		if direct := events.MarshalEvent(&want); string(direct) != string(frame) {
			t.Errorf("AppendCursor frame %s differs from AppendEvent %s", frame, direct)
		}
	}
}

// texts are strings that exercise every branch of the string encoder.
var texts = []string{
	"",
	"plain ascii",
	`quote " and backslash \ and slash /`,
	"newline\n return\r tab\t backspace\b formfeed\f",
	"all controls: \x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f",
	"DEL \x7f stays raw",
	"html <script>alert('&')</script> is not escaped",
	"line separators \u2028 and \u2029 in JavaScript",
	"unicode: é ß 中文 😀 \U0010FFFF \uFFFD \uFEFF",
	"invalid: \xff \xfe \xc3 \xe2\x82 \xf0\x9f\x98 \xed\xa0\x80 \xc0\xaf end",
	"\xff",
	"ends with a partial rune \xe2",
}

// randomText builds text that mixes every interesting kind of byte.
func randomText(r *rand.Rand) string {
	pieces := []string{"a", "Z", " ", `"`, `\`, "/", "\n", "\x00", "\x1f", "\x7f", "<", "&", "é", "中", "😀",
		"\u2028", "\u2029", "\uFFFD", "\xff", "\xe2\x82", "\xed\xa0\x80", "\xf4\x90\x80\x80"}
	var b strings.Builder
	for n := r.IntN(40); n > 0; n-- {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

func TestAppendEventRoundTripsThroughDecodeEvent(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	inputs := append([]string(nil), texts...)
	for range 500 {
		inputs = append(inputs, randomText(r))
	}
	for i, s := range inputs {
		want := replaceEachInvalidByte(s)
		evs := []events.Event{
			&events.TokenEvent{Meta: testMeta(), Delta: s, Agent: "echo", Role: "assistant"},
			&events.NoticeEvent{Meta: testMeta(), Message: s},
		}
		for _, e := range evs {
			b := events.MarshalEvent(e)
			if !json.Valid(b) {
				t.Fatalf("input %d: MarshalEvent wrote invalid JSON: %q", i, b)
			}
			got, err := events.DecodeEvent(b)
			if err != nil {
				t.Fatalf("input %d (%q): DecodeEvent(%q): %v", i, s, b, err)
			}
			var text string
			switch g := got.(type) {
			case *events.TokenEvent:
				text = g.Delta
			case *events.NoticeEvent:
				text = g.Message
			}
			if text != want {
				t.Fatalf("input %d: round trip of %q = %q, want %q", i, s, text, want)
			}
		}
	}
}

// replaceEachInvalidByte replaces every byte that is not part of a valid
// UTF-8 sequence by U+FFFD, as encoding/json does (strings.ToValidUTF8
// would fold a run of them into one).
func replaceEachInvalidByte(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// The hand-written encoder must agree with encoding/json: the same values,
// and byte for byte the same strings as an Encoder without HTML escaping.
func TestAppendEventAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	type wire struct {
		Type         string `json:"type"`
		Conversation string `json:"conversation"`
		RequestID    string `json:"request_id"`
		RunID        string `json:"run_id"`
		Seq          int64  `json:"seq"`
		TS           int64  `json:"ts"`
		Delta        string `json:"delta"`
		Agent        string `json:"agent"`
		Role         string `json:"role"`
		Cursor       string `json:"cursor"`
	}
	r := rand.New(rand.NewPCG(3, 4))
	inputs := append([]string(nil), texts...)
	for range 500 {
		inputs = append(inputs, randomText(r))
	}
	for i, s := range inputs {
		m := testMeta()
		m.Seq, m.TS, m.Cursor = int64(i)+1, r.Int64(), "cur"+s
		e := &events.TokenEvent{Meta: m, Delta: s, Agent: s, Role: s}
		b := events.MarshalEvent(e)
		var got wire
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("input %d: encoding/json cannot parse %q: %v", i, b, err)
		}
		want := replaceEachInvalidByte(s)
		if got.Type != "token" || got.Conversation != m.Conversation || got.RequestID != m.RequestID || got.RunID != m.RunID ||
			got.Seq != m.Seq || got.TS != m.TS || got.Delta != want || got.Agent != want || got.Role != want ||
			got.Cursor != "cur"+want {
			t.Fatalf("input %d: encoding/json read %+v from %q", i, got, b)
		}
		var std strings.Builder
		enc := json.NewEncoder(&std)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if wantDelta := `"delta":` + strings.TrimSuffix(std.String(), "\n") + `,`; !strings.Contains(string(b), wantDelta) {
			t.Fatalf("input %d: AppendEvent wrote %q, encoding/json writes %s", i, b, wantDelta)
		}
	}
}

// Any event whose fields are within the limits, however much escaping it
// needs, encodes within MaxEventBytes and so decodes again: the push gateway
// forwards what workers write, and clients decode it.
func TestMaximalEventsFitTheEventLimit(t *testing.T) {
	t.Parallel()
	maxMeta := events.Meta{
		Conversation: strings.Repeat("c", events.MaxIDLen), RequestID: strings.Repeat("r", events.MaxIDLen),
		RunID: strings.Repeat("u", events.MaxIDLen), Seq: 1<<63 - 1, TS: 1<<63 - 1,
		Cursor: strings.Repeat("\x01", events.MaxCursorBytes),
	}
	for _, fill := range []string{"\x01", `"`, "\u2028"} {
		rep := func(n int) string { return strings.Repeat(fill, n/len(fill)) }
		// An artifact's name has no control characters: the longest
		// escape it can need is `\"`.
		artName := rep(events.MaxArtifactNameBytes)
		if fill == "\x01" {
			artName = strings.Repeat(`"`, events.MaxArtifactNameBytes)
		}
		for _, e := range []events.Event{
			&events.TokenEvent{Meta: maxMeta, Delta: rep(events.MaxDeltaBytes), Agent: rep(events.MaxAgentBytes), Role: rep(30)},
			&events.NoticeEvent{Meta: maxMeta, Message: rep(events.MaxNoticeBytes)},
			&events.AgentTransferEvent{Meta: maxMeta, From: rep(events.MaxAgentBytes), To: rep(events.MaxAgentBytes)},
			&events.RunInterruptedEvent{Meta: maxMeta, Interrupt: events.Interrupt{Agent: rep(events.MaxAgentBytes),
				Tool: rep(events.MaxAgentBytes), Question: rep(events.MaxQuestionBytes)}},
			&events.RunCompletedEvent{Meta: maxMeta, Status: events.StatusInterrupted,
				Usage: &events.Usage{PromptTokens: 1<<63 - 1, CompletionTokens: 1<<63 - 1, TotalTokens: 1<<63 - 1}},
			maximalStateChanged(maxMeta, fill),
			&events.ArtifactSavedEvent{Meta: maxMeta, Artifact: events.ArtifactInfo{Name: artName,
				Version: 1<<63 - 1, MIME: strings.Repeat("m", events.MaxArtifactMIMEBytes), Size: 1<<63 - 1}},
		} {
			b := events.MarshalEvent(e)
			if len(b) > events.MaxEventBytes {
				t.Errorf("%s filled with %q encodes in %d bytes, over MaxEventBytes %d", e.Type(), fill, len(b), events.MaxEventBytes)
				continue
			}
			if _, err := events.DecodeEvent(b); err != nil {
				t.Errorf("%s filled with %q: DecodeEvent: %v", e.Type(), fill, err)
			}
		}
	}
}

func TestStatusPersisted(t *testing.T) {
	t.Parallel()
	want := map[events.Status]bool{
		events.StatusComplete: true, events.StatusIncomplete: true, events.StatusCancelled: true,
		events.StatusDiscarded: false, events.StatusRejected: false, events.StatusFailed: false,
		events.StatusInterrupted: true,
	}
	for s, persisted := range want {
		if s.Persisted() != persisted {
			t.Errorf("Status(%q).Persisted() = %v, want %v", s, !persisted, persisted)
		}
		if err := s.Validate(); err != nil {
			t.Errorf("Status(%q).Validate() = %v", s, err)
		}
	}
	for _, s := range []events.Status{"", "done", "COMPLETE"} {
		if s.Persisted() {
			t.Errorf("Status(%q).Persisted() = true", s)
		}
		if err := s.Validate(); !errors.Is(err, events.ErrInvalid) {
			t.Errorf("Status(%q).Validate() = %v, want ErrInvalid", s, err)
		}
	}
}

func TestHeaderGivesAccessToTheCommonFields(t *testing.T) {
	t.Parallel()
	for _, e := range []events.Event{&events.RunStartedEvent{}, &events.TokenEvent{}, &events.NoticeEvent{}, &events.RunCompletedEvent{},
		&events.AgentTransferEvent{}, &events.RunInterruptedEvent{}, &events.StateChangedEvent{},
		&events.ArtifactSavedEvent{}} {
		e.Header().Seq = 7
		if e.Header().Seq != 7 {
			t.Errorf("%s: Header() does not point into the event", e.Type())
		}
	}
}

// keyList is a JSON array of n distinct state keys of size bytes each.
func keyList(n, size int) string {
	keys := make([]string, n)
	for i := range keys {
		k := fmt.Sprintf("%d-", i)
		keys[i] = `"` + k + strings.Repeat("k", size-len(k)) + `"`
	}
	return "[" + strings.Join(keys, ",") + "]"
}

// maximalStateChanged is a state.changed event listing keys of MaxStateChangedBytes
// in all, each of them fill repeated (made distinct by a suffix), as many
// as fit in MaxStateChangedKeys per scope. A fill that is a control
// character (which keys may not hold) is replaced by a quote.
func maximalStateChanged(m events.Meta, fill string) *events.StateChangedEvent {
	if fill < " " {
		fill = `"`
	}
	e := &events.StateChangedEvent{Meta: m, Truncated: true}
	per := events.MaxStateChangedBytes / (2 * events.MaxStateChangedKeys) // bytes per key
	for i := range 2 * events.MaxStateChangedKeys {
		suffix := fmt.Sprintf("%03d", i)
		k := strings.Repeat(fill, (per-len(suffix))/len(fill)) + suffix
		if i%2 == 0 {
			e.Conversation = append(e.Conversation, k)
		} else {
			e.User = append(e.User, k)
		}
	}
	return e
}
