package topic_test

import (
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/turnpike-dev/turnpike/internal/topic"
)

func TestOriginIsTheFirstPlacement(t *testing.T) {
	t.Parallel()
	src := func(tp, p, o string) []kafka.Header {
		return []kafka.Header{{Key: topic.HeaderSourceTopic, Value: []byte(tp)}, {Key: topic.HeaderSourcePartition, Value: []byte(p)},
			{Key: topic.HeaderSourceOffset, Value: []byte(o)}}
	}
	tests := []struct {
		name    string
		headers []kafka.Header
		topic   string
		part    int
		off     int64
		fromHdr bool
	}{
		{"A record without source headers is its own origin.", nil, "t", 2, 40, false},
		{"A copy names its original.", src("t", "5", "7"), "t", 5, 7, true},
		{"Two of the three headers are not an origin.", src("t", "5", "7")[:2], "t", 2, 40, false},
		{"A partition that is not a number is not an origin.", src("t", "five", "7"), "t", 2, 40, false},
		{"A negative offset is not an origin.", src("t", "5", "-1"), "t", 2, 40, false},
		{"An empty topic is not an origin.", src("", "5", "7"), "t", 2, 40, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := kafka.Message{Topic: "t", Partition: 2, Offset: 40, Headers: tt.headers}
			tp, p, o, fromHdr := topic.Origin(m)
			if tp != tt.topic || p != tt.part || o != tt.off || fromHdr != tt.fromHdr {
				t.Fatalf("Origin = %s/%d/%d %v, want %s/%d/%d %v", tp, p, o, fromHdr, tt.topic, tt.part, tt.off, tt.fromHdr)
			}
		})
	}
}

func TestSourceHeadersKeepOtherHeadersAndNameTheOrigin(t *testing.T) {
	t.Parallel()
	m := kafka.Message{Topic: "t", Partition: 2, Offset: 40, Headers: []kafka.Header{
		{Key: "traceparent", Value: []byte("00-abc")},
		{Key: topic.HeaderSourcePartition, Value: []byte("9")}, // incomplete: replaced
		{Key: "drop-me", Value: []byte("x")},
	}}
	got := topic.SourceHeaders(m, "drop-me")
	want := []kafka.Header{{Key: "traceparent", Value: []byte("00-abc")}, {Key: topic.HeaderSourceTopic, Value: []byte("t")},
		{Key: topic.HeaderSourcePartition, Value: []byte("2")}, {Key: topic.HeaderSourceOffset, Value: []byte("40")}}
	if len(got) != len(want) {
		t.Fatalf("headers %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Key != want[i].Key || string(got[i].Value) != string(want[i].Value) {
			t.Fatalf("header %d = %s:%s, want %s:%s", i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
		}
	}
	// Moved again, a copy still names the first placement.
	again := topic.SourceHeaders(kafka.Message{Topic: "t", Partition: 0, Offset: 3, Headers: got})
	if tp, p, o, ok := topic.Origin(kafka.Message{Headers: again}); !ok || tp != "t" || p != 2 || o != 40 || len(again) != 4 {
		t.Fatalf("a copy of a copy names %s/%d/%d (%v) with %d headers, want t/2/40 with 4", tp, p, o, ok, len(again))
	}
}
