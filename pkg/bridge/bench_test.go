package bridge_test

import (
	"context"
	"testing"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/schema"

	"github.com/turnpike-dev/turnpike/pkg/bridge"
	"github.com/turnpike-dev/turnpike/pkg/events"
	"github.com/turnpike-dev/turnpike/pkg/history"
)

type nopSink struct{ events int }

func (s *nopSink) Emit(context.Context, events.Identity, events.Event) error {
	s.events++
	return nil
}

type nopTurn struct{}

func (nopTurn) Commit(context.Context, string, string, events.Status, time.Time) (history.Committed, error) {
	return history.Committed{N: 1, Status: events.StatusComplete}, nil
}
func (nopTurn) Discard() {}

// BenchmarkBridgePerToken is the bridge's own cost per token: one streamed
// message of 1,000 chunks through Run to a sink that does nothing. With
// a free sink nothing coalesces, so each chunk becomes one token event.
//
//	go test -run '^$' -bench BridgePerToken -benchmem ./pkg/bridge/
func BenchmarkBridgePerToken(b *testing.B) {
	const tokens = 1000
	chunks := make([]*schema.Message, tokens)
	for i := range chunks {
		chunks[i] = schema.AssistantMessage("word ", nil)
	}
	sink := &nopSink{}
	br, err := bridge.New(bridge.Config{Sink: sink})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	id := events.Identity{Tenant: "t", User: "u", Conversation: "c"}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		iter, gen := adk.NewAsyncIteratorPair[*adk.AgentEvent]()
		gen.Send(&adk.AgentEvent{AgentName: "a", Output: &adk.AgentOutput{MessageOutput: &adk.MessageVariant{
			IsStreaming: true, MessageStream: schema.StreamReaderFromArray(chunks), Role: schema.Assistant,
		}}})
		gen.Close()
		if _, err := br.Run(ctx, bridge.Run{Identity: id, RequestID: "r", RunID: "run", Turn: nopTurn{}}, iter); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tokens), "ns/token")
	b.ReportMetric(float64(sink.events)/float64(b.N), "events/run")
}
