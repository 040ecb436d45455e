package events_test

import (
	"errors"
	"fmt"

	"github.com/turnpike-dev/turnpike/pkg/events"
)

// A worker encodes a token event for the stream topic; a consumer of the
// requests topic decodes and validates a record that a direct producer
// wrote without a request id.
func Example() {
	tok := &events.TokenEvent{
		Meta: events.Meta{
			Conversation: "c1",
			RequestID:    "r-1",
			RunID:        "run-1",
			Seq:          2,
			TS:           1700000000000000000,
		},
		Delta: "hello ",
		Agent: "echo",
		Role:  "assistant",
	}
	buf := make([]byte, 0, 256)
	buf = events.AppendEvent(buf[:0], tok) // reuse buf for the next event
	fmt.Println(string(buf))

	value := []byte(`{"v":1,"tenant":"acme","user":"alice","conversation":"c1","content":"hi there"}`)
	req, err := events.DecodeRequest(value, 0)
	if err != nil {
		fmt.Println("dead-letter:", err)
		return
	}
	if req.RequestID == "" {
		// Direct producers may leave it out: derive it from the record.
		req.RequestID = events.DerivedRequestID(0, 41, req.CreatedAt)
	}
	fmt.Println(req.Identity().Key(), req.Content)

	_, err = events.DecodeRequest([]byte(`{"v":1,"Tenant":"acme"}`), 0)
	fmt.Println(errors.Is(err, events.ErrInvalid))
	// Output:
	// {"type":"token","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":2,"ts":1700000000000000000,"delta":"hello ","agent":"echo","role":"assistant"}
	// acme/alice/c1 hi there
	// true
}

// A client reads the end of a run that stopped to ask the user something,
// and the usage of the run.
func ExampleDecodeEvent_interrupted() {
	for _, frame := range []string{
		`{"type":"run.interrupted","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":3,"ts":1700000000000000000,"interrupt":{"agent":"assistant","tool":"ask_user","question":"Which day?"},"cursor":"1-4-9"}`,
		`{"type":"run.completed","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":4,"ts":1700000000000000000,"status":"interrupted","usage":{"prompt_tokens":20,"completion_tokens":3,"total_tokens":23},"cursor":"1-4-10"}`,
	} {
		e, err := events.DecodeEvent([]byte(frame))
		if err != nil {
			fmt.Println(err)
			return
		}
		switch e := e.(type) {
		case *events.RunInterruptedEvent:
			fmt.Printf("%s asks: %s (answer with POST …/resume, request_id %s)\n", e.Interrupt.Agent, e.Interrupt.Question, e.RequestID)
		case *events.RunCompletedEvent:
			fmt.Println(e.Status, e.Status.Persisted(), e.Usage.TotalTokens)
		}
	}
	// Output:
	// assistant asks: Which day? (answer with POST …/resume, request_id r-1)
	// interrupted true 23
}

// A client learns that a tool of the run saved an artifact, and dedupes
// the events by (name, version): a redelivered request may announce the
// same version again.
func ExampleDecodeEvent_artifactSaved() {
	seen := map[string]bool{}
	for _, frame := range []string{
		`{"type":"artifact.saved","conversation":"c1","request_id":"r-1","run_id":"run-1","seq":3,"ts":1700000000000000000,"artifact":{"name":"chart.png","version":2,"mime_type":"image/png","size":5120},"cursor":"1-4-9"}`,
		`{"type":"artifact.saved","conversation":"c1","request_id":"r-1","run_id":"run-2","seq":1,"ts":1700000000000000000,"artifact":{"name":"chart.png","version":2,"mime_type":"image/png","size":5120},"cursor":"1-4-12"}`,
	} {
		e, err := events.DecodeEvent([]byte(frame))
		if err != nil {
			fmt.Println(err)
			return
		}
		if a, ok := e.(*events.ArtifactSavedEvent); ok {
			key := fmt.Sprintf("%s@%d", a.Artifact.Name, a.Artifact.Version)
			if seen[key] {
				fmt.Println("again:", key)
				continue
			}
			seen[key] = true
			fmt.Printf("GET /v1/conversations/%s/artifacts/%s?version=%d (%s, %d bytes)\n",
				a.Conversation, a.Artifact.Name, a.Artifact.Version, a.Artifact.MIME, a.Artifact.Size)
		}
	}
	// Output:
	// GET /v1/conversations/c1/artifacts/chart.png?version=2 (image/png, 5120 bytes)
	// again: chart.png@2
}
